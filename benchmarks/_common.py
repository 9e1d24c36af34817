"""Helpers shared by the benchmark scripts (not part of batchscope, not run by the tests).

Every benchmark measures the things it compares in one run, side by side, and prints ratios:
on these noisy 2-core machines an absolute time alone means little.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
SAMPLES = ["samples/mlp.py", "samples/cnn.py", "samples/llm_decode.py", "samples/train_cnn.py"]


def bench_env() -> dict[str, str]:
    """The environment for child runs: ceilings cached in one place (measured once)."""
    env = dict(os.environ)
    env.setdefault("BATCHSCOPE_CACHE_DIR", "/tmp/bench-cache")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_timed(cmd: list[str], env: dict[str, str] | None = None,
              cwd: Path = ROOT) -> tuple[float, subprocess.CompletedProcess[str]]:
    """Run ``cmd`` to completion; wall seconds from start to exit, and its output."""
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env or bench_env(), text=True,
                          capture_output=True, check=False)
    wall = time.perf_counter() - started
    if proc.returncode not in (0, 1):
        sys.stderr.write(proc.stderr[-3000:])
        raise RuntimeError(f"{' '.join(cmd)} exited with {proc.returncode}")
    return wall, proc


def diagnose_cli(sample: str, out_dir: str, *args: str,
                 env: dict[str, str] | None = None) -> tuple[float, dict[str, Any]]:
    """batchscope's whole run as a user runs it: the ``diagnose`` command, start to exit."""
    diagnose = str(Path(PYTHON).parent / "diagnose")  # the console script README.md runs
    cmd = [diagnose, sample, "--device", "cpu", "--out", out_dir, *args]
    wall, _ = run_timed(cmd, env)
    return wall, json.loads((Path(out_dir) / "report.json").read_text())


def load_spec(path: str) -> Any:
    """The model file through batchscope's own loader (the contract's defaults)."""
    from batchscope.contract import load_model_file

    return load_model_file(path)


class Stepper:
    """One step of a sample at one batch size, as the worker runs it (inference or train)."""

    def __init__(self, path: str) -> None:
        import torch

        from batchscope.profiler.training import default_optimizer

        self.spec = load_spec(path)
        self.model = self.spec.build_model()
        self.train = self.spec.mode == "train"
        self.model.train() if self.train else self.model.eval()
        make = self.spec.make_optimizer or default_optimizer
        self.optimizer = make(self.model) if self.train else None
        self.grad = (lambda: nullcontext()) if self.train else torch.inference_mode

    def step_for(self, inputs: Any) -> Callable[[], Any]:
        from batchscope.profiler.training import training_step

        if self.optimizer is not None:
            return training_step(self.spec, self.model, inputs, self.optimizer)
        return self.spec.step_fn(self.model, inputs)

    def timer_median_s(self, inputs: Any, min_run_time_s: float) -> float:
        """Median step latency from torch.utils.benchmark.Timer."""
        import torch
        import torch.utils.benchmark as tbench

        step = self.step_for(inputs)
        with self.grad():
            timer = tbench.Timer(stmt="step()", globals={"step": step},
                                 num_threads=torch.get_num_threads())
            return timer.blocked_autorange(min_run_time=min_run_time_s).median


def fresh_timer_median_s(path: str, batch_size: int, min_run_time_s: float = 1.0) -> float:
    """Median step latency from torch.utils.benchmark.Timer in a fresh process of its own.

    Fresh, because the process's history moves the result: glibc's malloc raises its mmap and
    trim thresholds after freeing large blocks, and a CNN step at batch 4 ran 78 ms in a new
    process but 67 ms after a few steps at batch 16 (fewer pages faulted in per step); after
    a step of a huge batch, a small one once ran 7x slower (the host was short of memory).
    batchscope's worker measures each batch size after only the smaller ones.
    """
    cmd = [PYTHON, str(Path(__file__).resolve()), "timer", path, str(batch_size),
           str(min_run_time_s)]
    _, proc = run_timed(cmd)
    return float(proc.stdout.strip().splitlines()[-1])


def pick_throughputs(path: str, batch_sizes: list[int], rounds: int = 2,
                     min_run_time_s: float = 1.0, fastest: bool = False) -> dict[int, float]:
    """Rows per second at each batch size by torch.utils.benchmark.Timer, the median over
    ``rounds`` rounds (``fastest``: the fastest round), each batch size in a fresh process of
    its own (:func:`fresh_timer_median_s`), the batch sizes interleaved so that drift hits
    them alike."""
    sizes = sorted(set(batch_sizes))
    seen: dict[int, list[float]] = {b: [] for b in sizes}
    for _ in range(rounds):
        for b in sizes:
            seen[b].append(fresh_timer_median_s(path, b, min_run_time_s))
    reduce = min if fastest else statistics.median
    return {b: b / reduce(v) for b, v in seen.items()}


# The load generator's script: burns one core in bursts (busy, then idle, each 0.3-3 s,
# seeded), for at most ``max_s`` seconds, then exits by itself.
_BURSTS = """
import random, sys, time
rng = random.Random(int(sys.argv[1]))
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    busy_until = time.monotonic() + rng.uniform(0.3, 3.0)
    while time.monotonic() < min(busy_until, end):
        pass
    time.sleep(max(0.0, min(rng.uniform(0.3, 3.0), end - time.monotonic())))
"""


class LoadGenerator:
    """A neighbour of ours: a process that burns one core in bursts (busy and idle stretches
    of 0.3-3 s, seeded), started on entry, stopped on exit, and never running past ``max_s``
    however the benchmark ends. What a shared CI runner does to a sweep.

    Example:
        >>> with LoadGenerator(seed=1):  # doctest: +SKIP
        ...     diagnose_cli("samples/mlp.py", "/tmp/out")
    """

    def __init__(self, seed: int = 0, max_s: float = 1800.0) -> None:
        self.seed, self.max_s = seed, max_s
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> LoadGenerator:
        self.proc = subprocess.Popen([PYTHON, "-c", _BURSTS, str(self.seed), str(self.max_s)])
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()


def table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


if __name__ == "__main__":  # python benchmarks/_common.py timer SAMPLE BATCH MIN_RUN_TIME_S
    _, _, sample, batch, min_run = sys.argv
    sys.path.insert(0, str(ROOT))
    stepper = Stepper(sample)
    print(stepper.timer_median_s(stepper.spec.make_inputs(int(batch)), float(min_run)))

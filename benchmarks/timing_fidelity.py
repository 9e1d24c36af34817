"""Timing fidelity: batchscope's median step latency vs torch.utils.benchmark.Timer.

Both measure the same model file at the same batch sizes in one run, interleaved (batchscope's
sweep, then Timer at every batch size, repeated ``--rounds`` times) so that drift of a noisy
machine hits both alike. Prints the ratio per batch size, the median of the ratios and their
spread.

    python benchmarks/timing_fidelity.py samples/mlp.py samples/cnn.py samples/llm_decode.py
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import torch
import torch.utils.benchmark as tbench

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from batchscope.api import Options, diagnose_file  # noqa: E402
from batchscope.records import Status  # noqa: E402
from batchscope.spec import load_model_file  # noqa: E402

DEFAULT_SIZES = {"mlp.py": "1,8,64,512", "cnn.py": "1,4,16", "llm_decode.py": "1,8,32,128"}


def timer_median_s(path: str, batch_sizes: list[int], min_run_time_s: float) -> dict[int, float]:
    """Median step latency per batch size from torch.utils.benchmark.Timer, in this process."""
    spec = load_model_file(path)
    model = spec.build_model().eval()
    out = {}
    for b in batch_sizes:
        inputs = spec.make_inputs(b)
        step = spec.step_fn(model, inputs)
        with torch.inference_mode():
            timer = tbench.Timer(stmt="step()", globals={"step": step},
                                 num_threads=torch.get_num_threads())
            out[b] = timer.blocked_autorange(min_run_time=min_run_time_s).median
    return out


def batchscope_median_s(path: str, batch_sizes: list[int], min_time_s: float) -> dict[int, float]:
    with tempfile.TemporaryDirectory() as out_dir:
        report = diagnose_file(path, Options(batch_sizes=batch_sizes, out_dir=out_dir,
                                             min_time_s=min_time_s, op_breakdown=False,
                                             measure_ceilings=False))
    return {r.batch_size: r.latency_s.median for r in report.batches
            if r.status == Status.OK and r.latency_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--batch-sizes", default=None, help="default: per sample, see source")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--min-time", type=float, default=1.0)
    args = parser.parse_args()
    all_ratios = []
    for path in args.models:
        text = args.batch_sizes or DEFAULT_SIZES.get(Path(path).name, "1,4,16")
        sizes = [int(x) for x in text.split(",")]
        ratios: dict[int, list[float]] = {b: [] for b in sizes}
        ours: dict[int, list[float]] = {b: [] for b in sizes}
        theirs: dict[int, list[float]] = {b: [] for b in sizes}
        for _ in range(args.rounds):
            a = batchscope_median_s(path, sizes, args.min_time)
            t = timer_median_s(path, sizes, args.min_time)
            for b in sizes:
                if b in a:
                    ours[b].append(a[b])
                    theirs[b].append(t[b])
                    ratios[b].append(a[b] / t[b])
        print(f"\n{path}")
        print(f"{'batch':>6} {'batchscope ms':>14} {'Timer ms':>10} {'ratio':>7} {'ratios per round'}")
        for b in sizes:
            if not ratios[b]:
                print(f"{b:>6}  (not measured)")
                continue
            r = statistics.median(ratios[b])
            all_ratios.extend(ratios[b])
            print(f"{b:>6} {statistics.median(ours[b]) * 1e3:>14.3f} "
                  f"{statistics.median(theirs[b]) * 1e3:>10.3f} {r:>7.3f} "
                  + " ".join(f"{x:.3f}" for x in ratios[b]))
    if all_ratios:
        print(f"\nall: median ratio {statistics.median(all_ratios):.3f}, "
              f"min {min(all_ratios):.3f}, max {max(all_ratios):.3f}, n {len(all_ratios)}")


if __name__ == "__main__":
    main()

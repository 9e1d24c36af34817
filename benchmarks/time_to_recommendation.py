"""Time to a recommendation: batchscope's whole run vs a plain profiled sweep and Lightning.

For each sample, in one run:

1. batchscope's whole run as a user runs it (``diagnose SAMPLE --device cpu``), start to
   exit: its batch grid (what its plan measured) and its recommended batch size;
2. the plain fixed-grid profiled sweep (``benchmarks/plain_sweep.py``: what one scripts by
   hand with torch.profiler) over the same grid, start to exit, and its pick (best
   profiled throughput);
3. PyTorch Lightning's BatchSizeFinder in power mode (``benchmarks/lightning_finder.py``),
   start to exit, and its pick (the largest batch size that fits, capped at 1024);
4. the throughput of each pick, all measured here with torch.utils.benchmark.Timer,
   interleaved over rounds.

Each tool runs as its own process, as a user would run it, so interpreter start and imports
count. Prints a Markdown row per sample and the ratios.

    python benchmarks/time_to_recommendation.py samples/cnn.py
    python benchmarks/time_to_recommendation.py --before-src /tmp/bs-before samples/mlp.py
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from batchscope.hardware.busy import OtherLoad
from benchmarks._common import (
    PYTHON,
    ROOT,
    SAMPLES,
    bench_env,
    diagnose_cli,
    pick_throughputs,
    run_timed,
    table,
)


def batchscope_run(sample: str, before_src: str | None = None) -> tuple[float, list[int], int]:
    """Wall time, the batch sizes measured (status ok) and the recommendation."""
    env = bench_env()
    if before_src:
        env["PYTHONPATH"] = before_src
    with tempfile.TemporaryDirectory() as out:
        wall, report = diagnose_cli(sample, out, env=env)
    grid = [b["batch_size"] for b in report["batches"] if b["status"] == "ok"]
    return wall, grid, report["recommendation"]["batch_size"]


def plain_run(sample: str, grid: list[int]) -> tuple[float, int]:
    cmd = [PYTHON, str(ROOT / "benchmarks/plain_sweep.py"), sample,
           "--batch-sizes", ",".join(map(str, grid)), "--json"]
    wall, proc = run_timed(cmd)
    return wall, int(json.loads(proc.stdout.strip().splitlines()[-1])["pick"])


def lightning_run(sample: str, max_val: int) -> tuple[float, int]:
    cmd = [PYTHON, str(ROOT / "benchmarks/lightning_finder.py"), sample,
           "--max-val", str(max_val), "--json"]
    wall, proc = run_timed(cmd)
    return wall, int(json.loads(proc.stdout.strip().splitlines()[-1])["pick"])


def measure(sample: str, args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """One sample: every tool run once, then the throughput of their picks."""
    name = Path(sample).name
    loads: list[str] = []

    def timed(label: str, fn: Callable[[], tuple]) -> tuple:
        with OtherLoad() as load:
            out = fn()
        loads.append(load.note())
        print(f"{name}: {label} {out[0]:.1f} s, pick {out[-1]}, other processes' CPU "
              f"{load.note()}", file=sys.stderr, flush=True)
        return out

    wall_b, grid, pick_b = timed("batchscope", lambda: batchscope_run(sample))
    before = ""
    if args.before_src:
        wall_old, grid_old, pick_old = timed(
            "batchscope before", lambda: batchscope_run(sample, args.before_src))
        before = f"{wall_old:.1f} s ({grid_old[0]}–{grid_old[-1]}, pick {pick_old})"
    wall_p, pick_p = timed("plain sweep", lambda: plain_run(sample, grid))
    wall_l, pick_l = (float("nan"), 0)
    if not args.no_lightning:
        wall_l, pick_l = timed("Lightning",
                               lambda: lightning_run(sample, args.lightning_max_val))
    picks = [b for b in (pick_b, pick_p, pick_l) if b]
    tput = pick_throughputs(sample, picks, rounds=args.throughput_rounds)
    grid_text = f"{grid[0]}–{grid[-1]} ({len(grid)} sizes)"
    row = [name, grid_text, f"{wall_b:.1f} s"]
    if args.before_src:
        row.append(before)
    row += [f"{wall_p:.1f} s", f"{wall_b / wall_p:.2f}"]
    if not args.no_lightning:
        row += [f"{wall_l:.1f} s", f"{wall_b / wall_l:.2f}"]
    row.append(" / ".join(loads))
    prow = [name, f"{pick_b} → {tput[pick_b]:,.1f}/s", f"{pick_p} → {tput[pick_p]:,.1f}/s"]
    if pick_l:
        prow += [f"{pick_l} → {tput[pick_l]:,.1f}/s", f"{tput[pick_b] / tput[pick_l]:.2f}"]
    return row, prow


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=SAMPLES)
    parser.add_argument("--lightning-max-val", type=int, default=1024)
    parser.add_argument("--no-lightning", action="store_true")
    parser.add_argument("--throughput-rounds", type=int, default=2)
    parser.add_argument("--before-src", default=None,
                        help="also time an older batchscope tree (its PYTHONPATH), same run")
    args = parser.parse_args()
    rows, pick_rows = [], []
    for sample in args.models:
        row, prow = measure(sample, args)
        rows.append(row)
        pick_rows.append(prow)
    header = ["sample", "grid", "batchscope"]
    if args.before_src:
        header.append("batchscope before")
    header += ["plain profiled sweep", "batchscope / plain"]
    if not args.no_lightning:
        header += ["Lightning BatchSizeFinder", "batchscope / Lightning"]
    header.append("other processes' CPU during each run")
    print(table(header, rows))
    print()
    pheader = ["sample", "batchscope pick → Timer throughput", "plain sweep pick → throughput"]
    if not args.no_lightning:
        pheader += ["Lightning pick → throughput", "batchscope / Lightning throughput"]
    print(table(pheader, pick_rows))


if __name__ == "__main__":
    main()

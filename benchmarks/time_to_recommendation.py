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
    python benchmarks/time_to_recommendation.py --alternate 3 samples/cnn.py samples/llm_decode.py
"""

from __future__ import annotations

import argparse
import json
import statistics
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


def alternating(sample: str, repeats: int, before_src: str | None) -> list[str]:
    """``repeats`` rounds of batchscope's whole run and the plain profiled sweep of the grid
    it measured (and the older tree's run, with ``before_src``), one after another in a
    rotating order, so that the machine's drift falls on all of them alike; each round's
    ratio batchscope / plain (and before / plain), their median and range."""
    name = Path(sample).name
    ratios: list[float] = []
    before: list[float] = []
    grids: list[str] = []
    walls: list[str] = []
    for i in range(repeats):
        order = ["new", "plain"] + (["before"] if before_src else [])
        order = order[i % len(order):] + order[:i % len(order)]
        got: dict[str, float] = {}
        grid: list[int] = []
        before_grid: list[int] = []
        # the plain sweep times batchscope's own grid: batchscope runs first in each round
        for who in ["new", *[w for w in order if w != "new"]]:
            with OtherLoad() as load:
                if who == "new":
                    got[who], grid, _ = batchscope_run(sample)
                elif who == "before":
                    got[who], before_grid, _ = batchscope_run(sample, before_src)
                else:
                    got[who], _ = plain_run(sample, grid)
            print(f"{name} round {i}: {who} {got[who]:.1f} s (other processes' CPU "
                  f"{load.note()})", file=sys.stderr, flush=True)
        ratios.append(got["new"] / got["plain"])
        if before_src:
            before.append(got["before"] / got["plain"])
        # The older tree's plan may end at another size: its ratio is over the plain sweep
        # of this code's grid, so its grid is shown beside it.
        grids.append(f"{grid[0]}–{grid[-1]}" + (f" (before: {before_grid[0]}–{before_grid[-1]})"
                                                  if before_src and before_grid else ""))
        walls.append(f"{got['new']:.0f}/{got['plain']:.0f}")
    row = [name, " ".join(grids), " ".join(walls), " ".join(f"{r:.2f}" for r in ratios),
           f"{statistics.median(ratios):.2f} ({min(ratios):.2f}–{max(ratios):.2f})"]
    if before_src:
        row.append(f"{statistics.median(before):.2f} ({min(before):.2f}–{max(before):.2f})")
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=SAMPLES)
    parser.add_argument("--lightning-max-val", type=int, default=1024)
    parser.add_argument("--no-lightning", action="store_true")
    parser.add_argument("--throughput-rounds", type=int, default=2)
    parser.add_argument("--before-src", default=None,
                        help="also time an older batchscope tree (its PYTHONPATH), same run")
    parser.add_argument("--alternate", type=int, default=0,
                        help="N rounds of batchscope against the plain sweep of its grid "
                        "(and --before-src's tree), alternating; no Lightning, no re-timing")
    args = parser.parse_args()
    if args.alternate:
        header = ["sample", "grids", "batchscope / plain wall (s)", "ratio per round",
                  "batchscope / plain, median (range)"]
        if args.before_src:
            header.append("before / plain, median (range)")
        print(table(header, [alternating(s, args.alternate, args.before_src)
                             for s in args.models]))
        return
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

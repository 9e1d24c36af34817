"""Timing fidelity: batchscope's median step latency vs torch.utils.benchmark.Timer.

Both measure the same model file at the same batch sizes in one run, interleaved batch size
by batch size (batchscope's sweep of that one batch size in its own worker, then Timer on it
in a fresh process, the order reversed every other round, ``--rounds`` rounds) so that the
drift of a noisy machine, which here moves a 30 µs step by 10% within a minute, hits both
alike. Prints the ratio per batch size (the median over rounds and each round's), the median
of all ratios and their spread. docs/benchmarks.md has a 9-round table.

    python benchmarks/timing_fidelity.py --rounds 9            # every sample, ~22 min
    python benchmarks/timing_fidelity.py samples/mlp.py --rounds 3
    python benchmarks/timing_fidelity.py samples/cnn.py --min-time 1   # the old fixed 1 s
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from batchscope.api import Options, diagnose_file
from batchscope.hardware.busy import OtherLoad
from batchscope.records import Status
from benchmarks._common import SAMPLES, fresh_timer_median_s, table

DEFAULT_SIZES = {"mlp.py": "1,8,64,512", "cnn.py": "1,4,16", "llm_decode.py": "1,8,32,128",
                 "train_cnn.py": "1,8,32"}
# Timer's own measuring time per batch size: long enough to be the reference.
TIMER_MIN_RUN_TIME_S = 1.0
# The fidelity the adaptive timing pass is held to.
TOLERANCE = 0.05


def batchscope_median_s(path: str, batch_size: int,
                        min_time_s: float | None) -> tuple[float, int]:
    """batchscope's median step latency and step count at one batch size (timing pass only,
    its own worker process, as a sweep measures it)."""
    with tempfile.TemporaryDirectory() as out_dir:
        report = diagnose_file(path, Options(batch_sizes=[batch_size], out_dir=out_dir,
                                             device="cpu", min_time_s=min_time_s,
                                             op_breakdown=False, measure_ceilings=False))
    ok = [r for r in report.batches if r.status == Status.OK and r.latency_s]
    if not ok:
        return float("nan"), 0
    return ok[0].latency_s.median, ok[0].latency_s.n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=SAMPLES)
    parser.add_argument("--batch-sizes", default=None, help="default: per sample, see source")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--min-time", type=float, default=None,
                        help="batchscope's --min-time (default: its adaptive timing)")
    parser.add_argument("--compare-fixed", type=float, default=None, metavar="S",
                        help="also run batchscope with --min-time S in every round (the old "
                             "fixed 1 s: --compare-fixed 1)")
    args = parser.parse_args()
    variants: dict[str, float | None] = {"batchscope": args.min_time}
    if args.compare_fixed is not None:
        variants[f"batchscope --min-time {args.compare_fixed:g}"] = args.compare_fixed
    ratios_all: dict[str, list[float]] = {v: [] for v in variants}
    rows, loads = [], []
    for path in args.models:
        text = args.batch_sizes or DEFAULT_SIZES.get(Path(path).name, "1,4,16")
        sizes = [int(x) for x in text.split(",")]
        ours = {v: {b: [] for b in sizes} for v in variants}
        steps = {v: {b: [] for b in sizes} for v in variants}
        theirs: dict[int, list[float]] = {b: [] for b in sizes}
        with OtherLoad() as load:
            for r in range(args.rounds):
                for b in sizes:
                    order = ["timer", *variants] if r % 2 else [*variants, "timer"]
                    for who in order:
                        if who == "timer":
                            theirs[b].append(fresh_timer_median_s(path, b,
                                                                  TIMER_MIN_RUN_TIME_S))
                        else:
                            median, n = batchscope_median_s(path, b, variants[who])
                            ours[who][b].append(median)
                            steps[who][b].append(n)
        for b in sizes:
            row = [Path(path).name, str(b), f"{statistics.median(theirs[b]) * 1e3:.3f}"]
            for v in variants:
                ratios = [x / y for x, y in zip(ours[v][b], theirs[b])]
                ratios_all[v].extend(ratios)
                row += [f"{statistics.median(ratios):.3f}", " ".join(f"{r:.3f}" for r in ratios),
                        str(int(statistics.median(steps[v][b])))]
            rows.append(row)
        print(f"{path}: done", file=sys.stderr, flush=True)
        loads.append(f"{Path(path).name} {load.note()}")
    header = ["sample", "batch", "Timer median ms"]
    for v in variants:
        header += [f"{v} / Timer", "per round", "timed steps"]
    print(table(header, rows))
    print(f"\nother processes' share of the CPU during each sample: {', '.join(loads)}")
    for v, ratios in ratios_all.items():
        if not ratios:
            continue
        inside = sum(abs(r - 1) <= TOLERANCE for r in ratios)
        dev = statistics.median(abs(r - 1) for r in ratios)
        print(f"\n{v}: median ratio {statistics.median(ratios):.3f}, median |ratio - 1| "
              f"{dev:.3f}, min {min(ratios):.3f}, max {max(ratios):.3f}, n {len(ratios)}; "
              f"{inside}/{len(ratios)} within ±{TOLERANCE:.0%}")


if __name__ == "__main__":
    main()

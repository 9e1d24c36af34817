"""Same code, same answer: identical runs on the machine as it is (issue 31).

For each model (the decode sample, a page-fault-heavy MobileNetV2-shaped net, the small MLP)
``diagnose`` runs ``--runs`` times on identical code and ``--variant-runs`` times on a variant
doing ~25% more work (benchmarks/stability_models/), each run a whole ``diagnose`` as a user
starts it. Then, per model:

* **picks**: over ordered pairs of identical runs, how often one run's pick lies in the other
  run's ``recommendation.equivalent_batch_sizes``, and how many runs share the commonest pick;
* **compare, identical**: ``diagnose compare`` of every ordered pair of identical runs, the
  share that exits 1 (a false alarm);
* **compare, +25% work**: ``diagnose compare`` of each identical run (base) against each
  variant run (head), the share that exits 1;
* **A/B, +15% time**: ``diagnose compare --ab`` of the model file against a copy doing the
  same work 15% slower (a spin after each forward), ``--ab-trials`` times, the share that exits
  1; and of the model file against itself, the share that exits 1.

With ``--ranks-runs`` (default 2), a 2-rank data-parallel sweep of tests/models/ddp_tiny.py runs
that many times, and the table says whether each run's communication share interval holds the
other run's value, and whether any is a bare 0.

Nothing here is asserted by the tests: the figures depend on the machine. The whole run takes
about an hour on a 2-core VM with the defaults; ``--models mlp --runs 4`` takes minutes.

    python benchmarks/stability.py [--runs 10] [--variant-runs 5] [--ab-trials 10]
        [--models decode,mobilenet,mlp] [--out /tmp/stability]
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import PYTHON, ROOT, bench_env, table

# The A/B mode's batch size per model (None: the commonest pick). The decode sample's picks
# step in seconds, and an A/B block is at least 5 steps: batch 8 keeps a trial under a minute.
AB_BATCH = {"decode": 8}
MODELS = {
    # name: (model file, the +25% work variant, the +15% time variant, extra diagnose args)
    "decode": ("samples/llm_decode.py", "benchmarks/stability_models/decode_more_work.py",
               "benchmarks/stability_models/decode_slower.py", []),
    "mobilenet": ("benchmarks/stability_models/mobilenet.py",
                  "benchmarks/stability_models/mobilenet_more_work.py",
                  "benchmarks/stability_models/mobilenet_slower.py", []),
    "mlp": ("samples/mlp.py", "benchmarks/stability_models/mlp_more_work.py",
            "benchmarks/stability_models/mlp_slower.py", []),
}
DIAGNOSE = str(Path(PYTHON).parent / "diagnose")


@dataclass
class Run:
    path: Path
    wall_s: float
    pick: int | None
    equivalent: list[int]
    drift: float | None
    report: dict[str, Any] = field(repr=False, default_factory=dict)


def _diagnose(model: str, out: Path, args: list[str]) -> Run:
    started = time.perf_counter()
    proc = subprocess.run([DIAGNOSE, model, "--device", "cpu", "--out", str(out), *args],
                          cwd=ROOT, env=bench_env(), text=True, capture_output=True, check=False)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-2000:] + proc.stderr[-2000:])
        raise RuntimeError(f"diagnose {model} exited with {proc.returncode}")
    report = json.loads((out / "report.json").read_text())
    rec = report.get("recommendation") or {}
    drift = (report.get("run") or {}).get("drift")
    return Run(out / "report.json", wall, rec.get("batch_size"),
               rec.get("equivalent_batch_sizes") or [], drift["drift"] if drift else None,
               report)


def _exit_code(args: list[str]) -> int:
    proc = subprocess.run([DIAGNOSE, "compare", *args], cwd=ROOT, env=bench_env(), text=True,
                          capture_output=True, check=False)
    if proc.returncode not in (0, 1):
        sys.stderr.write(proc.stdout[-2000:] + proc.stderr[-2000:])
        raise RuntimeError(f"diagnose compare {' '.join(args)} exited with {proc.returncode}")
    return proc.returncode


def _pct(part: int, whole: int) -> str:
    return f"{part}/{whole} ({100 * part / whole:.0f}%)" if whole else "n/a"


def model_rows(name: str, runs: int, variant_runs: int, ab_trials: int, out: Path,
               ab_batch: int | None, ab_extra: list[str] | None = None) -> list[str]:
    model, more_work, slower, args = MODELS[name]
    base = [_diagnose(model, out / name / f"base-{i}", args) for i in range(runs)]
    variant = [_diagnose(more_work, out / name / f"more-work-{i}", args)
               for i in range(variant_runs)]
    pairs = list(itertools.permutations(base, 2))
    inside = sum(a.pick in b.equivalent for a, b in pairs)
    picks = [r.pick for r in base]
    commonest = max(picks.count(p) for p in set(picks)) if picks else 0
    identical_fail = sum(_exit_code([str(a.path), str(b.path)]) == 1 for a, b in pairs)
    work_pairs = [(a, b) for a in base for b in variant]
    work_fail = sum(_exit_code([str(a.path), str(b.path)]) == 1 for a, b in work_pairs)
    ab_batch_size = ab_batch or AB_BATCH.get(name) or max(
        (p for p in picks if p is not None), key=picks.count, default=1)
    ab_slow = ab_same = 0
    for _ in range(ab_trials):
        ab_slow += _exit_code(["--ab", model, slower, "--batch-size", str(ab_batch_size),
                               "--out", str(out / name / "ab"), *(ab_extra or [])]) == 1
        ab_same += _exit_code(["--ab", model, model, "--batch-size", str(ab_batch_size),
                               "--out", str(out / name / "ab-same"), *(ab_extra or [])]) == 1
    drifts = [r.drift for r in base if r.drift is not None]
    print(f"{name}: picks {picks}, equivalent sets {[r.equivalent for r in base]}, drift "
          f"{[round(d, 3) for d in drifts]}, wall {[round(r.wall_s) for r in base]} s",
          flush=True)
    return [name, " ".join(str(p) for p in picks), _pct(inside, len(pairs)),
            _pct(commonest, len(picks)),
            f"{min(drifts):.0%}–{max(drifts):.0%}" if drifts else "n/a",
            _pct(identical_fail, len(pairs)), _pct(work_fail, len(work_pairs)),
            _pct(ab_slow, ab_trials), _pct(ab_same, ab_trials)]


def ranks_rows(runs: int, out: Path) -> list[list[str]]:
    """Per run and per-rank batch: the communication share, its interval, how many of the
    other runs' shares at that size the interval holds, whether it is a bare 0; and a last
    row with the ordered pairs held over all sizes."""
    reports = [_diagnose("tests/models/ddp_tiny.py", out / "ranks" / f"run-{i}",
                         ["--nproc-per-node", "2", "--batch-sizes", "2,8,32"]).report
               for i in range(runs)]

    def shares(report: dict[str, Any]) -> dict[int, dict[str, Any]]:
        return {b["batch_size"]: b for b in (report.get("distributed") or {}).get("batches", [])}

    rows, held_pairs, pairs = [], 0, 0
    for i, report in enumerate(reports):
        others = [shares(r) for j, r in enumerate(reports) if j != i]
        drift = (report.get("run") or {}).get("drift") or {}
        for size, batch in shares(report).items():
            share = batch.get("communication_share")
            interval = batch.get("communication_share_interval") or {}
            values = [o[size].get("communication_share") for o in others if size in o]
            held = sum(1 for v in values if v is not None and interval
                       and interval["low"] <= v <= interval["high"])
            held_pairs, pairs = held_pairs + held, pairs + len(values)
            rows.append([str(i), str(size),
                         f"{share:.3f}" if share is not None else "n/a",
                         (f"{interval['low']:.3f}–{interval['high']:.3f}" if interval
                          else "none"),
                         f"{held}/{len(values)}",
                         "yes" if share == 0 and not interval else "no",
                         (f"{drift['communication_drift']:.0%}"
                          if drift.get("communication_drift") is not None else "n/a")])
    rows.append(["all", "", "", "", _pct(held_pairs, pairs), "", ""])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--variant-runs", type=int, default=5)
    parser.add_argument("--ab-trials", type=int, default=10)
    parser.add_argument("--ab-batch", type=int, default=None,
                        help="the A/B mode's batch size (default: the commonest pick)")
    parser.add_argument("--ab-rounds", type=int, default=None,
                        help="the A/B mode's pairs of worker processes (default: its own, 10)")
    parser.add_argument("--ab-pairs", type=int, default=None,
                        help="the A/B mode's pairs of blocks (default: its own, 30)")
    parser.add_argument("--ranks-runs", type=int, default=2)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--out", default="/tmp/stability")
    args = parser.parse_args()
    out = Path(args.out)
    ab_extra = [*(["--rounds", str(args.ab_rounds)] if args.ab_rounds else []),
                *(["--pairs", str(args.ab_pairs)] if args.ab_pairs else [])]
    rows = [model_rows(name, args.runs, args.variant_runs, args.ab_trials, out, args.ab_batch,
                       ab_extra)
            for name in args.models.split(",") if name]
    print(table(["model", "picks", "pick in the other run's set", "commonest pick",
                 "drift (control)", "compare identical: exit 1", "compare +25% work: exit 1",
                 "A/B +15% time: exit 1", "A/B identical: exit 1"], rows))
    if args.ranks_runs >= 2:
        print()
        print(table(["run", "per-rank batch", "communication share", "its 95% interval",
                     "other runs' shares it holds", "bare 0",
                     "control's share change"],
                    ranks_rows(args.ranks_runs, out)))


if __name__ == "__main__":
    main()

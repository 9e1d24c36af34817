"""Same code, same answer: identical runs on the machine as it is (issues 31 and 47).

For each model (the decode sample, a page-fault-heavy MobileNetV2-shaped net, a stock
``nn.TransformerEncoder`` classifier, the small MLP) ``diagnose`` runs ``--runs`` times on
identical code, each run a whole ``diagnose`` as a user starts it, under each of
``--conditions``: ``quiet`` (the machine as it is) and ``loaded`` (a load generator of ours
beside each run: a process burning one core in bursts of 0.3-3 s, started and stopped by
the benchmark: ``_common.LoadGenerator``). Then, per model and condition:

* **picks**: how many runs share the commonest pick; over ordered pairs of identical runs,
  how often one run's pick lies in the other run's ``recommendation.equivalent_batch_sizes``;
* **compare, identical**: ``diagnose compare`` of every ordered pair of identical runs, the
  share that exits 1 (a false alarm);
* **evidence**: every run whose drift (the evidence's ``drift`` reason) passed 50% must say
  "unreliable" first (summary.md's first line); no quiet run may;
* **the pick, timed again** (quiet, ``--retime``): every run's pick and best measured size
  timed again independently by torch.utils.benchmark.Timer in fresh processes, interleaved,
  the fastest of 3 rounds; the pick's throughput over the fastest of them, per run.

``--variant-runs`` and ``--ab-trials`` add issue 31's columns: ``compare`` against a variant
doing ~25% more work, ``compare --ab`` against the same work 15% slower
(benchmarks/stability_models/). With ``--ranks-runs`` (default 0), a 2-rank data-parallel
sweep of tests/models/ddp_tiny.py runs that many times (issue 31's communication table).

Nothing here is asserted by the tests: the figures depend on the machine. Issue 47's table
(four models, ten runs, quiet and loaded) takes two to three hours on a 2-core VM.

    python benchmarks/stability.py --models decode,mobilenet,encoder,mlp --runs 10 \
        --conditions quiet,loaded --retime --out /tmp/stability
    python benchmarks/stability.py --models mlp --runs 4 --conditions loaded   # minutes
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import PYTHON, ROOT, LoadGenerator, bench_env, pick_throughputs, table

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
    "encoder": ("benchmarks/stability_models/encoder.py", "", "", []),
}
# A run's drift past this must make it say "unreliable" first (issue 47).
UNRELIABLE_DRIFT = 0.5
DIAGNOSE = str(Path(PYTHON).parent / "diagnose")


@dataclass
class Run:
    path: Path
    wall_s: float
    pick: int | None
    equivalent: list[int]
    drift: float | None
    report: dict[str, Any] = field(repr=False, default_factory=dict)
    grade: str | None = None  # the evidence's grade
    first_line: str = ""  # summary.md's first line
    other_cpu: float | None = None

    @property
    def best(self) -> int | None:
        return (self.report.get("recommendation") or {}).get("best_batch_size")


def _drift_of(report: dict[str, Any]) -> float | None:
    """The drift the evidence graded (its ``drift`` reason), else run.drift's."""
    for reason in (report.get("evidence") or {}).get("reasons", []):
        if reason.get("kind") == "drift":
            return reason.get("value")
    drift = (report.get("run") or {}).get("drift")
    return drift["drift"] if drift else None


def _diagnose(model: str, out: Path, args: list[str], loaded: bool = False,
              seed: int = 0) -> Run:
    started = time.perf_counter()
    load = LoadGenerator(seed=seed) if loaded else None
    if load is not None:
        load.__enter__()
    try:
        proc = subprocess.run([DIAGNOSE, model, "--device", "cpu", "--out", str(out), *args],
                              cwd=ROOT, env=bench_env(), text=True, capture_output=True,
                              check=False)
    finally:
        if load is not None:
            load.__exit__()
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-2000:] + proc.stderr[-2000:])
        raise RuntimeError(f"diagnose {model} exited with {proc.returncode}")
    report = json.loads((out / "report.json").read_text())
    rec = report.get("recommendation") or {}
    summary = (out / "summary.md").read_text().splitlines()
    return Run(out / "report.json", wall, rec.get("batch_size"),
               rec.get("equivalent_batch_sizes") or [], _drift_of(report), report,
               (report.get("evidence") or {}).get("grade"), summary[0] if summary else "",
               (report.get("run") or {}).get("other_cpu_share"))


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


@dataclass
class Condition:
    """One model's identical runs under one condition, and what they showed."""

    model: str
    condition: str
    runs: list[Run]
    compare_fail: int = 0
    pairs: int = 0
    retimed: dict[int, float] = field(default_factory=dict)  # batch -> rows/s, independent

    def row(self) -> list[str]:
        runs = self.runs
        picks = [r.pick for r in runs]
        commonest = max(picks.count(p) for p in set(picks)) if picks else 0
        pairs = list(itertools.permutations(runs, 2))
        inside = sum(a.pick in b.equivalent for a, b in pairs)
        drifts = [r.drift for r in runs if r.drift is not None]
        over = [r for r in runs if r.drift is not None and r.drift > UNRELIABLE_DRIFT]
        said = sum(r.grade == "unreliable" and "evidence: unreliable" in r.first_line
                   for r in over)
        unreliable = sum(r.grade == "unreliable" for r in runs)
        grades = {g: sum(r.grade == g for r in runs) for g in ("good", "noisy", "unreliable")}
        ratios = self.pick_ratios()
        return [self.model, self.condition, " ".join(str(p) for p in picks),
                _pct(commonest, len(picks)), _pct(inside, len(pairs)),
                _pct(self.compare_fail, self.pairs),
                f"{min(drifts):.0%}–{max(drifts):.0%}" if drifts else "n/a",
                f"{said}/{len(over)}", f"{unreliable}/{len(runs)}",
                " / ".join(f"{g} {n}" for g, n in grades.items() if n),
                (" ".join(f"{x:.2f}" for x in ratios) if ratios else "–"),
                f"{statistics.median(r.wall_s for r in runs):.0f} s"]

    def pick_ratios(self) -> list[float]:
        """Each run's pick, timed again independently, over the fastest size timed so."""
        if not self.retimed:
            return []
        best = max(self.retimed.values())
        return [self.retimed[r.pick] / best for r in self.runs if r.pick in self.retimed]


def decision_rows(name: str, runs: int, conditions: list[str], out: Path, retime: bool
                  ) -> list[Condition]:
    """Issue 47's table for one model: ``runs`` identical runs under each condition,
    compare of every ordered pair of them, and (quiet, ``retime``) the picks timed again."""
    model, _, _, args = MODELS[name]
    found = []
    for condition in conditions:
        loaded = condition == "loaded"
        done = [_diagnose(model, out / name / condition / f"run-{i}", args, loaded, seed=i)
                for i in range(runs)]
        c = Condition(name, condition, done)
        for a, b in itertools.permutations(done, 2):
            c.pairs += 1
            c.compare_fail += _exit_code([str(a.path), str(b.path)]) == 1
        if retime and condition == "quiet":
            sizes = sorted({s for r in done for s in (r.pick, r.best) if s is not None})
            c.retimed = pick_throughputs(model, sizes, rounds=3, fastest=True)
        print(f"{name} ({condition}): picks {[r.pick for r in done]}, sets "
              f"{[r.equivalent for r in done]}, drift {[_r(r.drift) for r in done]}, grades "
              f"{[r.grade for r in done]}, other CPU {[_r(r.other_cpu) for r in done]}, wall "
              f"{[round(r.wall_s) for r in done]} s, retimed {c.retimed}", flush=True)
        found.append(c)
    return found


def _r(x: float | None) -> float | None:
    return round(x, 3) if x is not None else None


DECISION_HEADER = ["model", "condition", "picks", "same pick", "pick in the other run's set",
                   "compare identical: exit 1", "drift", "drift > 50% said unreliable first",
                   "runs unreliable", "evidence", "pick / fastest, timed again", "median wall"]


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
    parser.add_argument("--conditions", default="quiet,loaded",
                        help="quiet, loaded (a load generator beside each run), or both")
    parser.add_argument("--retime", action="store_true",
                        help="time every quiet run's pick and best again independently")
    parser.add_argument("--variant-runs", type=int, default=0)
    parser.add_argument("--ab-trials", type=int, default=0)
    parser.add_argument("--ab-batch", type=int, default=None,
                        help="the A/B mode's batch size (default: the commonest pick)")
    parser.add_argument("--ab-rounds", type=int, default=None,
                        help="the A/B mode's pairs of worker processes (default: its own, 10)")
    parser.add_argument("--ab-pairs", type=int, default=None,
                        help="the A/B mode's pairs of blocks (default: its own, 30)")
    parser.add_argument("--ranks-runs", type=int, default=0)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--out", default="/tmp/stability")
    args = parser.parse_args()
    out = Path(args.out)
    models = [m for m in args.models.split(",") if m]
    conditions = [c for c in args.conditions.split(",") if c]
    found = [c for name in models
             for c in decision_rows(name, args.runs, conditions, out, args.retime)]
    print(table(DECISION_HEADER, [c.row() for c in found]))
    (out / "decisions.json").write_text(json.dumps([{
        "model": c.model, "condition": c.condition, "compare_fail": c.compare_fail,
        "pairs": c.pairs, "retimed": c.retimed, "pick_ratios": c.pick_ratios(),
        "runs": [{"pick": r.pick, "equivalent": r.equivalent, "drift": r.drift,
                  "grade": r.grade, "first_line": r.first_line, "other_cpu": r.other_cpu,
                  "wall_s": r.wall_s, "best": r.best,
                  "stop": (r.report.get("stop") or {}).get("kind"),
                  "measured": [b["batch_size"] for b in r.report.get("batches", [])
                               if b.get("status") == "ok"],
                  "rounds": len({b["round"] for b in ((r.report.get("run") or {}).get(
                      "rounds") or {}).get("blocks", [])})}
                 for r in c.runs]} for c in found], indent=1))
    if args.variant_runs or args.ab_trials:
        ab_extra = [*(["--rounds", str(args.ab_rounds)] if args.ab_rounds else []),
                    *(["--pairs", str(args.ab_pairs)] if args.ab_pairs else [])]
        rows = [model_rows(name, args.runs, args.variant_runs, args.ab_trials, out,
                           args.ab_batch, ab_extra)
                for name in models if MODELS[name][1]]
        print(table(["model", "picks", "pick in the other run's set", "commonest pick",
                     "drift", "compare identical: exit 1", "compare +25% work: exit 1",
                     "A/B +15% time: exit 1", "A/B identical: exit 1"], rows))
    if args.ranks_runs >= 2:
        print()
        print(table(["run", "per-rank batch", "communication share", "its 95% interval",
                     "other runs' shares it holds", "bare 0",
                     "control's share change"],
                    ranks_rows(args.ranks_runs, out)))


if __name__ == "__main__":
    main()

"""The report's evidence grade from its own measurements, and where it is shown first (issue
47: a run whose drift passed 50% spoke with the same confidence as a quiet one)."""

from __future__ import annotations

from rich.console import Console

from batchscope.assemble import Measured, assemble
from batchscope.classifiers.evidence import DRIFT_UNRELIABLE, evidence, grade_of
from batchscope.plan import Limits
from batchscope.records import (
    BatchResult,
    ByteSplit,
    LatencyStats,
    ModelInfo,
    OpStat,
    Options,
    Report,
    RunInfo,
    Source,
    Status,
    Stop,
    StopKind,
)
from batchscope.records.evidence import EvidenceKind, Grade
from batchscope.records.noise import control_timing, drift_control
from batchscope.records.rounds import DecisionRounds, RoundBlock, RoundsStop, paired_shares
from batchscope.reports.console import print_summary
from batchscope.reports.flag_text import evidence_headline
from batchscope.reports.markdown import render_summary


def _batch(b: int, step_s: float, uncounted: float | None = None) -> BatchResult:
    """Batch ``b`` at ``step_s`` a step; with ``uncounted``, its profiled step holds an op
    of that share nobody counted (no FLOPs) beside a counted one."""
    lat = LatencyStats(step_s, step_s, step_s, 40, median_low=step_s * 0.98,
                       median_high=step_s * 1.02)
    ops = ([OpStat("f", "_fused_fwd", [], "float32", "", 1, uncounted * step_s, None,
                   ByteSplit()),
            OpStat("a", "addmm", [], "float32", "", 1, (1 - uncounted) * step_s, 10,
                   ByteSplit())] if uncounted is not None else [])
    return BatchResult(b, Status.OK, latency_s=lat, throughput_per_s=b / step_s, ops=ops,
                       profiled_step_s=step_s if ops else None)


RESULTS = [_batch(1, 0.010), _batch(2, 0.011), _batch(4, 0.012), _batch(8, 0.014)]


def _rounds(blocks_per_worker: int = 5, spread: float = 0.0) -> DecisionRounds:
    steps = {1: 0.010, 2: 0.011, 4: 0.012, 8: 0.014}
    blocks = [RoundBlock(r, r // blocks_per_worker, i, b,
                         s * (1 + spread * (r % 2)), 20)
              for r in range(2 * blocks_per_worker) for i, (b, s) in enumerate(steps.items())]
    shares = paired_shares(blocks, 8)
    return DecisionRounds(sorted(steps), 8, blocks, list(shares.values()),
                          RoundsStop.SEPARATED, 0.05, 0, 2, 1.0, machine_drift=spread,
                          decided=True)


def _drift(change: float):
    first = LatencyStats(0.010, 0.010, 0.010, 40)
    again = LatencyStats(0.010 * (1 + change), 0.01, 0.01, 40)
    return drift_control([control_timing(1, first, again)], 10.0)


def _report(run: RunInfo, results: list[BatchResult] = RESULTS,
            stop: Stop | None = None) -> Report:
    return assemble(Measured(ModelInfo(target="m.py"), run, None, results, Limits(),
                             stop=stop or Stop(StopKind.CAP, values={"largest": 8})))


def test_a_quiet_run_decided_by_rounds_is_good():
    report = _report(RunInfo(drift=_drift(0.03), rounds=_rounds(), other_cpu_share=0.02))
    assert report.evidence is not None and report.evidence.grade == Grade.GOOD
    kinds = {r.kind for r in report.evidence.reasons}
    assert {EvidenceKind.DRIFT, EvidenceKind.OTHER_CPU, EvidenceKind.ROUNDS} <= kinds


def test_drift_past_half_is_unreliable_and_says_to_rerun_first():
    report = _report(RunInfo(drift=_drift(0.62), rounds=_rounds(), other_cpu_share=0.02))
    assert report.evidence is not None and report.evidence.grade == Grade.UNRELIABLE
    assert report.evidence.reasons[0].kind == EvidenceKind.DRIFT
    headline = evidence_headline(report.evidence)
    assert headline.startswith("evidence: unreliable")
    assert "62%" in headline and "do not act on these numbers" in headline
    assert "rerun" in headline
    # The terminal's first line and summary.md's first line carry it.
    console = Console(width=300, record=True, color_system=None)
    print_summary(console, report)
    assert console.export_text().splitlines()[0].startswith("evidence: unreliable")
    summary = render_summary(report)
    assert summary.splitlines()[0].endswith("· evidence: unreliable")
    assert "Evidence: unreliable" in summary.splitlines()[2]


def test_each_reason_is_graded_by_its_own_limits():
    assert grade_of(EvidenceKind.DRIFT, 0.1) == Grade.GOOD
    assert grade_of(EvidenceKind.DRIFT, 0.3) == Grade.NOISY
    assert grade_of(EvidenceKind.DRIFT, DRIFT_UNRELIABLE + 0.01) == Grade.UNRELIABLE
    assert grade_of(EvidenceKind.OTHER_CPU, 0.3) == Grade.NOISY
    assert grade_of(EvidenceKind.OTHER_CPU, 0.6) == Grade.UNRELIABLE
    assert grade_of(EvidenceKind.UNCOUNTED, 0.05) == Grade.NOISY
    assert grade_of(EvidenceKind.UNCOUNTED, 0.6) == Grade.NOISY  # never unreliable alone


def test_a_busy_machine_an_uncounted_step_and_few_rounds_make_a_run_noisy():
    uncounted = [*RESULTS[:3], _batch(8, 0.014, uncounted=0.2)]
    report = _report(RunInfo(rounds=_rounds(blocks_per_worker=2), other_cpu_share=0.31),
                     uncounted)
    assert report.evidence is not None and report.evidence.grade == Grade.NOISY
    noisy = {r.kind for r in report.evidence.worst()}
    assert report.recommendation is not None and report.recommendation.batch_size == 8
    assert {EvidenceKind.OTHER_CPU, EvidenceKind.ROUNDS, EvidenceKind.UNCOUNTED} <= noisy


def test_a_sweep_without_rounds_or_cut_by_its_budget_says_so():
    report = _report(RunInfo(options=Options(rounds=False)))
    assert report.evidence is not None
    assert [r.kind for r in report.evidence.worst()] == [EvidenceKind.NO_ROUNDS]
    budget = Stop(StopKind.BUDGET, 16, {"budget_s": 30.0, "spent_s": 28.0,
                                        "estimated_s": 9.0, "unmeasured": [16, 32]})
    cut = _report(RunInfo(rounds=_rounds()), stop=budget)
    assert cut.evidence is not None and cut.evidence.grade == Grade.NOISY
    assert cut.evidence.worst()[0].kind == EvidenceKind.BUDGET
    assert "left 2 batch sizes unmeasured" in evidence_headline(cut.evidence)


def test_what_was_not_measured_here_has_no_evidence_grade():
    assert evidence(RunInfo(source=Source.TRACE), RESULTS, None, None) is None
    assert evidence(RunInfo(source=Source.TARGET), RESULTS, None, None) is None

"""``diagnose compare BASE.json HEAD.json``: what changed between two reports, and a CI gate.

The gate holds the head to the batch size the *base* recommends, on two kinds of evidence.

**Work first, exact.** Each report counted the work of a step at every batch size it
measured with the op breakdown: FLOPs, bytes, op calls (and GPU kernel launches where a trace
gave them; records/work.py). Two runs of the same code count exactly the same, so no drift
explains a difference. A head that does more of any of them than ``threshold`` (default 10%)
at the gate is a regression (exit 1), whatever the clock says, as instruction counts are in
CI benchmarking. More work at another batch size both measured is a warning, not a failure
(the gate is the base's pick, as for time); less work is reported too.

**Time second, with its noise.** The same code drifts between runs on a shared machine far more
than inside one run: on the 2-core VMs of issue 31 two runs of identical code differed by 22%,
and the speed drifts 10-30% over minutes (issue 13: BERT at batch 1 ran 139, 171, 170 and 141
ms, each run tight). So a side may be several runs (repeated reports): their geometric mean
throughput is compared, and the noise comes from their scatter (Welch's t on the log
throughputs; the Mann-Whitney U test's p-value, Google Benchmark's, is shown beside it), never
below the noise any of the runs measured of its own (its drift control, its gate throughput's
interval); runs that agree exactly (the same report given twice) count as one. A side with a
single run says nothing of run-to-run drift, so it is given the largest of :data:`RUN_DRIFT`
(``--run-drift``, 25%: one relative standard deviation per run, the scatter ten identical runs
showed on a 2-vCPU cloud VM), the drift its own control measured (``run.drift``) and its gate
throughput's interval. A drop is a regression only past the threshold *and* beyond the 95%
one-sided bound of that noise; a drop past the threshold within the noise is *inconclusive*
(exit 0), and the verdict says how large a drop this noise could tell (about 50% for one run a
side at the default). Identical code then fails the gate in well under 5% of ordered pairs of
runs (tests/reports/test_compare_noise.py simulates it). For a real time gate on such a machine,
repeat the runs or time both sides in one run: ``diagnose compare --ab``
(reports/ab_compare.py).

Reports are read with :func:`~batchscope.reports.json_report.load_report` (the typed loader,
:func:`~batchscope.records.codec.decode_report`), so a foreign file is a usage error (exit
4), never a crash, and everything here reads typed fields.

Example:
    >>> result = compare_files("base/report.json", "head/report.json")  # doctest: +SKIP
    >>> result.regression  # doctest: +SKIP
    False
"""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

from batchscope.classifiers.coverage import HOLE_SHARE, uncounted_share
from batchscope.errors import UsageError
from batchscope.records import BatchResult, Report, Status
from batchscope.records.evidence import Grade
from batchscope.records.work import (
    WorkChange,
    WorkDelta,
    WorkMeasure,
    calls_only,
    work_count,
    work_delta,
)
from batchscope.reports import fmt
from batchscope.reports import view as v
from batchscope.reports.flag_text import rule_text
from batchscope.reports.json_report import load_report
from batchscope.stats import Z95, mann_whitney_u, student_t_cdf, student_t_quantile

DEFAULT_THRESHOLD = 0.10
REGRESSION_EXIT_CODE = 1
# A timing spread (IQR over median) above this share of the threshold makes a single run's
# time fragile: the reader is told how it compares with the threshold and to rerun.
NOISE_SHARE_OF_THRESHOLD = 0.5
MAX_CLASS_CHANGES = 40
# Run-to-run noise of one run's throughput (a relative standard deviation, in log units) on a
# side with a single report. Measured (docs/benchmarks.md section 10): on the 2-vCPU cloud VMs
# of issue 31, ten runs of identical code scattered with a standard deviation of 0.17-0.34 in
# log throughput at every batch size (the MLP, three sets of ten runs; MobileNet, one), whole
# runs landing 2x slower at random; the issue's own pair differed by 22%. 15% a run (the old
# value, from that pair) called identical code a regression in 6-12% of ordered pairs of those
# runs; 25% a run, in 1-4%. One run a side can then tell only a drop past ~50% (1.96
# standard errors of the pair's difference); repeated runs or --ab measure smaller ones. A
# dedicated quiet machine may pass a smaller --run-drift.
RUN_DRIFT = 0.25
# A drop is a regression only beyond this one-sided confidence (the 95% two-sided bound).
CONFIDENCE = 0.975
# Sides of several runs: the Mann-Whitney U test's p-value is shown beside Welch's t (which
# decides) when both sides have at least this many runs; with few runs it is a caution only
# (3 against 3 cannot reach p < 0.05).
U_TEST_MIN_RUNS = 2
# One run's relative standard deviation is never taken above this (1000%): a hostile report's
# drift or interval must not overflow the statistics.
MAX_RUN_NOISE = 10.0


@dataclass
class BatchDelta:
    """One batch size in both reports."""

    batch_size: int
    base_status: str
    head_status: str
    base_throughput: float | None
    head_throughput: float | None
    base_latency_s: float | None
    head_latency_s: float | None

    @property
    def throughput_change(self) -> float | None:
        """Head over base minus one; None unless both measured this batch size."""
        if self.base_throughput and self.head_throughput is not None:
            return self.head_throughput / self.base_throughput - 1.0
        return None

    @property
    def latency_change(self) -> float | None:
        """Head over base median step latency minus one; None unless both measured it."""
        if self.base_latency_s and self.head_latency_s is not None:
            return self.head_latency_s / self.base_latency_s - 1.0
        return None


@dataclass
class ClassChange:
    """An op group whose bound differs between the reports at one batch size."""

    batch_size: int
    op_id: str
    name: str
    module: str
    base_bound: str
    head_bound: str


class NoiseSource(str, Enum):
    """Where a side's per-run noise came from."""

    SCATTER = "scatter"  # the scatter of its several runs
    RUN_DRIFT = "run_drift"  # the --run-drift floor (a single run, or runs that agree exactly)
    CONTROL = "control"  # a report's own drift control (run.drift)
    INTERVAL = "interval"  # a report's gate throughput interval


@dataclass(frozen=True)
class SideNoise:
    """The noise of one side's mean throughput at the gate, in natural-log units (a
    relative standard deviation): ``runs`` the distinct runs it rests on (runs whose
    throughputs agree exactly count once), ``per_run`` the standard deviation of one run,
    ``standard_error`` of the side's mean, ``dof`` its degrees of freedom (inf: assumed or
    measured inside the runs, not estimated from their scatter), ``source`` where
    ``per_run`` came from."""

    runs: int
    per_run: float
    standard_error: float
    dof: float
    source: NoiseSource


@dataclass
class Comparison:
    """Everything ``compare`` found; :attr:`regression` decides the exit code."""

    base_target: str
    head_target: str
    unit: str
    threshold: float
    rows: list[BatchDelta]
    base_recommended: int
    head_recommended: int | None
    base_rule: str
    head_rule: str
    gate_change: float | None
    regression: bool
    verdict: str
    class_changes: list[ClassChange] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    runs: tuple[int, int] = (1, 1)  # reports on each side (repeated runs)
    standard_error: float | None = None  # of the log throughput ratio at the gate
    confidence: float | None = None  # that the head is slower at the gate (one-sided)
    inconclusive: bool = False  # a drop past the threshold that the noise can explain
    # The work per step at every batch size both first reports counted (records/work.py),
    # and at the gate; the gate's more work is a regression on its own.
    work: list[WorkDelta] = field(default_factory=list)
    work_gate: WorkDelta | None = None
    work_regression: bool = False
    time_regression: bool = False
    noise: tuple[SideNoise, SideNoise] | None = None  # base, head
    dof: float | None = None  # Welch-Satterthwaite degrees of freedom of the time test
    # The smallest throughput drop this noise lets fail the gate (never below the threshold).
    detectable_drop: float | None = None
    u_test_p: float | None = None  # Mann-Whitney U, sides of several runs only
    work_verdict: str = ""
    time_verdict: str = ""
    # The head did not measure the base's recommendation (not tried, skipped, interrupted,
    # cut by --budget): the gate moved to ``compared_at``, a size both measured, and the
    # verdict at the recommendation is inconclusive.
    gate_unmeasured: bool = False
    compared_at: int | None = None
    # A side whose own evidence grades it unreliable (records/evidence.py): its time
    # cannot decide, so the time verdict is inconclusive (the work still can).
    unreliable_sides: list[str] = field(default_factory=list)


# -- the statistics ------------------------------------------------------------------------------
def slower_confidence(change: float, standard_error: float, dof: float = math.inf) -> float:
    """How sure we are that the head is slower: the one-sided probability of Student's t
    (the normal's at infinite ``dof``) of the relative ``change``'s log over its standard
    error."""
    if change <= -1:
        return 1.0
    if standard_error <= 0:
        return 1.0 if change < 0 else 0.0 if change > 0 else 0.5
    return student_t_cdf(-math.log1p(change) / standard_error, dof)


def welch_dof(noises: Sequence[SideNoise]) -> float:
    """Welch-Satterthwaite's degrees of freedom of the difference of the sides' means (inf
    where every side's noise is assumed, not estimated)."""
    total = sum(n.standard_error ** 2 for n in noises)
    spread = sum(n.standard_error ** 4 / n.dof for n in noises if math.isfinite(n.dof))
    if total <= 0 or spread <= 0:
        return math.inf
    return total ** 2 / spread


def _logs(values: Sequence[float]) -> list[float]:
    return [math.log(x) for x in values if x > 0]


def _measured_noise(report: Report, gate: int) -> tuple[float, NoiseSource] | None:
    """The noise one run measured of its own throughput at the gate, as one relative
    standard deviation: the larger of its drift control's drift and its gate throughput
    interval's half-width over 1.96 (None: it measured neither)."""
    found: tuple[float, NoiseSource] | None = None
    control = report.run.drift
    if control is not None and math.isfinite(control.drift) and control.drift > 0:
        found = (min(control.drift, MAX_RUN_NOISE), NoiseSource.CONTROL)
    batch = v.batch_of(report, gate)
    interval = batch.throughput_interval_per_s if batch is not None else None
    if interval is not None and batch is not None and batch.throughput_per_s \
            and interval.low > 0 and math.isfinite(interval.high):
        t = batch.throughput_per_s
        half = max(math.log(t) - math.log(interval.low), math.log(interval.high) - math.log(t),
                   0.0) / Z95
        if half > 0 and (found is None or half > found[0]):
            found = (min(half, MAX_RUN_NOISE), NoiseSource.INTERVAL)
    return found


def side_noise(reports: Sequence[Report], throughputs: Sequence[float], gate: int,
               run_drift: float) -> SideNoise:
    """One side's noise at the gate (:class:`SideNoise`).

    Several runs: the scatter of their log throughputs, never below the largest noise any
    of them measured of its own (:func:`_measured_noise`); Welch's degrees of freedom only
    where the scatter decides. Runs whose throughputs agree exactly (the same report given
    twice) say nothing of the drift between runs, so they count as one run. One run: the
    largest of ``run_drift`` and the noise it measured of its own."""
    logs = _logs(throughputs)
    measured = [m for report in reports if (m := _measured_noise(report, gate)) is not None]
    floor = max(measured, key=lambda m: m[0], default=None)
    if len(set(logs)) >= 2:
        sd = statistics.stdev(logs)
        per_run, source, dof = sd, NoiseSource.SCATTER, len(logs) - 1.0
        if floor is not None and floor[0] > sd:
            (per_run, source), dof = floor, math.inf
        return SideNoise(len(logs), per_run, per_run / math.sqrt(len(logs)), dof, source)
    per_run, source = run_drift, NoiseSource.RUN_DRIFT
    if floor is not None and floor[0] > per_run:
        per_run, source = floor
    return SideNoise(1, per_run, per_run, math.inf, source)


# -- the work ------------------------------------------------------------------------------------
def work_deltas(base: Report, head: Report, threshold: float) -> list[WorkDelta]:
    """The work per step at every batch size both reports measured and counted."""
    out = []
    heads: dict[int, BatchResult] = {}
    for h in v.measured(head):
        heads.setdefault(h.batch_size, h)  # the first, as view.batch_of reads it
    for b in v.measured(base):
        base_work = work_count(b)
        head_work = work_count(heads.get(b.batch_size))
        if base_work is not None and head_work is not None:
            delta = work_delta(b.batch_size, base_work, head_work, threshold)
            if delta.changes:
                out.append(delta)
    return out


MEASURE_WORDS = {WorkMeasure.FLOPS: "FLOPs", WorkMeasure.BYTES: "bytes",
                 WorkMeasure.OP_CALLS: "op calls", WorkMeasure.KERNEL_CALLS: "kernel launches"}


def change_text(c: WorkChange) -> str:
    """``"FLOPs +30.0% (1.0 MFLOP → 1.3 MFLOP)"``."""
    return f"{MEASURE_WORDS[c.measure]} {work_change_pct(c)} ({work_value(c.measure, c.base)} " \
           f"→ {work_value(c.measure, c.head)})"


def work_change_pct(c: WorkChange) -> str:
    """The change as a signed percentage, "new" where the base counted none."""
    if c.change is None:
        return "new"
    return fmt.signed_pct(c.change)


def work_value(measure: WorkMeasure, value: float) -> str:
    """A count in its unit."""
    if measure == WorkMeasure.FLOPS:
        return fmt.flops(value)
    if measure == WorkMeasure.BYTES:
        return fmt.nbytes(value)
    return fmt.number(value)


def uncounted_at(base: Report, head: Report, gate: int) -> float | None:
    """The larger share of either side's step at ``gate`` in ops nobody counted, where it
    reaches :data:`~batchscope.classifiers.coverage.HOLE_SHARE`; None below it."""
    shares = [s for r in (base, head) if (s := uncounted_share(v.batch_of(r, gate))) is not None]
    return max(shares) if shares and max(shares) >= HOLE_SHARE else None


def work_sentence(gate: int, delta: WorkDelta | None, threshold: float,
                  where: str = " (the base's recommendation)",
                  uncounted: float | None = None) -> str:
    """The work verdict at the gate in words; where ``uncounted`` (a share of the step in
    ops nobody counted) leaves a hole, on the op calls alone, never "the same"."""
    if uncounted is not None:
        hole = (f"cannot judge the work: {fmt.pct(uncounted)} of the step at batch {gate} "
                "is uncounted, so FLOPs and bytes are not compared")
        if delta is None or not delta.changes:
            return hole + "; the gate rests on time"
        if delta.same:
            return hole + "; op calls counted alike, the rest rests on time"
        return hole + "; " + work_sentence(gate, delta, threshold, where)
    if delta is None:
        return (f"the work per step at batch {gate} was not counted on both sides (a "
                "timing-only run, or the head did not measure it): the gate rests on time")
    if delta.more_work:
        return (f"the head does more work per step at batch {gate}{where}: "
                + ", ".join(change_text(c) for c in delta.more_work)
                + f" — past the {fmt.pct(threshold)} threshold, and counted, so no drift "
                "explains it")
    names = ", ".join(MEASURE_WORDS[c.measure] for c in delta.changes)
    if delta.less_work:
        return (f"the head does less work per step at batch {gate}: "
                + ", ".join(change_text(c) for c in delta.less_work))
    if delta.same:
        return f"the work per step at batch {gate} is the same ({names} counted alike)"
    moved = max(delta.changes, key=lambda c: abs(c.change or 0.0))
    return (f"the work per step at batch {gate} is within the {fmt.pct(threshold)} threshold "
            f"(the largest move: {change_text(moved)})")


# -- the comparison -------------------------------------------------------------------------------
def _geomean(values: Sequence[float]) -> float:
    """The geometric mean of positive throughputs (the mean of their logs, where the test
    works), 0.0 when any is not positive."""
    if not values or min(values) <= 0:
        return 0.0
    return math.exp(statistics.fmean(math.log(x) for x in values))


def _iqr_share(batch: BatchResult | None) -> float | None:
    """The spread of a batch's step latency (p25 to p75) as a share of its median."""
    lat = batch.latency_s if batch is not None else None
    if lat is None or not lat.median:
        return None
    return (lat.p75 - lat.p25) / lat.median


def _rows(base: Report, head: Report) -> list[BatchDelta]:
    by_size: dict[int, list[BatchResult | None]] = {}
    for i, report in enumerate((base, head)):
        for batch in report.batches:
            by_size.setdefault(batch.batch_size, [None, None])[i] = batch
    rows = []
    for size in sorted(by_size):
        b, h = by_size[size]
        b_measured = b if b is not None and v.is_measured(b) else None
        h_measured = h if h is not None and v.is_measured(h) else None
        rows.append(BatchDelta(
            size, b.status.value if b is not None else "absent",
            h.status.value if h is not None else "absent",
            b_measured.throughput_per_s if b_measured else None,
            h_measured.throughput_per_s if h_measured else None,
            v.latency_median(b_measured), v.latency_median(h_measured),
        ))
    return rows


def _class_changes(base: Report, head: Report) -> list[ClassChange]:
    out = []
    for b in v.measured(base):
        h = v.batch_of(head, b.batch_size)
        if h is None:
            continue
        head_ops = {op.op_id: op for op in h.ops}
        for op in b.ops:
            other = head_ops.get(op.op_id)
            if other is not None and other.bound != op.bound:
                out.append(ClassChange(b.batch_size, op.op_id, op.name, op.module,
                                       op.bound.value, other.bound.value))
    return out


def spread_warning(label: str, gate: int, spread: float, threshold: float) -> str:
    """The sentence for a timing spread past half the threshold, worded by how the two
    numbers compare (a 27% spread is *wider than* a 10% threshold, not close to it)."""
    if spread >= threshold:
        relation = f"wider than the {fmt.pct(threshold)} threshold itself"
    else:
        relation = f"more than half the {fmt.pct(threshold)} threshold"
    return (f"the {label}'s step latency at batch {gate} spreads {fmt.pct(spread, 1)} (p25 to "
            f"p75), {relation}: its time says little about a change of that size; rerun with "
            "a longer --min-time on a quiet machine, or time both sides with --ab")


def _warnings(base: Report, head: Report, gate: int, threshold: float) -> list[str]:
    out = []
    hb, hh = base.hardware, head.hardware
    if hb is not None and hh is not None and \
            (hb.name, hb.device, hb.threads) != (hh.name, hh.device, hh.threads):
        out.append(f"the reports come from different machines ({hb.name}, "
                   f"{hb.threads} threads vs {hh.name}, {hh.threads} "
                   "threads): throughput is only comparable on the same one")
    base_model, head_model = base.model, head.model
    for key, mb, mh in (("dtype", base_model.dtype, head_model.dtype),
                        ("mode", base_model.mode.value, head_model.mode.value),
                        ("unit", base_model.unit, head_model.unit)):
        if mb != mh:
            out.append(f"{key} differs: {mb} in the base, {mh} in the head")
    for label, report in (("base", base), ("head", head)):
        spread = _iqr_share(v.batch_of(report, gate))
        if spread is not None and spread > NOISE_SHARE_OF_THRESHOLD * threshold:
            out.append(spread_warning(label, gate, spread, threshold))
        if report.partial:
            out.append(f"the {label} report is partial (the sweep was interrupted)")
    return out


def _rule(report: Report) -> str:
    """The rule that picked the report's recommendation, in words ("" without one)."""
    rec = report.recommendation
    return rule_text(rec.rule, v.unit(report)) if rec is not None else ""


def _throughputs(reports: Sequence[Report], gate: int) -> list[float]:
    """Each run's measured throughput at the gate (runs that did not measure it left out)."""
    return [b.throughput_per_s for report in reports
            if (b := v.batch_of(report, gate)) is not None and b.throughput_per_s is not None]


@dataclass(frozen=True)
class _TimeVerdict:
    change: float | None
    regression: bool
    inconclusive: bool
    sentence: str
    se: float | None = None
    confidence: float | None = None
    noise: tuple[SideNoise, SideNoise] | None = None
    dof: float | None = None
    detectable: float | None = None
    u_test_p: float | None = None


def _time_verdict(bases: Sequence[Report], heads: Sequence[Report], gate: int, unit: str,
                  threshold: float, run_drift: float) -> _TimeVerdict:
    base_runs, head_runs = _throughputs(bases, gate), _throughputs(heads, gate)
    base_t = _geomean(base_runs)
    if not head_runs:
        failed = _failed_at(heads, gate)
        if failed is not None:
            return _TimeVerdict(None, True, False,
                                f"the head could not run batch {gate}, the base's "
                                f"recommendation ({failed}); the base ran it at "
                                f"{fmt.rate(base_t, unit)}")
        return _TimeVerdict(None, False, True,
                            f"the head did not measure batch {gate}, the base's recommendation "
                            f"({_status_at(heads[0], gate)}): inconclusive there")
    head_t = _geomean(head_runs)
    change = head_t / base_t - 1.0
    noise = (side_noise(bases, base_runs, gate, run_drift),
             side_noise(heads, head_runs, gate, run_drift))
    se = math.hypot(noise[0].standard_error, noise[1].standard_error)
    dof = welch_dof(noise)
    critical = student_t_quantile(CONFIDENCE, dof) if se > 0 else 0.0
    confidence = slower_confidence(change, se, dof)
    log_change = math.log1p(change) if change > -1 else -math.inf
    beyond_noise = se == 0 or log_change <= -critical * se
    regression = change < -threshold and beyond_noise
    inconclusive = change < -threshold and not beyond_noise
    detectable = max(threshold, -math.expm1(-critical * se))
    u_p = (mann_whitney_u(base_runs, head_runs)
           if min(len(base_runs), len(head_runs)) >= U_TEST_MIN_RUNS else None)
    runs = ("" if len(base_runs) == len(head_runs) == 1 else
            f", means of {len(base_runs)} base and {len(head_runs)} head runs")
    kind = "drift between runs" if any(n.runs == 1 for n in noise) else "noise between runs"
    sentence = (f"throughput at batch {gate} (the base's recommendation) went from "
                f"{fmt.rate(base_t, unit)} to {fmt.rate(head_t, unit)} "
                f"({fmt.signed_pct(change)}; the threshold is −{fmt.pct(threshold)}{runs}); "
                f"{kind} ±{fmt.pct(-math.expm1(-critical * se), 1)} at 95%, "
                f"{fmt.pct(confidence, 1)} sure the head is slower")
    if u_p is not None:
        sentence += f" (Mann-Whitney U p = {u_p:.3g})"
    if inconclusive:
        sentence += (" — the drop is within that noise: repeat each side's run (give "
                     "several reports, comma-separated) or time both sides in one run (--ab) "
                     "to decide")
    return _TimeVerdict(change, regression, inconclusive, sentence, se, confidence, noise,
                        dof, detectable, u_p)


# A size the head did not run at all, or stopped before measuring: no evidence either way.
# Every other status at the gate is a failure of the head's (out of memory, killed, an
# error): a regression, as it was never one of the base's.
_NOT_MEASURED = {Status.INTERRUPTED, Status.SKIPPED}


def _status_at(report: Report, gate: int) -> str:
    """The report's status at ``gate`` in words ("not tried" where it never got there)."""
    return next((str(b.status.value) for b in report.batches if b.batch_size == gate),
                "not tried")


def _failed_at(reports: Sequence[Report], gate: int) -> str | None:
    """The status of the first run that failed at ``gate`` (None: none failed there; those
    that did not measure it never got there, or stopped before)."""
    for report in reports:
        batch = next((b for b in report.batches if b.batch_size == gate), None)
        if batch is not None and batch.status != Status.OK \
                and batch.status not in _NOT_MEASURED:
            return str(batch.status.value)
    return None


def fallback_gate(base: Report, head: Report, gate: int) -> int | None:
    """Where to compare when the head did not measure ``gate``: the largest size of the
    base's equivalent set that both measured, else the size both measured nearest to it
    (the smaller on a tie); None where they share none."""
    both = sorted({b.batch_size for b in v.measured(base)}
                  & {b.batch_size for b in v.measured(head)})
    if not both:
        return None
    rec = base.recommendation
    equivalent = [b for b in (rec.equivalent_batch_sizes if rec else []) if b in both]
    if equivalent:
        return max(equivalent)
    return min(both, key=lambda b: (abs(math.log(b / gate)), b))


def _unreliable(reports: Sequence[Report]) -> bool:
    """Whether any run's own evidence grades it unreliable."""
    return any(r.evidence is not None and r.evidence.grade == Grade.UNRELIABLE
               for r in reports)


def verdict_label(regression: bool, inconclusive: bool) -> str:
    """The verdict's first words, for ``compare`` and its A/B mode alike."""
    return "regression" if regression else "inconclusive" if inconclusive else "no regression"


def compare(base: Report | Sequence[Report], head: Report | Sequence[Report],
            threshold: float = DEFAULT_THRESHOLD, base_label: str = "base",
            head_label: str = "head", run_drift: float = RUN_DRIFT) -> Comparison:
    """Compare typed reports; ``threshold`` is the largest tolerated throughput drop and the
    largest tolerated growth of the work per step.

    ``base`` and ``head`` are each one report or several runs of the same code (repeated
    reports); the first of each is the one shown row by row, and whose work is compared.
    Reports from outside come through :func:`~batchscope.records.codec.decode_report` (or
    :func:`load_report`), so every field here has its type.

    Raises:
        UsageError: a side holds no report, the threshold is out of range, or the base
            recommends no measured batch size.
    """
    bases = [base] if isinstance(base, Report) else list(base)
    heads = [head] if isinstance(head, Report) else list(head)
    for label, side in ((base_label, bases), (head_label, heads)):
        if not side:
            raise UsageError(f"{label} names no report to compare.")
    if not 0 < threshold < 1:
        raise UsageError(f"the threshold must be between 0% and 100%, not {fmt.pct(threshold)}.")
    if not 0 <= run_drift < 1:
        raise UsageError(f"the run drift must be between 0% and 100%, not {fmt.pct(run_drift)}.")
    first_base, first_head = bases[0], heads[0]
    base_rec = first_base.recommendation
    gate = base_rec.batch_size if base_rec is not None else None
    if gate is None or v.batch_of(first_base, gate) is None:
        raise UsageError(f"{base_label} has no recommended batch size, so there is nothing to "
                         "hold the head to.")
    unit = v.unit(first_base)
    time = _time_verdict(bases, heads, gate, unit, threshold, run_drift)
    compared_at: int | None = gate
    unmeasured = time.change is None and not time.regression
    if unmeasured:
        # The head never got to the base's pick: judge where both measured, and say that
        # the pick itself is inconclusive. Never a regression by itself.
        compared_at = fallback_gate(first_base, first_head, gate)
        if compared_at is not None:
            there = _time_verdict(bases, heads, compared_at, unit, threshold, run_drift)
            where = (" (in the base's equivalent set)" if first_base.recommendation
                     and compared_at in first_base.recommendation.equivalent_batch_sizes
                     else "")
            time = dataclasses.replace(
                there, inconclusive=there.inconclusive or not there.regression,
                sentence=(f"{time.sentence}; compared at batch {compared_at} instead, which "
                          f"both measured{where}: "
                          + there.sentence.replace(" (the base's recommendation)", "")))
    unreliable = [label for label, side in ((base_label, bases), (head_label, heads))
                  if _unreliable(side)]
    if unreliable and time.regression and time.change is not None:
        time = dataclasses.replace(
            time, regression=False, inconclusive=True,
            sentence=time.sentence + f" — but the evidence of {' and '.join(unreliable)} is "
                     "unreliable by its own measurements (see its report's first line), so "
                     "its time cannot decide: rerun it on a quieter machine, or time both "
                     "sides in one run (--ab)")
    work_at = compared_at if compared_at is not None else gate
    work = work_deltas(first_base, first_head, threshold)
    work_gate = next((d for d in work if d.batch_size == work_at), None)
    uncounted = uncounted_at(first_base, first_head, work_at)  # a hole: op calls judged alone
    if uncounted is not None and work_gate is not None:
        work_gate = calls_only(work_gate)
    work_regression = work_gate is not None and bool(work_gate.more_work)
    regression = time.regression or work_regression
    inconclusive = time.inconclusive and not regression
    work_text = work_sentence(work_at, work_gate, threshold,
                              " (the base's recommendation)" if work_at == gate else "",
                              uncounted=uncounted)
    parts = [work_text, time.sentence] if work_regression else [time.sentence, work_text]
    verdict = f"{verdict_label(regression, inconclusive)}: " + "; ".join(parts)
    head_rec = first_head.recommendation
    warnings = _warnings(first_base, first_head, gate, threshold)
    elsewhere = [d for d in work if d.batch_size != gate and d.more_work]
    if elsewhere:
        warnings.append("the head does more work per step at other batch sizes (the gate "
                        "holds it at the base's recommendation only): "
                        + "; ".join(f"batch {d.batch_size}: "
                                    + ", ".join(change_text(c) for c in d.more_work)
                                    for d in elsewhere[:6])
                        + (f"; and {len(elsewhere) - 6} more" if len(elsewhere) > 6 else ""))
    if time.noise is not None and any(n.runs == 1 for n in time.noise):
        per_run = max(n.per_run for n in time.noise if n.runs == 1)
        warnings.append(f"a side with a single run is given ±{fmt.pct(per_run, 1)} of "
                        f"run-to-run drift (--run-drift {fmt.pct(run_drift)}, or the run's own "
                        "drift control where larger), so its time fails the gate only past a "
                        f"{fmt.pct(time.detectable or 0.0, 1)} drop; repeated runs measure the "
                        "drift instead, and --ab cancels it")
    return Comparison(
        base_target=v.target(first_base), head_target=v.target(first_head), unit=unit,
        threshold=threshold, rows=_rows(first_base, first_head), base_recommended=gate,
        head_recommended=head_rec.batch_size if head_rec is not None else None,
        base_rule=_rule(first_base), head_rule=_rule(first_head), gate_change=time.change,
        regression=regression, verdict=verdict,
        class_changes=_class_changes(first_base, first_head), warnings=warnings,
        runs=(len(bases), len(heads)), standard_error=time.se, confidence=time.confidence,
        inconclusive=inconclusive, work=work, work_gate=work_gate,
        work_regression=work_regression, time_regression=time.regression, noise=time.noise,
        dof=time.dof, detectable_drop=time.detectable, u_test_p=time.u_test_p,
        work_verdict=work_text, time_verdict=time.sentence, gate_unmeasured=unmeasured,
        compared_at=compared_at, unreliable_sides=unreliable,
    )


def _paths(paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[str]:
    return [str(paths)] if isinstance(paths, (str, os.PathLike)) else [str(p) for p in paths]


def compare_files(base_paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
                  head_paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
                  threshold: float = DEFAULT_THRESHOLD, run_drift: float = RUN_DRIFT) -> Comparison:
    """Read report.json files with :func:`load_report` (one, or several runs a side) and
    compare them.

    Raises:
        UsageError: a side names no file, a file is not a report (one sentence naming it),
            or :func:`compare` refuses them.
    """
    bases, heads = _paths(base_paths), _paths(head_paths)
    for side, names in (("base", bases), ("head", heads)):
        if not names:
            raise UsageError(f"no report.json was given for the {side}.")
    return compare([load_report(p) for p in bases], [load_report(p) for p in heads], threshold,
                   ", ".join(bases), ", ".join(heads), run_drift)

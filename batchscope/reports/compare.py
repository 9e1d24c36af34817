"""``diagnose compare BASE.json HEAD.json``: what changed between two reports, and a CI gate.

The gate is throughput at the batch size the *base* recommends: a change that makes that
batch more than ``threshold`` slower, by more than the noise between runs can explain, is a
regression (exit 1), and so is a head that could not measure it at all.

The noise is judged, not assumed away. The same code drifts between runs on a shared
machine by more than its spread inside one run. Issue 13 measured BERT at batch 1 at 139,
171, 170 and 141 ms, each run tight. So each side may be several runs (repeated reports):
their mean throughput is compared, and the standard error comes from their scatter. A side
with a single run is given :data:`RUN_DRIFT` (``--run-drift``) of run-to-run noise. A drop
beyond the threshold but within ~2 standard errors is *inconclusive*, not a regression, and
the verdict says how confident it is. Reports are read with
:func:`~batchscope.reports.json_report.load_report` (the typed loader,
:func:`~batchscope.records.codec.decode_report`), so a foreign file is a usage error
(exit 4), never a crash, and everything here reads typed fields.

Example:
    >>> result = compare_files("base/report.json", "head/report.json")  # doctest: +SKIP
    >>> result.regression  # doctest: +SKIP
    False
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from batchscope.errors import UsageError
from batchscope.records import BatchResult, Report
from batchscope.reports import fmt
from batchscope.reports import view as v
from batchscope.reports.flag_text import rule_text
from batchscope.reports.json_report import load_report

DEFAULT_THRESHOLD = 0.10
REGRESSION_EXIT_CODE = 1
# A timing spread (IQR over median) above this share of the threshold makes the verdict
# fragile: the reader is told to rerun with a longer --min-time.
NOISE_SHARE_OF_THRESHOLD = 0.5
MAX_CLASS_CHANGES = 40
# Run-to-run noise of one run's throughput (a relative standard deviation) on a side with a
# single report: the per-round scatter of docs/benchmarks.md table 1 on these 2-core VMs is
# ~5% (0.89-1.20 of Timer's median at worst); repeated runs replace it with their own.
RUN_DRIFT = 0.05
# A drop is a regression only this many standard errors beyond noise (~97.5% one-sided).
Z_CONFIDENT = 1.96


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
    standard_error: float | None = None  # of the relative throughput change
    confidence: float | None = None  # that the head is slower at the gate (one-sided)
    inconclusive: bool = False  # a drop past the threshold that the noise can explain


def run_noise(throughputs: Sequence[float], run_drift: float) -> float:
    """The relative standard error of the mean throughput of one side's runs: from their
    scatter when there are several, else ``run_drift`` (one run says nothing of drift)."""
    if len(throughputs) < 2:
        return run_drift
    mean = statistics.fmean(throughputs)
    return statistics.stdev(throughputs) / mean / math.sqrt(len(throughputs))


def slower_confidence(change: float, standard_error: float) -> float:
    """How sure we are that the head is slower: the one-sided normal probability."""
    z = -change / standard_error if standard_error > 0 else math.inf
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0))) if math.isfinite(z) else 1.0


def _mean(values: Sequence[float]) -> float:
    """The mean of finite throughputs, without overflowing where their sum would."""
    try:
        return statistics.fmean(values)
    except OverflowError:  # a sum past float64's range: each value scaled first cannot be
        return math.fsum(x / len(values) for x in values)


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
            out.append(f"the {label}'s step latency at batch {gate} spreads {fmt.pct(spread, 1)} "
                       f"(p25 to p75), close to the {fmt.pct(threshold)} threshold: rerun with a "
                       "longer --min-time on a quiet machine")
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


def compare(base: Report | Sequence[Report], head: Report | Sequence[Report],
            threshold: float = DEFAULT_THRESHOLD, base_label: str = "base",
            head_label: str = "head", run_drift: float = RUN_DRIFT) -> Comparison:
    """Compare typed reports; ``threshold`` is the largest tolerated throughput drop.

    ``base`` and ``head`` are each one report or several runs of the same code (repeated
    reports); the first of each is the one shown row by row. Reports from outside come
    through :func:`~batchscope.records.codec.decode_report` (or :func:`load_report`), so
    every field here has its type.

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
    base_runs, head_runs = _throughputs(bases, gate), _throughputs(heads, gate)
    base_t = _mean(base_runs)
    se = confidence = None
    inconclusive = False
    if not head_runs:
        status = next((b.status.value for b in first_head.batches if b.batch_size == gate),
                      "not tried")
        change, regression = None, True
        verdict = (f"regression: the head did not measure batch {gate}, the base's "
                   f"recommendation ({status}); the base ran it at {fmt.rate(base_t, unit)}")
    else:
        head_t = _mean(head_runs)
        change = head_t / base_t - 1.0
        se = math.hypot(run_noise(base_runs, run_drift), run_noise(head_runs, run_drift))
        confidence = slower_confidence(change, se)
        beyond_noise = se == 0 or change / se <= -Z_CONFIDENT
        regression = change < -threshold and beyond_noise
        inconclusive = change < -threshold and not beyond_noise
        what = ("regression" if regression else
                "inconclusive" if inconclusive else "no regression")
        runs = ("" if len(base_runs) == len(head_runs) == 1 else
                f", means of {len(base_runs)} base and {len(head_runs)} head runs")
        verdict = (f"{what}: throughput at batch {gate} (the base's recommendation) went from "
                   f"{fmt.rate(base_t, unit)} to {fmt.rate(head_t, unit)} "
                   f"({fmt.signed_pct(change)}; the threshold is −{fmt.pct(threshold)}{runs}); "
                   f"noise between runs ±{fmt.pct(Z_CONFIDENT * se, 1)} at 95%, "
                   f"{fmt.pct(confidence, 1)} sure the head is slower")
        if inconclusive:
            verdict += (" — the drop is within that noise: repeat each side's run (give "
                        "several reports, comma-separated) to decide")
    head_rec = first_head.recommendation
    warnings = _warnings(first_base, first_head, gate, threshold)
    if len(base_runs) == 1 or len(head_runs) == 1:
        warnings.append(f"a side with a single run is given ±{fmt.pct(run_drift)} of "
                        "run-to-run drift (--run-drift); repeated runs measure it instead")
    return Comparison(
        base_target=v.target(first_base), head_target=v.target(first_head), unit=unit,
        threshold=threshold, rows=_rows(first_base, first_head), base_recommended=gate,
        head_recommended=head_rec.batch_size if head_rec is not None else None,
        base_rule=_rule(first_base), head_rule=_rule(first_head), gate_change=change,
        regression=regression, verdict=verdict,
        class_changes=_class_changes(first_base, first_head), warnings=warnings,
        runs=(len(bases), len(heads)), standard_error=se, confidence=confidence,
        inconclusive=inconclusive,
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

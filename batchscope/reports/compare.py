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
the verdict says how confident it is. Reports are read with :func:`~batchscope.reports.json_report.load_report`
and report dicts checked with :func:`~batchscope.reports.report_shape.check_report` before
use, so a foreign file is a usage error (exit 4), never a crash.

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
from batchscope.reports import fmt
from batchscope.reports import view as v
from batchscope.reports.json_report import load_report
from batchscope.reports.report_shape import check_report, is_number
from batchscope.reports.view import Doc

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


def _iqr_share(batch: Doc | None) -> float | None:
    lat = (batch or {}).get("latency_s") or {}
    med = lat.get("median")
    if not med or not is_number(lat.get("p25")) or not is_number(lat.get("p75")):
        return None
    return (lat["p75"] - lat["p25"]) / med


def _rows(base: Doc, head: Doc) -> list[BatchDelta]:
    by_size: dict[int, list[Doc | None]] = {}
    for i, doc in enumerate((base, head)):
        for b in v.batches(doc):
            by_size.setdefault(b["batch_size"], [None, None])[i] = b
    rows = []
    for size in sorted(by_size):
        b, h = by_size[size]
        rows.append(BatchDelta(
            size, (b or {}).get("status", "absent"), (h or {}).get("status", "absent"),
            b.get("throughput_per_s") if b and v.is_measured(b) else None,
            h.get("throughput_per_s") if h and v.is_measured(h) else None,
            v.latency_median(b) if b and v.is_measured(b) else None,
            v.latency_median(h) if h and v.is_measured(h) else None,
        ))
    return rows


def _class_changes(base: Doc, head: Doc) -> list[ClassChange]:
    out = []
    for b in v.measured(base):
        h = v.batch_of(head, b["batch_size"])
        if h is None:
            continue
        head_ops = {str(op.get("op_id")): op for op in h.get("ops") or [] if isinstance(op, dict)}
        for op in b.get("ops") or []:
            other = head_ops.get(str(op.get("op_id")))
            if isinstance(op, dict) and other and other.get("bound") != op.get("bound"):
                out.append(ClassChange(b["batch_size"], str(op.get("op_id")), str(op.get("name")),
                                       str(op.get("module") or ""), str(op.get("bound")),
                                       str(other.get("bound"))))
    return out


def _warnings(base: Doc, head: Doc, gate: int, threshold: float) -> list[str]:
    out = []
    hb, hh = base.get("hardware") or {}, head.get("hardware") or {}
    same = (hb.get("name"), hb.get("device"), hb.get("threads")) == \
        (hh.get("name"), hh.get("device"), hh.get("threads"))
    if hb and hh and not same:
        out.append(f"the reports come from different machines ({hb.get('name')}, "
                   f"{hb.get('threads')} threads vs {hh.get('name')}, {hh.get('threads')} "
                   "threads): throughput is only comparable on the same one")
    for key in ("dtype", "mode", "unit"):
        mb, mh = (base.get("model") or {}).get(key), (head.get("model") or {}).get(key)
        if mb != mh:
            out.append(f"{key} differs: {mb} in the base, {mh} in the head")
    for label, doc in (("base", base), ("head", head)):
        spread = _iqr_share(v.batch_of(doc, gate))
        if spread is not None and spread > NOISE_SHARE_OF_THRESHOLD * threshold:
            out.append(f"the {label}'s step latency at batch {gate} spreads {fmt.pct(spread, 1)} "
                       f"(p25 to p75), close to the {fmt.pct(threshold)} threshold: rerun with a "
                       "longer --min-time on a quiet machine")
        if doc.get("partial"):
            out.append(f"the {label} report is partial (the sweep was interrupted)")
    return out


def compare(base: Doc | Sequence[Doc], head: Doc | Sequence[Doc],
            threshold: float = DEFAULT_THRESHOLD, base_label: str = "base",
            head_label: str = "head", run_drift: float = RUN_DRIFT) -> Comparison:
    """Compare report dicts; ``threshold`` is the largest tolerated throughput drop.

    ``base`` and ``head`` are each one report or several runs of the same code (repeated
    reports); the first of each is the one shown row by row.

    Raises:
        UsageError: a report is not one (see :func:`check_report`), the threshold is out of
            range, or the base recommends no measured batch size.
    """
    bases = [base] if isinstance(base, dict) else list(base)
    heads = [head] if isinstance(head, dict) else list(head)
    for i, doc in enumerate(bases):
        check_report(doc, base_label if len(bases) == 1 else f"{base_label} run {i + 1}")
    for i, doc in enumerate(heads):
        check_report(doc, head_label if len(heads) == 1 else f"{head_label} run {i + 1}")
    if not 0 < threshold < 1:
        raise UsageError(f"the threshold must be between 0% and 100%, not {fmt.pct(threshold)}.")
    if not 0 <= run_drift < 1:
        raise UsageError(f"the run drift must be between 0% and 100%, not {fmt.pct(run_drift)}.")
    base, head = bases[0], heads[0]
    gate = v.recommendation(base).get("batch_size")
    base_batch = v.batch_of(base, gate)
    if gate is None or base_batch is None:
        raise UsageError(f"{base_label} has no recommended batch size, so there is nothing to "
                         "hold the head to.")
    unit = v.unit(base)
    base_runs = [b["throughput_per_s"] for doc in bases
                 if (b := v.batch_of(doc, gate)) is not None]
    head_runs = [h["throughput_per_s"] for doc in heads
                 if (h := v.batch_of(doc, gate)) is not None]
    base_t = statistics.fmean(base_runs)
    se = confidence = None
    inconclusive = False
    if not head_runs:
        status = next((b.get("status") for b in v.batches(head) if b["batch_size"] == gate),
                      "not tried")
        change, regression = None, True
        verdict = (f"regression: the head did not measure batch {gate}, the base's "
                   f"recommendation ({status}); the base ran it at {fmt.rate(base_t, unit)}")
    else:
        head_t = statistics.fmean(head_runs)
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
    head_rec = v.recommendation(head)
    warnings = _warnings(base, head, gate, threshold)
    if len(base_runs) == 1 or len(head_runs) == 1:
        warnings.append(f"a side with a single run is given ±{fmt.pct(run_drift)} of "
                        "run-to-run drift (--run-drift); repeated runs measure it instead")
    return Comparison(
        base_target=v.target(base), head_target=v.target(head), unit=unit, threshold=threshold,
        rows=_rows(base, head), base_recommended=gate,
        head_recommended=head_rec.get("batch_size"),
        base_rule=str(v.recommendation(base).get("rule") or ""),
        head_rule=str(head_rec.get("rule") or ""), gate_change=change, regression=regression,
        verdict=verdict, class_changes=_class_changes(base, head), warnings=warnings,
        runs=(len(bases), len(heads)), standard_error=se, confidence=confidence,
        inconclusive=inconclusive,
    )


def compare_files(base_paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
                  head_paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
                  threshold: float = DEFAULT_THRESHOLD, run_drift: float = RUN_DRIFT) -> Comparison:
    """Read report.json files with :func:`load_report` (one, or several runs a side) and
    compare them."""
    def paths(p: object) -> list[str]:
        return [str(p)] if isinstance(p, (str, os.PathLike)) else [str(x) for x in p]  # type: ignore[union-attr]

    bases, heads = paths(base_paths), paths(head_paths)
    return compare([load_report(p) for p in bases], [load_report(p) for p in heads], threshold,
                   ", ".join(bases), ", ".join(heads), run_drift)

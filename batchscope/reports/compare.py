"""``diagnose compare BASE.json HEAD.json``: what changed between two reports, and a CI gate.

The gate is throughput at the batch size the *base* recommends: a change that makes that
batch more than ``threshold`` slower is a regression (exit 1), and so is a head that could
not measure it at all. Reports are read with :func:`~batchscope.reports.json_report.load_report`
and report dicts checked with :func:`~batchscope.reports.report_shape.check_report` before
use, so a foreign file is a usage error (exit 4), never a crash.

Example:
    >>> result = compare_files("base/report.json", "head/report.json")  # doctest: +SKIP
    >>> result.regression  # doctest: +SKIP
    False
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

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


def compare(base: Doc, head: Doc, threshold: float = DEFAULT_THRESHOLD,
            base_label: str = "base", head_label: str = "head") -> Comparison:
    """Compare two report dicts; ``threshold`` is the largest tolerated throughput drop.

    Raises:
        UsageError: a report is not one (see :func:`check_report`), the threshold is out of
            range, or the base recommends no measured batch size.
    """
    check_report(base, base_label)
    check_report(head, head_label)
    if not 0 < threshold < 1:
        raise UsageError(f"the threshold must be between 0% and 100%, not {fmt.pct(threshold)}.")
    gate = v.recommendation(base).get("batch_size")
    base_batch = v.batch_of(base, gate)
    if gate is None or base_batch is None:
        raise UsageError(f"{base_label} has no recommended batch size, so there is nothing to "
                         "hold the head to.")
    unit = v.unit(base)
    head_batch = v.batch_of(head, gate)
    base_t = base_batch["throughput_per_s"]
    if head_batch is None:
        status = next((b.get("status") for b in v.batches(head) if b["batch_size"] == gate),
                      "not tried")
        change, regression = None, True
        verdict = (f"regression: the head did not measure batch {gate}, the base's "
                   f"recommendation ({status}); the base ran it at {fmt.rate(base_t, unit)}")
    else:
        head_t = head_batch["throughput_per_s"]
        change = head_t / base_t - 1.0
        regression = change < -threshold
        what = "regression" if regression else "no regression"
        verdict = (f"{what}: throughput at batch {gate} (the base's recommendation) went from "
                   f"{fmt.rate(base_t, unit)} to {fmt.rate(head_t, unit)} "
                   f"({fmt.signed_pct(change)}; the threshold is −{fmt.pct(threshold)})")
    head_rec = v.recommendation(head)
    return Comparison(
        base_target=v.target(base), head_target=v.target(head), unit=unit, threshold=threshold,
        rows=_rows(base, head), base_recommended=gate,
        head_recommended=head_rec.get("batch_size"),
        base_rule=str(v.recommendation(base).get("rule") or ""),
        head_rule=str(head_rec.get("rule") or ""), gate_change=change, regression=regression,
        verdict=verdict, class_changes=_class_changes(base, head),
        warnings=_warnings(base, head, gate, threshold),
    )


def compare_files(base_path: str | os.PathLike[str], head_path: str | os.PathLike[str],
                  threshold: float = DEFAULT_THRESHOLD) -> Comparison:
    """Read two report.json files with :func:`load_report` and compare them."""
    base, head = load_report(base_path), load_report(head_path)
    return compare(base, head, threshold, str(base_path), str(head_path))

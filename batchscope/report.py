"""The :class:`Report`: everything one run produced, in the layout of report.json."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from batchscope.hardware.types import Ceilings
from batchscope.records import BatchResult, to_jsonable

SCHEMA = "batchscope.report/1"


@dataclass
class Recommendation:
    """report.json ``recommendation`` (DESIGN.md)."""

    batch_size: int | None
    rule: str
    speedup_from_batching: float | None
    speedup_baseline_batch: int | None
    predicted_critical_batch: float | None  # the knee the roofline predicts (B* = t0 / c)
    measured_knee_batch: float | None
    measured_knee_within_sweep: bool
    explanation: str
    # Where the layers that read weights or state turn compute-bound; None with
    # ``..._infinite`` True when they never do.
    predicted_compute_bound_batch: float | None = None
    predicted_compute_bound_infinite: bool = False
    near_best_share: float = 0.9  # the rule's share of the best throughput
    # The terms B* and the compute-bound batch came from (classifiers/critical_batch.py).
    prediction: dict[str, Any] = field(default_factory=dict)
    best_batch_size: int | None = None
    best_throughput_per_s: float | None = None
    excluded: dict[int, str] = field(default_factory=dict)


@dataclass
class Report:
    """One diagnosis. ``to_dict()`` is the report.json document.

    Example:
        >>> report = batchscope.diagnose_file("samples/mlp.py")  # doctest: +SKIP
        >>> report.recommendation.batch_size  # doctest: +SKIP
    """

    model: dict[str, Any]
    hardware: Ceilings | None
    batches: list[BatchResult]
    recommendation: Recommendation | None
    run: dict[str, Any]
    batch_response: dict[str, list[dict[str, float]]] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    partial: bool = False
    stop_reason: str = ""
    # Labelled estimates of larger batch sizes (``watch`` only); never measurements.
    estimates: list[Any] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        hardware = self.hardware.to_dict() if self.hardware else None
        return {
            "schema": SCHEMA,
            "partial": self.partial,
            "stop_reason": self.stop_reason,
            "model": to_jsonable(self.model),
            "hardware": hardware,
            "run": to_jsonable(self.run),
            "batches": to_jsonable(self.batches),
            "recommendation": to_jsonable(self.recommendation),
            "batch_response": to_jsonable(self.batch_response),
            "flags": list(self.flags),
            "estimates": to_jsonable(self.estimates),
        }

    def _repr_html_(self) -> str:
        """Notebook display: the full report.html in a sandboxed iframe."""
        import html

        from batchscope.reports.html import render_html

        page = render_html(self.to_dict())
        return (f'<iframe srcdoc="{html.escape(page, quote=True)}" sandbox="allow-scripts" '
                'style="width: 100%; height: 900px; border: 0"></iframe>')

    def save(self, out_dir: str) -> dict[str, str]:
        """Write report.json (and the other formats that exist) into ``out_dir``."""
        from batchscope.reports import write_all

        return write_all(self, out_dir)

"""Turn a sweep's raw results into a :class:`~batchscope.report.Report` (pure, no I/O)."""

from __future__ import annotations

from typing import Any

from batchscope.classifiers.critical_batch import (
    measured_knee,
    predict_critical_batch,
    predicted_knee,
)
from batchscope.classifiers.explain import explain
from batchscope.classifiers.recommend import recommend
from batchscope.classifiers.roofline import batch_response, classify_batch
from batchscope.hardware.types import Ceilings
from batchscope.plan import Limits
from batchscope.records import BatchResult, Status
from batchscope.report import Recommendation, Report


def analyze(
    info: dict[str, Any],
    ceilings: Ceilings | None,
    results: list[BatchResult],
    limits: Limits,
    run: dict[str, Any],
    *,
    partial: bool = False,
    stop_reason: str = "",
) -> Report:
    """Classify every op, predict and measure B*, recommend a batch size, explain it."""
    unit = info.get("unit", "sample")
    dtype = info.get("dtype", "float32")
    batches = [classify_batch(r, ceilings) if ceilings else r for r in results]
    choice = recommend(batches, limits, unit)
    prediction = predict_critical_batch(batches, ceilings, dtype) if ceilings else None
    knee, knee_inside = measured_knee(batches)
    pred_knee, _ = predicted_knee(batches)
    flags = [f"batch {r.batch_size}: {flag}" for r in batches for flag in r.flags]
    failed = [r for r in batches if r.status not in (Status.OK, Status.OOM)]
    for r in failed:
        first_line = r.error.splitlines()[0] if r.error else ""
        flags.append(f"batch {r.batch_size} ended as {r.status.value}: {first_line}")
    recommendation = None
    if choice is not None:
        recommendation = Recommendation(
            batch_size=choice.batch_size,
            rule=choice.rule,
            speedup_from_batching=choice.speedup_from_batching,
            speedup_baseline_batch=choice.speedup_baseline_batch,
            predicted_critical_batch=prediction.critical_batch if prediction else None,
            predicted_critical_batch_infinite=bool(prediction and prediction.critical_batch is None),
            measured_knee_batch=knee,
            measured_knee_within_sweep=knee_inside,
            explanation=explain(batches, choice, prediction, (knee, knee_inside, pred_knee),
                                unit, stopped_at_cap="largest batch size" in stop_reason),
            predicted_knee_batch=pred_knee,
            best_batch_size=choice.best_batch_size,
            best_throughput_per_s=choice.best_throughput_per_s,
            excluded=choice.excluded,
        )
    model = {k: info.get(k) for k in ("target", "parameters", "parameter_bytes", "dtype",
                                      "mode", "unit")}
    return Report(
        model=model,
        hardware=ceilings,
        batches=batches,
        recommendation=recommendation,
        run=run,
        batch_response=batch_response(batches),
        flags=flags,
        partial=partial,
        stop_reason=stop_reason,
    )

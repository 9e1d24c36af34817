"""Read-only accessors over the report dict (what report.json holds), shared by renderers.

Renderers never recompute the analysis: the classifiers did that and wrote it into the dict.
What lives here is lookup (the recommended batch, the ops of one batch size, the limits the
run was given) and small display arithmetic on measured values (a share, a per-row figure).
Every accessor tolerates missing keys, so a partial report or an older one still renders.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from batchscope.profiler.probe import MATMUL_PROBES
from batchscope.reports import fmt

Doc = dict[str, Any]

BOUNDS = ("memory", "compute", "overhead", "uncounted")
BYTE_KINDS = ("weights", "state", "activations", "unsplit")
# Time shares of a batch, in stacking order: the four bounds and the time between ops (CPU)
# or, on a GPU, communication, host<->device copies and the device's idle time.
CPU_SHARES = (*BOUNDS, "framework")
DEVICE_SHARES = (*BOUNDS, "communication", "transfer", "idle")
SHARES = (*BOUNDS, "framework", "communication", "transfer", "idle")
SHARE_LABELS = {
    "memory": "memory-bound",
    "compute": "compute-bound",
    "overhead": "overhead-bound",
    "uncounted": "uncounted (no FLOP formula)",
    "framework": "between ops (Python, dispatch)",
    "communication": "communication (NCCL, not hidden)",
    "transfer": "host-device copies",
    "idle": "GPU idle (waiting on the host)",
}
# Colours, one per bound and one per byte kind, used by every chart and legend in the HTML.
BOUND_COLORS = {
    "memory": "#2563eb",
    "compute": "#dc2626",
    "overhead": "#d97706",
    "uncounted": "#7c8594",
    "framework": "#cbd2dc",
    "communication": "#059669",
    "transfer": "#a16207",
    "idle": "#e2e8f0",
}
BYTE_COLORS = {"weights": "#7c3aed", "state": "#0d9488", "activations": "#94a3b8",
               "unsplit": "#64748b"}
# Op flags that start with this are roofline accounting errors (DESIGN.md, Definitions).
ACCOUNTING_FLAG = "accounting error"


def on_device_time(doc: Doc) -> bool:
    """True when op times are GPU kernel times (a GPU run or a recorded trace)."""
    return any(b.get("time_basis") == "device" for b in doc.get("batches") or [])


def share_keys(doc: Doc) -> tuple[str, ...]:
    """The time shares that apply to this report, in stacking order."""
    return DEVICE_SHARES if on_device_time(doc) else CPU_SHARES


def from_trace(doc: Doc) -> bool:
    """True for a report of recorded profiler traces (``diagnose trace``)."""
    return (doc.get("run") or {}).get("source") == "trace"


def batch_size_known(doc: Doc) -> bool:
    """False for a trace analysed without ``--batch-sizes``."""
    return not from_trace(doc) or bool((doc.get("run") or {}).get("batch_size_known"))


def batch_label(doc: Doc, batch: Doc) -> str:
    """"batch 8", or "the trace's batch (size unknown)"."""
    if not batch_size_known(doc):
        return "the trace's batch (size unknown)"
    return f"batch {batch.get('batch_size')}"


def unit(doc: Doc) -> str:
    """What one batch row yields per step ("token", "image", ...)."""
    return str((doc.get("model") or {}).get("unit") or "sample")


def target(doc: Doc) -> str:
    """The model file the report is about."""
    return str((doc.get("model") or {}).get("target") or "model")


def model_dtype(doc: Doc) -> str:
    """The dtype the model ran in, as a torch name ("float32")."""
    return str((doc.get("model") or {}).get("dtype") or "float32")


def hardware(doc: Doc) -> Doc | None:
    """The ceilings section, or None when ceilings were not measured."""
    hw = doc.get("hardware")
    return hw if isinstance(hw, dict) and hw.get("peak_flops_per_s") else None


def ridge(doc: Doc) -> float | None:
    """Ridge point of the model's dtype in FLOP/byte (falls back to float32)."""
    hw = hardware(doc)
    if hw is None:
        return None
    ridges = hw.get("ridge_flops_per_byte") or {}
    return ridges.get(model_dtype(doc)) or ridges.get("float32")


def options(doc: Doc) -> Doc:
    """The options the run was given (``run.options``)."""
    return (doc.get("run") or {}).get("options") or {}


def latency_limit_s(doc: Doc) -> float | None:
    """The --latency-limit-ms the run was given, in seconds (None: no limit)."""
    return options(doc).get("latency_limit_s")


def memory_budget_bytes(doc: Doc) -> float | None:
    """The --memory-budget the run was given, in bytes (None: no budget)."""
    return options(doc).get("memory_budget_bytes")


def batches(doc: Doc) -> list[Doc]:
    """Every batch size tried, in sweep order."""
    return [b for b in doc.get("batches") or [] if isinstance(b, dict)]


def is_measured(batch: Doc) -> bool:
    """True for a batch size that finished with a throughput."""
    return batch.get("status") == "ok" and bool(batch.get("throughput_per_s"))


def measured(doc: Doc) -> list[Doc]:
    """The batch sizes that were measured, smallest first."""
    return sorted((b for b in batches(doc) if is_measured(b)), key=lambda b: b["batch_size"])


def analysed(doc: Doc) -> list[Doc]:
    """The measured batch sizes; for a trace of unknown batch size (no throughput), the
    batches it analysed."""
    if not from_trace(doc):
        return measured(doc)
    return sorted((b for b in batches(doc) if b.get("status") == "ok" and b.get("latency_s")),
                  key=lambda b: b["batch_size"])


def failed(doc: Doc) -> list[Doc]:
    """The batch sizes that did not finish (OOM, error, timeout...)."""
    return [b for b in batches(doc) if b.get("status") != "ok"]


def recommendation(doc: Doc) -> Doc:
    """The recommendation section ({} when there is none)."""
    return doc.get("recommendation") or {}


def batch_of(doc: Doc, batch_size: int | None) -> Doc | None:
    """The measured batch of that size, or None."""
    for b in measured(doc):
        if b["batch_size"] == batch_size:
            return b
    return None


def recommended(doc: Doc) -> Doc | None:
    """The measured batch the report recommends."""
    return batch_of(doc, recommendation(doc).get("batch_size"))


def latency_median(batch: Doc | None) -> float | None:
    """Median step latency of a batch in seconds, or None."""
    lat = (batch or {}).get("latency_s") or {}
    return lat.get("median")


# What each ``peak_memory_method`` (profiler/memory.py) counts, keyed by how its text
# begins; the first match wins. Older reports' CUDA method said "tensor memory of this batch
# size", which left out the weights and state it includes: the words come from here.
PEAK_MEMORY_LABELS = (
    ("torch.cuda.max_memory_allocated",
     ("peak tensor memory (torch.cuda.max_memory_allocated): weights, state and activations; "
      "excludes the allocator's cached reserve and the CUDA context (~300-500 MB)")),
    ("peak resident set size of the worker process",
     ("peak resident memory of the worker process (VmHWM, reset per batch size): weights, "
      "state and activations, and also the Python interpreter, torch's libraries and memory "
      "the allocator holds on to: what the machine must hold, not the tensors alone")),
    ("lifetime peak resident set size",
     ("lifetime peak resident memory of the worker process (VmHWM or ru_maxrss, not reset "
      "per batch size: the highest since it started): weights, state and activations, and "
      "also the Python interpreter, torch's libraries and memory the allocator holds on to")),
)


def memory_method_label(method: str) -> str:
    """What a ``peak_memory_method`` counts, in words; an unknown method as it is, and
    "peak memory" for none.

    Example:
        >>> label = memory_method_label("torch.cuda.max_memory_allocated")
        >>> "weights" in label and "excludes the allocator's cached reserve" in label
        True
    """
    for start, label in PEAK_MEMORY_LABELS:
        if method.startswith(start):
            return label
    return method or "peak memory"


def peak_memory_label(doc: Doc) -> str:
    """What the report's peak memory counts, in words, from the method its batches name
    (the first batch that names one)."""
    method = next((b["peak_memory_method"] for b in batches(doc)
                   if isinstance(b.get("peak_memory_method"), str) and b["peak_memory_method"]),
                  "")
    return memory_method_label(method)


def step_bytes(batch: Doc) -> float | None:
    """Counted bytes of one step, all kinds together."""
    split = batch.get("bytes")
    return float(sum(split.get(k, 0) for k in BYTE_KINDS)) if split else None


def step_intensity(batch: Doc) -> float | None:
    """FLOP per byte of the whole step (counted FLOPs over counted bytes)."""
    total = step_bytes(batch)
    flops = batch.get("flops")
    return flops / total if flops and total else None


def op_share(op: Doc, batch: Doc) -> float | None:
    """An op's share of the profiled step time."""
    step = batch.get("profiled_step_s")
    return op.get("time_s", 0.0) / step if step else None


def ops_by_time(batch: Doc | None) -> list[Doc]:
    """Ops of one batch, most time first."""
    return sorted((batch or {}).get("ops") or [], key=lambda o: -(o.get("time_s") or 0.0))


def step_efficiency(batch: Doc) -> float | None:
    """Roofline-predicted step time over the profiled step time (1 = the step at its roof)."""
    predicted, profiled = batch.get("predicted_step_s"), batch.get("profiled_step_s")
    if not all(isinstance(x, (int, float)) and x > 0 for x in (predicted, profiled)):
        return None
    return predicted / profiled


@dataclass
class Flag:
    """One thing the reader should know about the measurement."""

    text: str
    batch_size: int | None = None
    op_id: str = ""


def op_place(op: Doc) -> str:
    """Where an op ran: its module path; in a trace (no modules), the longest kernel it
    launched; "" at the top level."""
    kernels = op.get("kernels") or []
    if kernels and not op.get("module"):
        return "kernel " + str(kernels[0].get("name", ""))
    return str(op.get("module") or "")


def op_flags(doc: Doc) -> list[Flag]:
    """Every op's flags, one per op group and batch size, as the report holds them."""
    out = []
    for b in batches(doc):
        for op in b.get("ops") or []:
            for text in op.get("flags") or []:
                out.append(Flag(str(text), b.get("batch_size"), str(op.get("op_id", ""))))
    return out


def _flag_kind(text: str) -> str:
    """What a flag is about: its text up to the first colon ("accounting error")."""
    return text.split(":", 1)[0].strip()


def flags(doc: Doc) -> list[Flag]:
    """Report-level flags first, then op flags grouped by what they say and the op they
    are on, the groups with the most step time at stake first. Hundreds of per-op flags
    (one per op group and batch size) become a few lines that say what matters."""
    out = [Flag(str(f)) for f in doc.get("flags") or []]
    groups: dict[tuple[str, str], list[tuple[Doc, Doc, str]]] = {}
    for b in batches(doc):
        for op in b.get("ops") or []:
            for text in op.get("flags") or []:
                key = (_flag_kind(str(text)), str(op.get("name", "")))
                groups.setdefault(key, []).append((b, op, str(text)))
    ranked = []
    for (kind, name), members in groups.items():
        at_stake = sum(op.get("time_s") or 0.0 for _, op, _ in members)
        sizes = sorted({b.get("batch_size") for b, _, _ in members}, key=lambda x: x or 0)
        worst = max(members, key=lambda m: m[1].get("time_s") or 0.0)
        if len(members) == 1:
            flag = Flag(worst[2], worst[0].get("batch_size"), str(worst[1].get("op_id", "")))
        else:
            where = ", ".join(str(x) for x in sizes[:8]) + (" …" if len(sizes) > 8 else "")
            flag = Flag(f"{kind}, {name}: {len(members)} op groups at batch {where}, "
                        f"{fmt.seconds(at_stake)} of profiled time; the largest (batch "
                        f"{worst[0].get('batch_size')}, {worst[1].get('op_id', '')}): "
                        f"{worst[2].split(':', 1)[-1].strip()}")
        ranked.append((at_stake, flag))
    out += [flag for _, flag in sorted(ranked, key=lambda r: -r[0])]
    return out


def accounting_errors(doc: Doc) -> list[Flag]:
    """Ops measured faster than their roof: the ceilings or the counts are off."""
    return [f for f in op_flags(doc) if f.text.startswith(ACCOUNTING_FLAG)]


def dominant_bound(batch: Doc) -> str | None:
    """The bound (or "framework", "idle", ...) holding the largest share of the step."""
    share = batch.get("time_share")
    if not share:
        return None
    return max(SHARES, key=lambda k: share.get(k) or 0.0)


def prediction(doc: Doc) -> dict[str, Any]:
    """report.json ``prediction`` (the fitted step-time model), {} when absent."""
    pred = doc.get("prediction")
    return pred if isinstance(pred, dict) else {}


def prediction_rows(doc: Doc) -> list[dict[str, Any]]:
    """The model's points, each with ``measured`` True where the batch size was measured."""
    return [{**p, "measured": p.get("measured_latency_s") is not None}
            for p in prediction(doc).get("points") or [] if isinstance(p, dict)]


# How many measured sizes each forecast is fitted on (classifiers/step_model.FIT_WINDOW).
FORECAST_WINDOW_WORD = "three"


def _probed_kinds(probes: dict[str, float]) -> str:
    """What the kernel probes timed, in words, from their keys ("mm[[8,16],[16,4]]")."""
    names = {key.split("[", 1)[0] for key in probes}
    kinds = [kind for kind, hit in (
        ("matmuls", bool(names & MATMUL_PROBES)),
        ("convolutions", "convolution" in names),
        ("per-row ops (batch norm, pooling, ...)", bool(names - MATMUL_PROBES - {"convolution"}))
    ) if hit]
    return " and ".join(kinds) if len(kinds) < 3 else f"{kinds[0]}, {kinds[1]} and {kinds[2]}"


def prediction_summary(doc: Doc) -> str:
    """One sentence: what the model was fitted on, how it held, what it predicts unmeasured."""
    pred = prediction(doc)
    rows = prediction_rows(doc)
    if not pred or not rows:
        return ""
    unit_name = unit(doc)
    forecasts = [r for r in rows if r["measured"] and isinstance(r.get("error"), (int, float))]
    if forecasts:
        errors = [r["error"] for r in forecasts]
        text = (f"Step-time model, each size forecast from the {FORECAST_WINDOW_WORD} measured "
                f"before it: off by "
                + (f"{errors[0]:+.0%} at batch {forecasts[0]['batch_size']}" if len(errors) == 1
                   else f"{min(errors):+.0%} to {max(errors):+.0%} at batches "
                        f"{forecasts[0]['batch_size']}-{forecasts[-1]['batch_size']}"))
    else:
        fitted = ", ".join(str(b) for b in pred.get("fitted_on") or [])
        text = (f"Step-time model fitted on batches {fitted} (too few sizes to forecast one "
                f"from those before it)")
    knee = pred.get("knee_batch")
    if isinstance(knee, (int, float)):
        text += f"; its curve bends at {knee:,.3g} rows"
    probes = pred.get("probes_s") or {}
    if probes:
        text += (f"; its {_probed_kinds(probes)} were timed alone at their own shapes "
                 f"({len(probes)} kernel probes) where the kernel changes with the rows")
    unmeasured = [r for r in rows if not r["measured"]]
    if unmeasured:
        fitted = ", ".join(str(b) for b in pred.get("fitted_on") or [])
        text += f"; not measured, predicted from batches {fitted}: " + ", ".join(
            f"batch {r['batch_size']} {fmt.rate(r.get('predicted_throughput_per_s'), unit_name)}"
            for r in unmeasured[:6])
        if len(unmeasured) > 6:
            text += f" (and {len(unmeasured) - 6} more)"
    sensitivity = pred.get("ceiling_sensitivity")
    if isinstance(sensitivity, (int, float)) and abs(sensitivity) >= 0.01:
        text += (f"; with each compute roof at its median repeat instead of its best, the "
                 f"largest batch's predicted step moves {sensitivity:+.0%}")
    return text + "."


def counts_note(doc: Doc) -> str:
    """Which batch sizes' FLOPs and bytes were carried from two counted ones, or ""."""
    carried = [(b["batch_size"], b.get("counts_extrapolated_from") or []) for b in batches(doc)]
    carried = [(b, src) for b, src in carried if len(src) == 2]
    if not carried:
        return ""
    sizes = ", ".join(str(b) for b, _ in carried)
    sources = sorted({tuple(src) for _, src in carried})
    froms = "; ".join(f"batches {a} and {b}" for a, b in sources)
    return (f"FLOPs and bytes at batch{'es' if len(carried) > 1 else ''} {sizes} were "
            f"carried op by op from the counts at {froms} (linear in the batch: checked "
            f"exact on a third counted size), not counted again.")


def sequence_grid(doc: Doc) -> dict[str, Any]:
    """report.json ``sequence_grid`` (batch size × sequence length), {} when absent."""
    grid = doc.get("sequence_grid")
    return grid if isinstance(grid, dict) else {}


def sequence_table(doc: Doc) -> tuple[list[int], list[dict[str, Any]]]:
    """The grid as a table: the batch sizes (columns) and one row per sequence length,
    ``cells`` by batch size (units/s, or the status of a point that failed) and the batch
    predicted to fill the memory there."""
    grid = sequence_grid(doc)
    points = [p for p in grid.get("points") or [] if isinstance(p, dict)]
    sizes = sorted({p["batch_size"] for p in points})
    rows = []
    for length in grid.get("seq_lens") or []:
        cells: dict[int, str] = {}
        for p in points:
            if p["seq_len"] == length:
                cells[p["batch_size"]] = (fmt.si(p["throughput_per_s"], digits=3)
                                          if p.get("throughput_per_s") else p["status"])
        row = next((r for r in grid.get("lengths") or [] if r.get("seq_len") == length), {})
        limit = (row.get("memory_limit") or {}).get("batch_size")
        rows.append({"seq_len": length, "cells": cells,
                     "limit": f"{limit:,}" if isinstance(limit, int) else fmt.MISSING})
    return sizes, rows

"""report.html: one self-contained page, rendered with jinja2 from the report dict.

The page opens offline and makes no network request: plotly.js (from the ``plotly``
package's bundled ``plotly.min.js``) and the page script are inlined once, the figures and
the report travel as JSON in ``<script type="application/json">`` blocks, and a Content
Security Policy allows only those two scripts (by hash) and no connection at all.

Example:
    >>> from batchscope.reports.json_report import load_report
    >>> html = render_html(load_report("batchscope-report/report.json"))  # doctest: +SKIP
"""

from __future__ import annotations

import base64
import hashlib
from functools import cache, lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2

from batchscope.reports import chart_style as st
from batchscope.reports import fmt, narrative, roofline_chart, sweep_charts
from batchscope.reports import view as v
from batchscope.reports.escape import json_for_script, truncate_text
from batchscope.reports.view import Doc

HERE = Path(__file__).resolve().parent
TEMPLATE = "report.html.j2"
# (id, title, builder) of every chart, in page order; the template lays them out by id.
CHARTS = (
    ("roofline", "Roofline", roofline_chart.roofline),
    ("throughput", "Throughput", sweep_charts.throughput),
    ("latency", "Step latency", sweep_charts.latency),
    ("memory", "Peak memory", sweep_charts.memory),
    ("time_share", "Time share by bound", sweep_charts.time_share),
    ("bytes", "Bytes per step", sweep_charts.bytes_per_step),
    ("batch_response", "Batch response of the ops that matter most", sweep_charts.batch_response),
    ("sequence_grid", "Batch size × sequence length", sweep_charts.sequence_grid),
)
# Longest error text shown per failed batch size in the page.
MAX_ERROR_CHARS = 1200


@lru_cache(maxsize=1)
def plotly_js() -> str:
    """The plotly.js bundle shipped inside the ``plotly`` Python package."""
    text = resources.files("plotly").joinpath("package_data/plotly.min.js").read_text("utf-8")
    if "</script" in text.lower():  # would end the inline <script> early
        raise RuntimeError("plotly.min.js contains '</script' and cannot be inlined")
    return text


@cache
def _static(name: str) -> str:
    return (HERE / "static" / name).read_text("utf-8")


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """The jinja2 environment of every page (report.html, serving.html): autoescaped."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(HERE / "templates")),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def page_csp(page_js: str) -> str:
    """The Content Security Policy of a page that inlines ``page_js`` and plotly.js: those two
    scripts, inline styles, no connection at all."""
    return (f"default-src 'none'; script-src {csp_hash(page_js)} {csp_hash(plotly_js())}; "
            "style-src 'unsafe-inline'; img-src data: blob:; font-src data:; "
            "connect-src 'none'; base-uri 'none'; form-action 'none'")


def csp_hash(script: str) -> str:
    """The CSP source that allows exactly this inline script."""
    digest = hashlib.sha256(script.encode("utf-8")).digest()
    return "'sha256-" + base64.b64encode(digest).decode("ascii") + "'"


def figures(doc: Doc) -> dict[str, st.Figure]:
    """Every chart the report has data for, by id."""
    out = {}
    for key, _, build in CHARTS:
        fig = build(doc)
        if fig is not None:
            out[key] = fig
    return out


def _cards(doc: Doc) -> list[dict[str, str]]:
    rec, batch = v.recommendation(doc), v.recommended(doc)
    unit = v.unit(doc)
    cards = []
    if batch:
        lat = batch.get("latency_s") or {}
        cards.append({"label": f"throughput at batch {batch['batch_size']}",
                      "value": fmt.si(batch.get("throughput_per_s")), "unit": f"{unit}s/s",
                      "sub": f"best measured: {fmt.rate(rec.get('best_throughput_per_s'), unit)}"
                             f" at batch {rec.get('best_batch_size')}"})
        cards.append({"label": "speedup from batching",
                      "value": fmt.ratio(rec.get("speedup_from_batching")),
                      "sub": f"best throughput over batch {rec.get('speedup_baseline_batch')}"})
        cards.append({"label": f"step latency at batch {batch['batch_size']}",
                      "value": fmt.seconds(lat.get("median")),
                      "sub": f"p25–p75 {fmt.seconds(lat.get('p25'))} – "
                             f"{fmt.seconds(lat.get('p75'))}"})
    if rec:
        predicted = fmt.number(rec.get("predicted_critical_batch"))
        knee = rec.get("measured_knee_batch")
        where = "" if knee is None else (" (in the sweep)" if rec.get("measured_knee_within_sweep")
                                         else " (beyond the sweep)")
        cards.append({"label": "critical batch B*, predicted", "value": predicted,
                      "sub": f"knee measured: {fmt.number(knee)}{where}"})
    return cards


def _start_bar(doc: Doc) -> dict[str, Any] | None:
    """The time share at the smallest measured batch, as segments of a bar."""
    measured = [b for b in v.analysed(doc) if b.get("time_share")]
    if not measured:
        return None
    b0 = measured[0]
    segments = [{"key": key, "label": v.SHARE_LABELS[key], "color": v.BOUND_COLORS[key],
                 "share": b0["time_share"].get(key) or 0.0,
                 "pct": fmt.pct(b0["time_share"].get(key) or 0.0)} for key in v.share_keys(doc)]
    return {"batch_size": b0["batch_size"], "label": v.batch_label(doc, b0), "segments": segments}


def _rank_tables(doc: Doc) -> list[dict[str, Any]]:
    """Per batch size of a multi-rank trace analysis: one row per rank, the slowest marked."""
    tables = []
    for size, rows in ((doc.get("run") or {}).get("ranks") or {}).items():
        if not isinstance(rows, list) or not rows:
            continue
        tables.append({"batch": size if v.batch_size_known(doc) else "", "rows": [{
            "rank": r.get("rank"), "trace": str(r.get("trace", "")), "slowest": bool(r.get("slowest")),
            "step": fmt.seconds(r.get("step_s")), "busy": fmt.seconds(r.get("device_busy_s")),
            "communication": fmt.pct(r.get("communication_share")),
            "idle": fmt.pct(r.get("idle_share"))} for r in rows]})
    return tables


def _data_parallel(doc: Doc) -> dict[str, Any] | None:
    """A data-parallel sweep's tables: per batch size, then every rank at every size."""
    dp = doc.get("distributed") or {}
    if not dp.get("batches"):
        return None
    unit = v.unit(doc)
    rows = [{"batch": r.get("batch_size"), "global": r.get("global_batch"),
             "rate": fmt.rate(r.get("global_throughput_per_s"), unit),
             "exposed": fmt.seconds(r.get("communication_exposed_s")),
             "share": fmt.pct(r.get("communication_share")),
             "slowest": r.get("slowest_rank"), "lag": fmt.seconds(r.get("straggler_lag_s"))}
            for r in dp["batches"] if isinstance(r, dict)]
    ranks = [{"batch": b.get("batch_size"), "rows": [{
        "rank": r.get("rank"), "host": r.get("host") or "", "status": r.get("status"),
        "step": fmt.seconds(r.get("latency_s")), "no_sync": fmt.seconds(r.get("no_sync_latency_s")),
        "memory": fmt.nbytes(r.get("peak_memory_bytes")), "error": r.get("error") or ""}
        for r in b.get("ranks") or [] if isinstance(r, dict)]}
        for b in doc.get("batches") or [] if isinstance(b, dict) and b.get("ranks")]
    return {"world": dp.get("world_size"), "rows": rows, "ranks": ranks}


def _op_rows(doc: Doc) -> list[dict[str, Any]]:
    rows = []
    for batch in v.analysed(doc):
        for op in v.ops_by_time(batch):
            split = op.get("bytes") or {}
            share = v.op_share(op, batch)
            rows.append({
                "batch": batch["batch_size"], "op_id": op.get("op_id", ""),
                "name": op.get("name", ""), "module": truncate_text(v.op_place(op), 120),
                "shapes": truncate_text(fmt.shapes(op.get("input_shapes")), 160),
                "dtype": op.get("dtype") or "", "calls": op.get("calls", 0),
                "time_s": op.get("time_s") or 0.0, "time": fmt.seconds(op.get("time_s")),
                "share": share or 0.0, "share_text": fmt.pct(share, 1),
                "flops": op.get("flops"), "flops_text": fmt.si(op.get("flops")),
                **{k: split.get(k, 0) for k in v.BYTE_KINDS},
                **{k + "_text": fmt.nbytes(split.get(k, 0)) for k in v.BYTE_KINDS},
                "intensity": op.get("intensity"), "intensity_text": fmt.number(op.get("intensity")),
                "bound": op.get("bound", "uncounted"),
                "efficiency": op.get("efficiency"),
                "efficiency_text": fmt.pct(op.get("efficiency")),
                "flags": "; ".join(str(f) for f in op.get("flags") or []),
            })
    return rows


def _prediction_rows(doc: Doc) -> list[dict[str, Any]]:
    """The step-time model's table: each measured size forecast from the ones before it,
    and the unmeasured ones predicted."""
    return [{"batch": r.get("batch_size"),
             "source": ", ".join(str(b) for b in r.get("predicted_from") or []),
             "measured": fmt.seconds(r.get("measured_latency_s")) if r["measured"] else "not measured",
             "predicted": fmt.seconds(r.get("predicted_latency_s")),
             "error": f"{r['error']:+.0%}" if isinstance(r.get("error"), (int, float)) else "–",
             "rate": fmt.si(r.get("predicted_throughput_per_s"))} for r in v.prediction_rows(doc)]


def _kept_cells(doc: Doc) -> dict[int, str]:
    """Per re-timed batch size: its median step and page faults with the buffers kept."""
    cells = {}
    for r in (doc.get("allocator") or {}).get("batches") or []:
        if not isinstance(r, dict) or not isinstance(r.get("batch_size"), int):
            continue
        if r.get("status") != "ok":
            cells[r["batch_size"]] = str(r.get("status", "?"))
            continue
        faults = r.get("kept_page_faults_per_step")
        cells[r["batch_size"]] = (f"{fmt.seconds(r.get('kept_latency_s'))} · {faults:,.0f} faults"
                                  if isinstance(faults, (int, float))
                                  else fmt.seconds(r.get("kept_latency_s")))
    return cells


def _timing_rows(doc: Doc) -> list[dict[str, Any]]:
    rows = []
    kept = _kept_cells(doc)
    for b in v.batches(doc):
        lat = b.get("latency_s") or {}
        med = lat.get("median")
        iqr = (lat["p75"] - lat["p25"]) / med if med and "p75" in lat and "p25" in lat else None
        rows.append({
            "batch": b.get("batch_size"), "status": b.get("status", "?"), "n": lat.get("n"),
            "block": lat.get("block_steps") or 1, "median": fmt.seconds(med), "p25": fmt.seconds(lat.get("p25")),
            "p75": fmt.seconds(lat.get("p75")), "min": fmt.seconds(lat.get("min")),
            "max": fmt.seconds(lat.get("max")), "iqr": fmt.pct(iqr, 1),
            "faults": (f"{b['page_faults_per_step']:,.0f}"
                       if isinstance(b.get("page_faults_per_step"), (int, float)) else "–"),
            "kept": kept.get(b.get("batch_size"), "–"),
            "profiled": fmt.seconds(b.get("profiled_step_s")),
            "coverage": fmt.pct(b.get("coverage")), "wall": fmt.seconds(b.get("wall_s")),
            "error": truncate_text(str(b.get("error") or ""), MAX_ERROR_CHARS),
        })
    return rows


def _bandwidth_paths(copy: Doc) -> str:
    """The copy and in-place figures beside each other, and which one is the ceiling."""
    paths = copy.get("paths")
    if not isinstance(paths, dict) or not paths:
        return ""
    figures = ", ".join(f"{name.replace('_', '-')} {fmt.si(value, 'B/s')}"
                        for name, value in paths.items() if isinstance(value, (int, float)))
    best = str(copy.get("peak_path", "")).replace("_", "-")
    return f"; {figures}: the ceiling is the {best}'s"


def _ceiling_rows(doc: Doc) -> list[dict[str, str]]:
    hw = v.hardware(doc)
    if hw is None:
        return []
    details = hw.get("details") or {}
    matmul = details.get("matmul") or {}
    rows = []
    for dtype, peak in hw["peak_flops_per_s"].items():
        d = matmul.get(dtype) or {}
        how = (f"best of {len(d.get('sizes') or [])} square matmul sizes, peak at n = "
               f"{d.get('peak_size', '?')}" if d else
               "datasheet figure, not measured" if hw.get("source") == "datasheet" else "measured")
        paths = {k: f.get("peak_flops_per_s") for k, f in (d.get("paths") or {}).items()}
        if paths:
            how = (f"the best of the paths models take: torch.mm "
                   f"{fmt.si(d.get('peak_flops_per_s'), 'FLOP/s')} ({how}), "
                   + ", ".join(f"{'F.linear' if k == 'linear' else '3x3 conv2d'} "
                               f"{fmt.si(val, 'FLOP/s')}" for k, val in paths.items())
                   + f"; the peak is {d.get('peak_path', 'mm')}'s")
        spread = [s.get("spread") for s in d.get("sizes") or [] if s.get("spread") is not None]
        rows.append({"name": f"peak {dtype} matmul", "value": fmt.si(peak, "FLOP/s"),
                     "how": how + (f"; spread {fmt.pct(max(spread), 1)}" if spread else "")})
        ridge = (hw.get("ridge_flops_per_byte") or {}).get(dtype)
        rows.append({"name": f"ridge point {dtype}", "value": f"{fmt.number(ridge)} FLOP/byte",
                     "how": "computed: peak / bandwidth"})
    copy = details.get("copy") or {}
    rows.append({"name": "memory bandwidth",
                 "value": fmt.si(hw.get("bandwidth_bytes_per_s"), "B/s"),
                 "how": (f"streaming copy of {fmt.nbytes(copy.get('buffer_bytes'))}, bytes read + "
                         f"written, best of {copy.get('repeats', '?')}; spread "
                         f"{fmt.pct(copy.get('spread'), 1)}" + _bandwidth_paths(copy))
                 if copy else "measured"})
    add = (details.get("overhead") or {}).get("add") or {}
    rows.append({"name": "fixed cost of one small op", "value": fmt.seconds(hw.get("overhead_s")),
                 "how": (f"median of {add.get('repeats', '?')} chunks of "
                         f"{add.get('calls_per_chunk', '?')} one-element adds; spread "
                         f"{fmt.pct(add.get('spread'), 1)}") if add else "measured"})
    return rows


def context(doc: Doc) -> dict[str, Any]:
    """Everything the template needs; every string in it is escaped by jinja2."""
    figs = figures(doc)
    rec = v.recommendation(doc)
    unplaced, unplaced_share, unplaced_batch = roofline_chart.unplaced(doc)
    model = doc.get("model") or {}
    page_js = _static("report.js")
    sequence_sizes, sequence_rows = v.sequence_table(doc)
    return {
        "doc": doc, "model": model, "run": doc.get("run") or {}, "hw": v.hardware(doc),
        "target": v.target(doc), "unit": v.unit(doc), "rec": rec, "rec_batch": v.recommended(doc),
        "cards": _cards(doc), "start_bar": _start_bar(doc),
        "trace_headline": narrative.trace_headline(doc), "size_known": v.batch_size_known(doc),
        "rank_tables": _rank_tables(doc), "allocator": narrative.allocator_headline(doc),
        "predicted_pick": narrative.predicted_pick_headline(doc),
        "kept_column": bool(_kept_cells(doc)),
        "data_parallel": _data_parallel(doc), "dp_headline": (narrative.data_parallel_headline(doc)
                        or narrative.accumulation_headline(doc)),
        "sections": narrative.sections(doc), "charts": {k: t for k, t, _ in CHARTS if k in figs},
        "bounds": [{"key": k, "label": v.SHARE_LABELS[k], "color": v.BOUND_COLORS[k]}
                   for k in v.share_keys(doc)],
        "byte_kinds": [{"key": k, "color": v.BYTE_COLORS[k]} for k in v.BYTE_KINDS],
        "unplaced": unplaced, "unplaced_share": fmt.pct(unplaced_share),
        "unplaced_batch": unplaced_batch,
        "op_rows": _op_rows(doc), "batch_sizes": [b["batch_size"] for b in v.analysed(doc)],
        "timing_rows": _timing_rows(doc),
        "sequence_sizes": sequence_sizes, "sequence_rows": sequence_rows,
        "prediction_rows": _prediction_rows(doc),
        "prediction_summary": v.prediction_summary(doc), "counts_note": v.counts_note(doc),
        "prediction_assumptions": v.prediction(doc).get("assumptions") or [], "ceiling_rows": _ceiling_rows(doc),
        "flags": v.flags(doc), "accounting_errors": len(v.accounting_errors(doc)),
        "failed": v.failed(doc), "fmt": fmt, "parameters": model.get("parameters"),
        "peak_memory_label": v.peak_memory_label(doc),
        "figures_json": json_for_script(figs), "report_json": json_for_script(doc),
        "css": _static("report.css"), "page_js": page_js, "plotly_js": plotly_js(),
        "csp": page_csp(page_js),
    }


def render_html(doc: Doc) -> str:
    """report.html for one report dict (what report.json holds)."""
    return environment().get_template(TEMPLATE).render(**context(doc))

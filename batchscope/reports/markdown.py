"""summary.md: the report as a pull-request comment that renders on GitHub.

The recommendation and its reason first, then throughput against batch size (a table and a
mermaid ``xychart-beta``), the explanation, the top ops and the flags. Every piece of user
text is escaped for Markdown (:mod:`batchscope.reports.escape`), and the whole comment stays
under :data:`MAX_CHARS` (GitHub refuses comments over 65,536 characters): optional blocks are
dropped, longest lists first, until it fits.

Example:
    >>> from batchscope.reports.json_report import load_report
    >>> text = render_summary(load_report("batchscope-report/report.json"))  # doctest: +SKIP
"""

from __future__ import annotations

from batchscope.reports import fmt, narrative
from batchscope.reports import view as v
from batchscope.reports.escape import md_cell, md_text, mermaid_label
from batchscope.reports.view import Doc

MAX_CHARS = 60_000
TOP_OPS = 10
MAX_FLAGS = 30
# Rows of the batch table; a sweep longer than this keeps its first and last rows.
MAX_BATCH_ROWS = 40
ERROR_CELL_CHARS = 100
# Column heads of the time shares, in v.SHARES order.
SHARE_HEADS = {"memory": "memory", "compute": "compute", "overhead": "overhead",
               "uncounted": "uncounted", "framework": "between ops",
               "communication": "communication", "transfer": "copies", "idle": "GPU idle"}


def md_table(header: list[str], rows: list[list[str]], align: str = "") -> str:
    """A GFM table; cells must already be escaped. ``align`` is one of "l"/"r" per column."""
    marks = ["---:" if a == "r" else "---" for a in (align or "l" * len(header))]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(marks) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _headline(doc: Doc) -> str:
    rec, batch, unit = v.recommendation(doc), v.recommended(doc), v.unit(doc)
    lines = [f"### batchscope · {md_text(v.target(doc), 200)}", ""]
    headline = narrative.trace_headline(doc) if batch is None else None
    if headline is not None:
        lines.append(f"**Trace analysis.** {md_text(headline, 400)}")
    elif batch is None:
        why = md_text(doc.get("stop_reason") or "no batch size finished", 300)
        lines.append(f"**No batch size could be measured** ({why}).")
    else:
        lat = v.latency_median(batch)
        lines += [f"**Recommended batch size: {batch['batch_size']}**: "
                  f"{md_text(fmt.rate(batch.get('throughput_per_s'), unit))} at "
                  f"{fmt.seconds(lat)} per step; batching lifts throughput "
                  f"{fmt.ratio(rec.get('speedup_from_batching'))} over batch "
                  f"{rec.get('speedup_baseline_batch')}.",
                  "", f"Rule: {md_text(rec.get('rule') or '', 400)}."]
    parallel = narrative.data_parallel_headline(doc) or narrative.accumulation_headline(doc)
    if parallel:
        lines += ["", md_text(parallel, 600)]
    allocator = narrative.allocator_headline(doc)
    if allocator:
        lines += ["", f"> **{md_text(allocator, 600)}**"]
    predicted_pick = narrative.predicted_pick_headline(doc)
    if predicted_pick:
        lines += ["", f"> **{md_text(predicted_pick, 600)}**"]
    if doc.get("partial"):
        lines += ["", "> Partial report: the sweep did not finish; what was measured is shown."]
    return "\n".join(lines)


def _facts(doc: Doc) -> str:
    rec, hw = v.recommendation(doc), v.hardware(doc)
    predicted = fmt.number(rec.get("predicted_critical_batch"))
    crossing = ("never" if rec.get("predicted_compute_bound_infinite")
                else fmt.number(rec.get("predicted_compute_bound_batch")))
    knee = rec.get("measured_knee_batch")
    where = "" if knee is None else (" (in the sweep)" if rec.get("measured_knee_within_sweep")
                                     else " (beyond the sweep)")
    rows = [["critical batch B*, predicted", predicted],
            ["knee of the throughput curve, measured", fmt.number(knee) + where],
            ["layers turn compute-bound from batch", crossing]]
    if v.from_trace(doc):
        rows = [r for r in rows if r[1] != fmt.MISSING]
    if hw:
        dtype = v.model_dtype(doc)
        peak = (hw.get("peak_flops_per_s") or {}).get(dtype)
        where = ("datasheet figures, not measured" if hw.get("source") == "datasheet"
                 else f"{hw.get('device')}, {hw.get('threads', '?')} threads")
        rows.append(["machine", md_cell(f"{hw.get('name')} ({where})")])
        rows.append(["ceilings", md_cell(f"{fmt.si(peak, 'FLOP/s')} {dtype}, "
                                         f"{fmt.si(hw.get('bandwidth_bytes_per_s'), 'B/s')}, "
                                         f"ridge {fmt.number(v.ridge(doc))} FLOP/byte, "
                                         f"one small op {fmt.seconds(hw.get('overhead_s'))}")])
    return md_table(["", ""], [[md_cell(a), b if b else " "] for a, b in rows])


def _chart(doc: Doc) -> str:
    ok = v.measured(doc)
    if len(ok) < 2:
        return ""
    unit = mermaid_label(v.unit(doc) + "s/s")
    xs = ", ".join(str(b["batch_size"]) for b in ok)
    ys = ", ".join(f"{b['throughput_per_s']:.6g}" for b in ok)
    return "\n".join(["```mermaid", "xychart-beta", f'    title "{unit} against batch size"',
                      f'    x-axis "batch size" [{xs}]', f'    y-axis "{unit}"',
                      f"    bar [{ys}]", f"    line [{ys}]", "```"])


def _batch_rows(doc: Doc) -> str:
    unit, rec = v.unit(doc), v.recommendation(doc)
    batches = v.batches(doc)
    if len(batches) > MAX_BATCH_ROWS:
        half = MAX_BATCH_ROWS // 2
        batches = batches[:half] + batches[-half:]
    first = v.measured(doc)[0] if v.measured(doc) else None
    rows = []
    for b in batches:
        lat = b.get("latency_s") or {}
        share = b.get("time_share") or {}
        size = b.get("batch_size")
        mark = f"**{size}** ★" if size == rec.get("batch_size") else str(size)
        if not v.batch_size_known(doc):
            mark = "?"
        status = md_cell(b.get("status", "?"))
        if b.get("error"):
            status += ": " + md_cell(b["error"], ERROR_CELL_CHARS)
        gain = (b["throughput_per_s"] / first["throughput_per_s"]
                if first and v.is_measured(b) else None)
        rows.append([
            mark, status, fmt.seconds(lat.get("median")),
            (f"{fmt.seconds(lat.get('p25'))} – {fmt.seconds(lat.get('p75'))}" if lat
             else fmt.MISSING),
            fmt.si(b.get("throughput_per_s")), fmt.ratio(gain),
            fmt.nbytes(b.get("peak_memory_bytes")),
            " / ".join(fmt.pct(share.get(k)) for k in v.share_keys(doc)) if share else fmt.MISSING,
        ])
    header = ["batch", "status", "step (median)", "p25 – p75", md_cell(f"{unit}s/s"),
              f"× batch {first['batch_size'] if first else 1}", "peak memory",
              " / ".join(SHARE_HEADS[k] for k in v.share_keys(doc))]
    table = md_table(header, rows, "rlrrrrrr")
    carried = v.counts_note(doc)
    if carried:
        table += "\n\n" + carried
    if not any(b.get("peak_memory_method") for b in v.batches(doc)):
        return table  # no peak memory measured (a recorded trace): nothing to label
    memory = f"The peak memory column is the {md_text(v.peak_memory_label(doc), 400)}."
    return table + "\n\n" + memory


def _explanation(doc: Doc) -> str:
    """The explanation's sections (the text report.json holds), titles in bold."""
    body = []
    for s in narrative.sections(doc):
        body.append(f"**{md_text(s.title)}**")
        body += [md_text(p, 2000) for p in s.paragraphs]
    return "\n\n".join(["#### The explanation", *body]) if body else ""


def _top_ops(doc: Doc) -> str:
    batch = v.recommended(doc)
    if batch is None and v.analysed(doc):
        batch = v.analysed(doc)[0]
    ops = v.ops_by_time(batch)[:TOP_OPS]
    if not batch or not ops:
        return ""
    rows = [[md_cell(op.get("name", "")), md_cell(v.op_place(op) or "(top level)", 60),
             md_cell(fmt.shapes(op.get("input_shapes")), 80), str(op.get("calls", 0)),
             fmt.seconds(op.get("time_s")), fmt.pct(v.op_share(op, batch), 1),
             fmt.number(op.get("intensity")), md_cell(op.get("bound", "")),
             fmt.pct(op.get("efficiency"))] for op in ops]
    header = ["op", "kernel" if v.from_trace(doc) else "module", "shapes", "calls", "time / step", "share", "FLOP/byte", "bound",
              "of roof"]
    return (f"#### Top ops at {v.batch_label(doc, batch)}\n\n"
            + md_table(header, rows, "lllrrrrlr"))


def _estimates(doc: Doc) -> str:
    """watch's labelled estimates of larger batch sizes (never measurements)."""
    rows = [e for e in doc.get("estimates") or [] if isinstance(e, dict)]
    if not rows:
        return ""
    unit = v.unit(doc)
    table = md_table(["batch", "step (estimated)", md_cell(f"{unit}s/s (estimated)")],
                     [[str(e.get("batch_size")), fmt.seconds(e.get("latency_s")),
                       fmt.si(e.get("throughput_per_s"))] for e in rows], "rrr")
    method = md_text(str(rows[0].get("method") or ""), 600)
    return ("#### Larger batch sizes, estimated (not measured)\n\n" + table
            + (f"\n\n{method}" if method else ""))


def _prediction(doc: Doc) -> str:
    """The step-time model: each measured size forecast from the ones before it, and the
    unmeasured ones predicted."""
    rows = v.prediction_rows(doc)
    if not rows:
        return ""
    unit = v.unit(doc)
    table = md_table(
        ["batch", "measured step", "predicted step", "error", md_cell(f"predicted {unit}s/s"),
         "from batches"],
        [[str(r.get("batch_size")),
          fmt.seconds(r.get("measured_latency_s")) if r["measured"] else "not measured",
          fmt.seconds(r.get("predicted_latency_s")),
          f"{r['error']:+.0%}" if isinstance(r.get("error"), (int, float)) else "–",
          fmt.si(r.get("predicted_throughput_per_s")),
          ", ".join(str(b) for b in r.get("predicted_from") or [])] for r in rows], "rrrrrl")
    notes = [md_text(v.prediction_summary(doc), 600)]
    notes += [f"Assumed: {md_text(a, 200)}." for a in v.prediction(doc).get("assumptions") or []]
    return "#### Predicted against measured\n\n" + table + "\n\n" + " ".join(notes)


def _sequence_grid(doc: Doc) -> str:
    """Batch size × sequence length: units/s at each point, and the batch predicted to
    fill the memory at each length."""
    sizes, rows = v.sequence_table(doc)
    if not rows:
        return ""
    unit = v.unit(doc)
    table = md_table(
        ["tokens a row", *[f"batch {b}" for b in sizes], "fits to batch (predicted)"],
        [[str(r["seq_len"]), *[md_cell(r["cells"].get(b, "–")) for b in sizes], r["limit"]]
         for r in rows], "r" * (len(sizes) + 2))
    return (f"#### Batch size × sequence length ({md_cell(unit)}s/s)\n\n" + table)


def _ranks(doc: Doc) -> str:
    """Per rank of one step (several traces of different ranks), the slowest marked."""
    blocks = []
    for size, rows in ((doc.get("run") or {}).get("ranks") or {}).items():
        if not isinstance(rows, list) or not rows:
            continue
        table = [[f"**{r.get('rank')}** (slowest)" if r.get("slowest") else str(r.get("rank")),
                  md_cell(str(r.get("trace", "")), 60), fmt.seconds(r.get("step_s")),
                  fmt.seconds(r.get("device_busy_s")), fmt.pct(r.get("communication_share")),
                  fmt.pct(r.get("idle_share"))] for r in rows]
        head = (f"#### Ranks at batch {md_text(size)}" if v.batch_size_known(doc)
                else "#### Ranks")
        blocks.append(head + "\n\n" + md_table(
            ["rank", "trace", "step", "GPU busy", "communication", "GPU idle"], table, "llrrrr"))
    return "\n\n".join(blocks)


def _flags(doc: Doc) -> str:
    flags = v.flags(doc)
    if not flags:
        return ""
    items = []
    for f in flags[:MAX_FLAGS]:
        where = ("" if f.batch_size is None
                 else f"batch {f.batch_size} · {md_text(f.op_id, 80)}: ")
        items.append(f"- {where}{md_text(f.text, 400)}")
    if len(flags) > MAX_FLAGS:
        items.append(f"- … and {len(flags) - MAX_FLAGS} more (all are in report.json)")
    return (f"<details>\n<summary>Flags ({len(flags)})</summary>\n\n" + "\n".join(items)
            + "\n\n</details>")


def _footer(doc: Doc) -> str:
    run = doc.get("run") or {}
    versions = [f"{name} {md_text(run[key])}" for name, key in
                (("batchscope", "tool_version"), ("torch", "torch_version")) if run.get(key)]
    return "<sub>" + " · ".join([*versions, "the full report is report.html"]) + "</sub>"


def render_summary(doc: Doc, max_chars: int = MAX_CHARS) -> str:
    """summary.md for one report dict, at most ``max_chars`` characters."""
    required = [_headline(doc), _facts(doc), _batch_rows(doc) if v.batches(doc) else "",
                _ranks(doc), _estimates(doc)]
    optional = [("chart", _chart(doc)), ("prediction", _prediction(doc)),
                ("sequence", _sequence_grid(doc)),
                ("explanation", _explanation(doc)),
                ("ops", _top_ops(doc)), ("flags", _flags(doc))]
    footer = _footer(doc)
    while True:
        blocks = required[:1] + [b for k, b in optional if k == "chart"] + required[1:] + [
            b for k, b in optional if k != "chart"] + [footer]
        text = "\n\n".join(b for b in blocks if b) + "\n"
        if len(text) <= max_chars or not optional:
            break
        optional.remove(max(optional, key=lambda kb: len(kb[1])))  # drop the longest first
    if len(text) > max_chars:
        cut = "\n\n… (cut to fit a comment; see report.html)\n"
        text = text[: max_chars - len(cut)].rsplit("\n", 1)[0] + cut
    return text

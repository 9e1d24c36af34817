"""summary.md: the report as a pull-request comment that renders on GitHub.

The recommendation and its reason first, then throughput against batch size (a table and a
mermaid ``xychart-beta``), the explanation, the top ops and the flags. Every piece of user
text is escaped for Markdown (:mod:`batchscope.reports.escape`), and the whole comment stays
under :data:`MAX_CHARS` (GitHub refuses comments over 65,536 characters): optional blocks are
dropped, longest lists first, until it fits.

Example:
    >>> from batchscope.reports import load_report, render_summary  # any report's kind
    >>> text = render_summary(load_report("batchscope-report/report.json"))  # doctest: +SKIP
"""

from __future__ import annotations

from batchscope.op_families import PATH_WORDS
from batchscope.records import BatchResult, PeakMemoryMethod, Report, Status
from batchscope.reports import fmt, narrative
from batchscope.reports import view as v
from batchscope.reports.escape import md_cell, md_text, mermaid_label
from batchscope.reports.flag_text import (
    assumption_text,
    estimate_text,
    evidence_headline,
    rule_text,
    stop_text,
)

MAX_CHARS = 60_000
TOP_OPS = 10
MAX_FLAGS = 30
# Rows of the batch table; a sweep longer than this keeps its first and last rows.
MAX_BATCH_ROWS = 40
# Why a batch size failed is said in full under the table, as the terminal says it (a cell
# cut it to 100 characters, and the clause that names the cause is often the end). Its
# first line, the exception, is bounded where it is caught (tracebacks.MAX_ERROR_CHARS,
# 2000, and the cut's note); a longer line is cut here all the same.
ERROR_LINE_CHARS = 2100
# The user's traceback frames shown under it, the innermost kept: a runaway recursion holds
# a thousand.
ERROR_FRAMES = 20
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


def _headline(report: Report) -> str:
    rec, batch, unit = v.recommendation(report), v.recommended(report), v.unit(report)
    grade = f" · evidence: {report.evidence.grade.value}" if report.evidence else ""
    lines = [f"### batchscope · {md_text(v.target(report), 200)}{grade}", ""]
    evidence = evidence_headline(report.evidence)
    if evidence:
        lines += [f"**{md_text(evidence[0].upper() + evidence[1:], 600)}.**", ""]
    headline = narrative.trace_headline(report) if batch is None else None
    if headline is not None:
        lines.append(f"**Trace analysis.** {md_text(headline, 400)}")
    elif batch is None or rec is None:
        why = md_text(stop_text(report.stop, unit) or "no batch size finished", 300)
        lines.append(f"**No batch size could be measured** ({why}).")
    else:
        speedup = narrative.speedup_text(rec)
        lines += [f"**Recommended batch size: {batch.batch_size}**: "
                  f"{md_text(v.throughput_text(batch) + f' {unit}s/s')} at "
                  f"{v.latency_text(batch)} per step"
                  + (f"; {md_text(speedup[0].lower() + speedup[1:], 400)}." if speedup else "."),
                  "", f"Rule: {md_text(rule_text(rec.rule, unit), 400)}."]
        equivalent = narrative.equivalence_text(rec)
        if equivalent:
            lines += ["", md_text(equivalent, 400)]
    parallel = (narrative.data_parallel_headline(report)
                or narrative.accumulation_headline(report))
    if parallel:
        lines += ["", md_text(parallel, 600)]
    allocator = narrative.allocator_headline(report)
    if allocator:
        lines += ["", f"> **{md_text(allocator, 600)}**"]
    predicted_pick = narrative.predicted_pick_headline(report)
    if predicted_pick:
        lines += ["", f"> **{md_text(predicted_pick, 600)}**"]
    uncounted = narrative.uncounted_headline(report)
    if uncounted:
        lines += ["", f"> **{md_text(uncounted, 800)}**"]
    if report.partial:
        lines += ["", "> Partial report: the sweep did not finish; what was measured is shown."]
    return "\n".join(lines)


def _facts(report: Report) -> str:
    rec, hw = v.recommendation(report), v.hardware(report)
    predicted = fmt.number(rec.predicted_critical_batch if rec else None)
    crossing = ("never" if rec and rec.predicted_compute_bound_infinite
                else fmt.number(rec.predicted_compute_bound_batch if rec else None))
    knee = rec.measured_knee_batch if rec else None
    where = "" if rec is None or knee is None else (
        " (in the sweep)" if rec.measured_knee_within_sweep else " (beyond the sweep)")
    if rec is not None:
        predicted = fmt.number_band(rec.predicted_critical_batch,
                                    rec.predicted_critical_batch_interval)
    knee_text = fmt.number_band(knee, rec.measured_knee_interval if rec else None)
    # B*'s band is a range (B* under the roofs' best and median repeats), not a 95% interval
    rows = [[f"critical batch B*, predicted ({narrative.BSTAR_RANGE_WORDS})", predicted],
            ["knee of the throughput curve, measured (95%)", knee_text + where],
            ["layers turn compute-bound from batch", crossing]]
    if v.from_trace(report):
        rows = [r for r in rows if r[1] != fmt.MISSING]
    # What the run computed in: under --amp, the weights' dtype and autocast's, never one
    # alone (the ceilings below are autocast's, the dtype the matmuls ran in).
    rows.append(["dtype", md_cell(v.dtype_label(report))])
    if hw:
        dtype = report.model.compute_dtype
        peak = hw.peak_flops_per_s.get(dtype)
        where = ("datasheet figures, not measured" if hw.source == "datasheet"
                 else f"{hw.device}, {hw.threads} threads")
        rows.append(["machine", md_cell(f"{hw.name} ({where})")])
        compute = f"{fmt.si(peak, 'FLOP/s')} {dtype}"
        ridge = f"{v.ridge_dtype(report)} peak ridge {fmt.number(v.ridge(report))} FLOP/byte"
        matmul = hw.family_peaks.get("matmul", {}).get(dtype)
        if matmul is not None and peak:  # the roof a matmul is placed against, then the peak
            via = PATH_WORDS.get(matmul.path, matmul.path)
            compute = (f"{dtype} matmul roof {fmt.si(matmul.flops_per_s, 'FLOP/s')} ({via}), "
                       f"peak {fmt.si(peak, 'FLOP/s')}")
            ridge = (f"matmul ridge {fmt.number(matmul.flops_per_s / hw.bandwidth_bytes_per_s)}"
                     " FLOP/byte")
        rows.append(["ceilings", md_cell(f"{compute}, {fmt.si(hw.bandwidth_bytes_per_s, 'B/s')}, "
                                         f"{ridge}, one small op {fmt.seconds(hw.overhead_s)}")])
    return md_table(["", ""], [[md_cell(a), b if b else " "] for a, b in rows])


def _chart(report: Report) -> str:
    ok = v.measured(report)
    if len(ok) < 2:
        return ""
    unit = mermaid_label(v.unit(report) + "s/s")
    xs = ", ".join(str(b.batch_size) for b in ok)
    ys = ", ".join(f"{b.throughput_per_s or 0.0:.6g}" for b in ok)
    return "\n".join(["```mermaid", "xychart-beta", f'    title "{unit} against batch size"',
                      f'    x-axis "batch size" [{xs}]', f'    y-axis "{unit}"',
                      f"    bar [{ys}]", f"    line [{ys}]", "```"])


def _batch_rows(report: Report) -> str:
    unit, rec = v.unit(report), v.recommendation(report)
    batches = report.batches
    if len(batches) > MAX_BATCH_ROWS:
        half = MAX_BATCH_ROWS // 2
        batches = batches[:half] + batches[-half:]
    measured = v.measured(report)
    first = measured[0] if measured else None
    keys = v.share_keys(report)
    rows = []
    for b in batches:
        lat, share, size = b.latency_s, b.time_share, b.batch_size
        mark = f"**{size}** ★" if rec is not None and size == rec.batch_size else str(size)
        if not v.batch_size_known(report):
            mark = "?"
        status = md_cell(b.status.value)
        gain, gain_band = v.gain_over(b, first)
        rows.append([
            mark, status, v.latency_text(b) if lat is not None else fmt.MISSING,
            (f"{fmt.seconds(lat.p25)} – {fmt.seconds(lat.p75)}" if lat is not None
             else fmt.MISSING),
            v.throughput_text(b), fmt.ratio_band(gain, gain_band),
            fmt.nbytes(b.peak_memory_bytes),
            (" / ".join(fmt.pct(v.share_of(share, k)) for k in keys) if share is not None
             else fmt.MISSING),
        ])
    # The batch every gain is against; a trace of unknown batch size has none to name.
    base = v.size_label(report, first.batch_size if first is not None else 1)
    header = ["batch", "status", "step (median, 95%)", "p25 – p75", md_cell(f"{unit}s/s (95%)"),
              f"× batch {base}", "peak memory", " / ".join(SHARE_HEADS[k] for k in keys)]
    table = md_table(header, rows, "rlrrrrrr")
    failures = _failures(report, batches)
    if failures:
        table += "\n\n" + failures
    carried = v.counts_note(report)
    if carried:
        table += "\n\n" + carried
    if v.peak_memory_method(report) == PeakMemoryMethod.NONE:
        return table  # no peak memory measured (a recorded trace): nothing to label
    memory = f"The peak memory column is the {md_text(v.peak_memory_label(report), 400)}."
    return table + "\n\n" + memory


def _frames(lines: list[str]) -> list[str]:
    """The user's traceback (``traceback.format_list``: a "File ..., line N, in f" line, then
    its source line) as one line a frame: "File "m.py", line 12, in run: return model(x)"."""
    frames: list[str] = []
    for line in (line.strip() for line in lines):
        if not line:
            continue
        if line.startswith("File ") or not frames:
            frames.append(line)
        else:
            frames[-1] += f": {line}"
    return frames


def _failures(report: Report, batches: list[BatchResult]) -> str:
    """Why each batch size of the table failed, in full: the error on the line of its batch
    size, the user's frames under it, innermost last (each line escaped like every other
    piece of user text: a code block would keep a mention or a tag raw in the file)."""
    items = []
    for b in batches:
        why = v.failure_text(b) if b.status != Status.OK else ""
        if not why:
            continue
        first, *rest = why.splitlines()
        items.append(f"- batch {md_text(v.size_label(report, b.batch_size))} "
                     f"({md_text(b.status.value)}): {md_text(first, ERROR_LINE_CHARS)}")
        frames = _frames(rest)
        if len(frames) > ERROR_FRAMES:
            left = len(frames) - ERROR_FRAMES
            items.append(f"  - … {left} outer frames left out")
            frames = frames[-ERROR_FRAMES:]
        items += [f"  - {md_text(frame, ERROR_LINE_CHARS)}" for frame in frames]
    return "\n".join(items)


def _explanation(report: Report) -> str:
    """The explanation's sections (the text report.json holds), titles in bold."""
    body = []
    for s in narrative.sections(report):
        body.append(f"**{md_text(s.title)}**")
        body += [md_text(p, 2000) for p in s.paragraphs]
    return "\n\n".join(["#### The explanation", *body]) if body else ""


def _top_ops(report: Report) -> str:
    batch = v.recommended(report)
    analysed = v.analysed(report)
    if batch is None and analysed:
        batch = analysed[0]
    ops = v.ops_by_time(batch)[:TOP_OPS]
    if batch is None or not ops:
        return ""
    rows = [[md_cell(op.name), md_cell(v.op_place(op) or "(top level)", 60),
             md_cell(fmt.shapes(op.input_shapes), 80), str(op.calls),
             fmt.seconds(op.time_s), fmt.pct(v.op_share(op, batch), 1),
             fmt.number(op.intensity), md_cell(op.bound.value),
             fmt.pct(op.efficiency)] for op in ops]
    header = ["op", "kernel" if v.from_trace(report) else "module", "shapes", "calls",
              "time / step", "share", "FLOP/byte", "bound", "of roof"]
    return (f"#### Top ops at {v.batch_label(report, batch)}\n\n"
            + md_table(header, rows, "lllrrrrlr"))


def _estimates(report: Report) -> str:
    """watch's labelled estimates of larger batch sizes (never measurements)."""
    rows = report.estimates
    if not rows:
        return ""
    unit = v.unit(report)
    table = md_table(["batch", "step (estimated)", md_cell(f"{unit}s/s (estimated)")],
                     [[str(e.batch_size), fmt.seconds(e.latency_s),
                       fmt.si(e.throughput_per_s)] for e in rows], "rrr")
    method = md_text(estimate_text(rows[0].method), 600)
    hole = narrative.uncounted_text(report)
    if hole is not None:  # their time is grown with the rows: no roof knows their work
        method += " " + md_text(f"Not estimated from their work: {hole}, grown with the "
                                "rows.", 600)
    return "#### Larger batch sizes, estimated (not measured)\n\n" + table + f"\n\n{method}"


def _prediction(report: Report) -> str:
    """The step-time model: each measured size forecast from the ones before it, and the
    unmeasured ones predicted."""
    rows = v.prediction_rows(report)
    pred = report.prediction
    if not rows or pred is None:
        return ""
    unit = v.unit(report)
    table = md_table(
        ["batch", "measured step", "predicted step", "error", md_cell(f"predicted {unit}s/s"),
         "from batches"],
        [[str(p.batch_size),
          fmt.seconds(p.measured_latency_s) if was_measured else "not measured",
          fmt.seconds(p.predicted_latency_s),
          f"{p.error:+.0%}" if p.error is not None else "–",
          fmt.si(p.predicted_throughput_per_s),
          ", ".join(str(b) for b in p.predicted_from)] for p, was_measured in rows], "rrrrrl")
    notes = [md_text(v.prediction_summary(report), 600)]
    notes += [f"Assumed: {md_text(assumption_text(a), 200)}." for a in pred.assumptions]
    return "#### Predicted against measured\n\n" + table + "\n\n" + " ".join(notes)


def _sequence_grid(report: Report) -> str:
    """Batch size × sequence length: units/s at each point, and the batch predicted to
    fill the memory at each length."""
    sizes, rows = v.sequence_table(report)
    if not rows:
        return ""
    unit = v.unit(report)
    table = md_table(
        ["tokens a row", *[f"batch {b}" for b in sizes], "fits to batch (predicted)"],
        [[str(r.seq_len), *[md_cell(r.cells.get(b, "–")) for b in sizes], r.limit]
         for r in rows], "r" * (len(sizes) + 2))
    return (f"#### Batch size × sequence length ({md_cell(unit)}s/s)\n\n" + table)


def _ranks(report: Report) -> str:
    """Per rank of one step (several traces of different ranks), the slowest marked."""
    blocks = []
    for size, rows in report.run.ranks.items():
        if not rows:
            continue
        table = [[f"**{r.rank}** (slowest)" if r.slowest else str(r.rank),
                  md_cell(r.trace, 60), fmt.seconds(r.step_s),
                  fmt.seconds(r.device_busy_s), fmt.pct(r.communication_share),
                  fmt.pct(r.idle_share)] for r in rows]
        head = (f"#### Ranks at batch {md_text(size)}" if v.batch_size_known(report)
                else "#### Ranks")
        blocks.append(head + "\n\n" + md_table(
            ["rank", "trace", "step", "GPU busy", "communication", "GPU idle"], table, "llrrrr"))
    return "\n\n".join(blocks)


def _counters(report: Report) -> str:
    """Nsight Compute's counters in a few lines (--ncu, or a trace with --ncu)."""
    from batchscope.reports import counters_render

    if report.counters is None:
        return ""
    lines = ["**Measured counters (Nsight Compute).** "
             + md_text(counters_render.headline(report.counters), 600)]
    joined = counters_render.ops_text(report.counters)
    if joined:
        lines += ["", md_text(joined, 800)]
    return "\n".join(lines)


def _flags(report: Report) -> str:
    shown = v.flags(report)
    if not shown:
        return ""
    # view.flags lists the report's own flags first (their sentences name their batch
    # size), then the op flags: an op flag shown alone says where it is.
    run_wide = len(report.flags)
    items = []
    for i, f in enumerate(shown[:MAX_FLAGS]):
        where = ("" if i < run_wide or f.batch_size is None
                 else f"batch {f.batch_size} · {md_text(f.op_id, 80)}: ")
        items.append(f"- {where}{md_text(f.text, 400)}")
    if len(shown) > MAX_FLAGS:
        items.append(f"- … and {len(shown) - MAX_FLAGS} more (all are in report.json)")
    return (f"<details>\n<summary>Flags ({len(shown)})</summary>\n\n" + "\n".join(items)
            + "\n\n</details>")


def _footer(report: Report) -> str:
    run = report.run
    versions = [f"{name} {md_text(version)}" for name, version in
                (("batchscope", run.tool_version), ("torch", run.torch_version)) if version]
    return "<sub>" + " · ".join([*versions, "the full report is report.html"]) + "</sub>"


def render_summary(report: Report, max_chars: int = MAX_CHARS) -> str:
    """summary.md for one report, at most ``max_chars`` characters.

    Example:
        >>> from batchscope.reports.json_report import load_report
        >>> text = render_summary(load_report("report.json"))  # doctest: +SKIP
        >>> text.startswith("### batchscope")  # doctest: +SKIP
        True
    """
    required = [_headline(report), _facts(report),
                _batch_rows(report) if report.batches else "", _ranks(report),
                _estimates(report)]
    optional = [("chart", _chart(report)), ("prediction", _prediction(report)),
                ("sequence", _sequence_grid(report)),
                ("explanation", _explanation(report)),
                ("ops", _top_ops(report)), ("counters", _counters(report)),
                ("flags", _flags(report))]
    footer = _footer(report)
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

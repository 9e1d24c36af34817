"""A :class:`~batchscope.reports.compare.Comparison` (and an A/B run's
:class:`~batchscope.records.ab.ABComparison`) as Markdown (a PR comment) and as a terminal
table. User text is escaped for each: Markdown by :mod:`batchscope.reports.escape`, the
terminal by rich's markup escape.
"""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from batchscope.records.ab import ABComparison
from batchscope.records.work import WorkChange, WorkDelta, WorkMeasure
from batchscope.reports import fmt
from batchscope.reports.compare import (
    MAX_CLASS_CHANGES,
    MEASURE_WORDS,
    BatchDelta,
    Comparison,
    verdict_label,
    work_change_pct,
    work_value,
)
from batchscope.reports.escape import md_cell, md_text
from batchscope.reports.markdown import MAX_CHARS, md_table

# A change in throughput smaller than this is shown as "same" in the terminal colours.
STEADY_SHARE = 0.02
# Rows of the work table at most (the gate's always among them).
MAX_WORK_ROWS = 20


def _work_measures(deltas: list[WorkDelta]) -> list[WorkMeasure]:
    """The measures any row counted, in WorkMeasure's order."""
    seen = {c.measure for d in deltas for c in d.changes}
    return [m for m in WorkMeasure if m in seen]


def _work_cell(change: WorkChange | None) -> str:
    if change is None:
        return fmt.MISSING
    if change.base == change.head:
        return f"{work_value(change.measure, change.head)} (same)"
    return (f"{work_value(change.measure, change.base)} → "
            f"{work_value(change.measure, change.head)} ({work_change_pct(change)})")


def _work_rows(deltas: list[WorkDelta], gate: int) -> list[WorkDelta]:
    """The rows to show: every one that moved, else the gate's alone; at most MAX_WORK_ROWS
    (the gate's first among those cut)."""
    moved = [d for d in deltas if not d.same]
    rows = moved or [d for d in deltas if d.batch_size == gate] or deltas[:1]
    if len(rows) > MAX_WORK_ROWS:
        gate_rows = [d for d in rows if d.batch_size == gate]
        rows = gate_rows + [d for d in rows if d.batch_size != gate][:MAX_WORK_ROWS - 1]
        rows.sort(key=lambda d: d.batch_size)
    return rows


def work_markdown(deltas: list[WorkDelta], gate: int) -> list[str]:
    """The work per step as Markdown lines: a table of the batch sizes that moved (the
    gate's alone when none did), one column per counted measure."""
    if not deltas:
        return ["No batch size was counted on both sides (a timing-only run): the work was "
                "not compared."]
    measures = _work_measures(deltas)
    shown = _work_rows(deltas, gate)
    lines = []
    if all(d.same for d in deltas):
        sizes = ", ".join(str(d.batch_size) for d in deltas)
        lines += [f"The counted work per step is the same at every batch size both counted "
                  f"({sizes}).", ""]
    rows = []
    for d in shown:
        by = {c.measure: c for c in d.changes}
        mark = f"**{d.batch_size}**" if d.batch_size == gate else str(d.batch_size)
        rows.append([mark] + [_work_cell(by.get(m)) for m in measures])  # numbers only
    lines.append(md_table(["batch"] + [MEASURE_WORDS[m] for m in measures], rows,
                          "r" + "r" * len(measures)))
    if len(shown) < len([d for d in deltas if not d.same]):
        lines += ["", f"… and {len([d for d in deltas if not d.same]) - len(shown)} more."]
    return lines


def print_work(console: Console, deltas: list[WorkDelta], gate: int) -> None:
    """The work per step as a rich table (the rows :func:`work_markdown` shows)."""
    if not deltas:
        return
    measures = _work_measures(deltas)
    table = Table(title="work per step (counted)", title_justify="left")
    table.add_column("batch", justify="right")
    for m in measures:
        table.add_column(escape(MEASURE_WORDS[m]), justify="right")
    for d in _work_rows(deltas, gate):
        by = {c.measure: c for c in d.changes}
        cells = []
        for m in measures:
            c = by.get(m)
            style = ("red" if c is not None and c.more else
                     "green" if c is not None and c.less else "default")
            cells.append(f"[{style}]{escape(_work_cell(c))}[/]")
        batch = f"[bold]{d.batch_size}[/] *" if d.batch_size == gate else str(d.batch_size)
        table.add_row(batch, *cells)
    console.print(table)


def _change_cells(row: BatchDelta) -> tuple[str, str]:
    return fmt.signed_pct(row.throughput_change), fmt.signed_pct(row.latency_change)


def _status(row: BatchDelta) -> str:
    if row.base_status == row.head_status:
        return row.base_status
    return f"{row.base_status} → {row.head_status}"


def _icon(regression: bool, inconclusive: bool) -> str:
    return "❌" if regression else "⚠️" if inconclusive else "✅"


def _style(regression: bool, inconclusive: bool) -> str:
    return "bold red" if regression else "bold yellow" if inconclusive else "bold green"


def render_markdown(c: Comparison, max_chars: int = MAX_CHARS) -> str:
    """The comparison as GitHub-flavoured Markdown, at most ``max_chars`` characters."""
    icon, what = _icon(c.regression, c.inconclusive), verdict_label(c.regression, c.inconclusive)
    unit = md_cell(f"{c.unit}s/s")
    lines = [f"### {icon} batchscope compare: {what}",
             "", f"**{md_text(c.verdict[0].upper() + c.verdict[1:], 600)}.**", ""]
    if c.base_target != c.head_target:
        lines += [f"Base: {md_text(c.base_target, 200)} · head: {md_text(c.head_target, 200)}", ""]
    rows = []
    for r in c.rows:
        thr, lat = _change_cells(r)
        mark = f"**{r.batch_size}**" if r.batch_size == c.base_recommended else str(r.batch_size)
        rows.append([mark, md_cell(_status(r)), fmt.si(r.base_throughput),
                     fmt.si(r.head_throughput), thr, fmt.seconds(r.base_latency_s),
                     fmt.seconds(r.head_latency_s), lat])
    lines.append(md_table(["batch", "status", f"base {unit}", f"head {unit}", "change",
                         "base step", "head step", "change"], rows, "rlrrrrrr"))
    lines += ["", f"Recommended batch size: base **{c.base_recommended}**, head "
                  f"**{c.head_recommended if c.head_recommended is not None else 'none'}**."]
    if c.head_rule and c.head_rule != c.base_rule:
        lines += ["", f"Head rule: {md_text(c.head_rule, 400)}."]
    if c.class_changes:
        shown = c.class_changes[:MAX_CLASS_CHANGES]
        lines += ["", f"#### Ops that changed class ({len(c.class_changes)})", "",
                  md_table(["batch", "op", "module", "base", "head"],
                         [[str(x.batch_size), md_cell(x.name),
                           md_cell(x.module or "(top level)", 60),
                           md_cell(x.base_bound), md_cell(x.head_bound)] for x in shown], "rllll")]
        if len(c.class_changes) > len(shown):
            lines += ["", f"… and {len(c.class_changes) - len(shown)} more."]
    else:
        lines += ["", "No op changed class."]
    lines += ["", "#### Work per step (counted: no noise)", ""]
    lines += work_markdown(c.work, c.base_recommended)
    return _comment(lines, c.warnings, max_chars)


def _comment(lines: list[str], warnings: list[str], max_chars: int) -> str:
    """The Markdown lines with the warnings after them, cut to ``max_chars`` (a comment)."""
    if warnings:
        lines = [*lines, "", "#### Read with care", ""] + [f"- {md_text(w, 400)}"
                                                          for w in warnings]
    text = "\n".join(lines) + "\n"
    if len(text) > max_chars:
        cut = "\n\n… (cut to fit a comment)\n"
        text = text[: max_chars - len(cut)].rsplit("\n", 1)[0] + cut
    return text


def _colour(change: float | None, higher_is_better: bool) -> str:
    if change is None:
        return "dim"
    if abs(change) < STEADY_SHARE:
        return "default"
    return "green" if (change > 0) == higher_is_better else "red"


def print_comparison(console: Console, c: Comparison) -> None:
    """The comparison as a rich table and a verdict line on ``console``."""
    table = Table(title=escape(f"{c.base_target} → {c.head_target}"), title_justify="left")
    for col in ("batch", "status", f"base {c.unit}s/s", f"head {c.unit}s/s", "change",
                "base step", "head step", "change"):
        table.add_column(escape(col), justify="left" if col == "status" else "right")
    for r in c.rows:
        thr, lat = _change_cells(r)
        gate = r.batch_size == c.base_recommended
        batch = f"[bold]{r.batch_size}[/] *" if gate else str(r.batch_size)
        table.add_row(batch, escape(_status(r)), fmt.si(r.base_throughput),
                      fmt.si(r.head_throughput),
                      f"[{_colour(r.throughput_change, True)}]{thr}[/]",
                      fmt.seconds(r.base_latency_s), fmt.seconds(r.head_latency_s),
                      f"[{_colour(r.latency_change, False)}]{lat}[/]")
    console.print(table)
    console.print(escape(f"* the base's recommended batch size; head recommends "
                         f"{c.head_recommended if c.head_recommended is not None else 'none'}"))
    for x in c.class_changes[:MAX_CLASS_CHANGES]:
        console.print(escape(f"  batch {x.batch_size}: {x.name} ({x.module or 'top level'}) "
                             f"{x.base_bound} → {x.head_bound}"))
    print_work(console, c.work, c.base_recommended)
    for w in c.warnings:
        console.print(f"[yellow]warning:[/] {escape(w)}")
    console.print(f"[{_style(c.regression, c.inconclusive)}]{escape(c.verdict)}[/]")


def render_ab_markdown(c: ABComparison, max_chars: int = MAX_CHARS) -> str:
    """An A/B run's verdict as GitHub-flavoured Markdown (``ab.md``)."""
    m = c.measurement
    icon, what = _icon(c.regression, c.inconclusive), verdict_label(c.regression, c.inconclusive)
    lines = [f"### {icon} batchscope compare --ab: {what}", "",
             f"**{md_text(c.verdict[0].upper() + c.verdict[1:], 900)}.**", "",
             f"Base: {md_text(m.base.path, 200)} · head: {md_text(m.head.path, 200)} · "
             f"batch {m.batch_size} · {len(m.pairs)} pairs of {fmt.seconds(m.block_s)} blocks, "
             f"order drawn with seed {m.seed}", ""]
    if c.ratio is not None and c.ratio_interval is not None:
        lines.append(md_table(
            ["", "median", "95% low", "95% high"],
            [["step time, head / base", f"{c.ratio:.3f}×", f"{c.ratio_interval.low:.3f}×",
              f"{c.ratio_interval.high:.3f}×"],
             ["throughput change", fmt.signed_pct(c.throughput_change),
              fmt.signed_pct(1 / c.ratio_interval.high - 1),
              fmt.signed_pct(1 / c.ratio_interval.low - 1)]], "lrrr"))
        lines.append("")
    lines += ["#### Work per step (counted: no noise)", ""]
    lines += work_markdown([c.work] if c.work is not None else [], m.batch_size)
    if m.pairs:
        shown = m.pairs[:40]
        lines += ["", "#### Pairs", "", md_table(
            ["pair", "first", "base step", "head step", "head / base"],
            [[str(p.index + 1), "head" if p.head_first else "base",
              fmt.seconds(p.base_latency_s), fmt.seconds(p.head_latency_s),
              f"{p.ratio:.3f}×"] for p in shown], "rlrrr")]
        if len(m.pairs) > len(shown):
            lines += ["", f"… and {len(m.pairs) - len(shown)} more (ab.json has them all)."]
    return _comment(lines, c.warnings, max_chars)


def print_ab(console: Console, c: ABComparison) -> None:
    """An A/B run's verdict on ``console``: the ratio, the work, the warnings."""
    m = c.measurement
    console.print(escape(f"{m.base.path} → {m.head.path}: batch {m.batch_size}, "
                         f"{len(m.pairs)} interleaved pairs of {fmt.seconds(m.block_s)} blocks"))
    if c.ratio is not None and c.ratio_interval is not None:
        console.print(escape(f"step time head / base: {c.ratio:.3f}× (95% "
                             f"{c.ratio_interval.low:.3f}×–{c.ratio_interval.high:.3f}×), "
                             f"throughput {fmt.signed_pct(c.throughput_change)}"))
    if c.work is not None:
        print_work(console, [c.work], m.batch_size)
    for w in c.warnings:
        console.print(f"[yellow]warning:[/] {escape(w)}")
    console.print(f"[{_style(c.regression, c.inconclusive)}]{escape(c.verdict)}[/]")

"""A :class:`~batchscope.reports.compare.Comparison` as Markdown (a PR comment) and as a
terminal table. User text is escaped for each: Markdown by :mod:`batchscope.reports.escape`,
the terminal by rich's markup escape.
"""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from batchscope.reports import fmt
from batchscope.reports.compare import MAX_CLASS_CHANGES, BatchDelta, Comparison
from batchscope.reports.escape import md_cell, md_text
from batchscope.reports.markdown import MAX_CHARS, md_table

# A change in throughput smaller than this is shown as "same" in the terminal colours.
STEADY_SHARE = 0.02


def _change_cells(row: BatchDelta) -> tuple[str, str]:
    return fmt.signed_pct(row.throughput_change), fmt.signed_pct(row.latency_change)


def _status(row: BatchDelta) -> str:
    if row.base_status == row.head_status:
        return row.base_status
    return f"{row.base_status} → {row.head_status}"


def render_markdown(c: Comparison, max_chars: int = MAX_CHARS) -> str:
    """The comparison as GitHub-flavoured Markdown, at most ``max_chars`` characters."""
    icon = "❌" if c.regression else "⚠️" if c.inconclusive else "✅"
    what = "regression" if c.regression else "inconclusive" if c.inconclusive else "no regression"
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
    if c.warnings:
        lines += ["", "#### Read with care", ""] + [f"- {md_text(w, 400)}" for w in c.warnings]
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
    for w in c.warnings:
        console.print(f"[yellow]warning:[/] {escape(w)}")
    style = "bold red" if c.regression else "bold yellow" if c.inconclusive else "bold green"
    console.print(f"[{style}]{escape(c.verdict)}[/]")

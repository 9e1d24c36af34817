from __future__ import annotations

import json

import pytest
from markdown_it import MarkdownIt

from batchscope.reports.escape import (
    ELLIPSIS,
    chart_text,
    json_for_script,
    md_cell,
    md_text,
    mermaid_label,
    truncate_text,
)

HOSTILE = "<script>alert(1)</script> | [x](y) ![i](http://e.com/i.png) @someone #12 `c` *e* $m$"


def render(markdown: str) -> str:
    """GitHub-like rendering: CommonMark with GFM tables and raw HTML passed through."""
    return MarkdownIt("commonmark", {"html": True}).enable("table").render(markdown)


def test_md_text_is_inert_text() -> None:
    html = render(md_text(HOSTILE))
    assert "<script" not in html and "<a " not in html and "<img" not in html
    assert "<code>" not in html and "<em>" not in html
    # The reader still sees the characters, not escapes (ZWSP entities render as nothing).
    assert "&lt;script&gt;alert(1)&lt;/script&gt; | [x](y)" in html
    assert "@\u200bsomeone" in html and "#\u200b12" in html


@pytest.mark.parametrize("start", ["- item", "+ item", "1. item", "3) item", "# heading",
                                   "> quote", "=== ", "    code"])
def test_md_text_cannot_open_a_block(start: str) -> None:
    html = render(md_text(start))
    assert html.startswith("<p>"), html


def test_md_cell_keeps_the_table_shape() -> None:
    row = "| " + " | ".join([md_cell("a | b"), md_cell(HOSTILE), md_cell("")]) + " |"
    html = render("| x | y | z |\n| --- | --- | --- |\n" + row)
    assert html.count("<td>") + html.count("<td ") == 3
    assert "<a " not in html and "<script" not in html


def test_links_mentions_and_refs_are_broken_up() -> None:
    out = md_text("see https://evil.example and www.evil.example, ping @someone, fixes #12")
    assert "https://" not in out and "www." not in out
    assert "@someone" not in out and "#12" not in out


def test_long_text_is_cut_before_escaping() -> None:
    out = md_text("<" * 5000, limit=50)
    assert out.endswith(ELLIPSIS) and out.count("&lt;") == 49  # 49 characters + the ellipsis
    assert truncate_text("abc", 3) == "abc" and truncate_text("abcd", 3) == "ab" + ELLIPSIS


def test_chart_text_escapes_plotly_markup() -> None:
    assert chart_text('<a href="x">y</a>') == "&lt;a href=&quot;x&quot;&gt;y&lt;/a&gt;"


def test_mermaid_label_keeps_a_safe_alphabet() -> None:
    assert mermaid_label('tokens"]\n%%{init}%%/s') == "tokensinit/s"


def test_json_for_script_cannot_close_its_block() -> None:
    data = {"t": "</script><!-- <script>alert(1)</script> & \u2028"}
    text = json_for_script(data)
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text) == data


def test_json_for_script_refuses_nan() -> None:
    with pytest.raises(ValueError):
        json_for_script({"x": float("nan")})

"""Making user-controlled text inert in every output format.

Model file names, module paths, exception texts and units come from the user's code. In a
report they must read as the text they are, never act as markup:

* Markdown (a PR comment on GitHub): no table cell may be split by a pipe, no link, image,
  autolink or raw HTML may form, no ``@mention`` may ping anyone, no ``#123`` may cross-link.
* HTML: jinja2 autoescapes the page; JSON embedded in ``<script type="application/json">``
  must not be able to close its block (:func:`json_for_script`).
* Plotly: trace names, hover text and annotations are parsed as a small HTML subset that
  includes ``<a href>``, so strings handed to a chart are HTML-escaped (:func:`chart_text`).
* Mermaid: only a fixed alphabet goes into a chart definition (:func:`mermaid_label`).
"""

from __future__ import annotations

import html
import json
import re
from typing import Any

# Long user text (an exception with a 10 kB repr, a module path of a generated model) is cut
# to this many characters in running text, and shorter in table cells.
MAX_TEXT_CHARS = 600
MAX_CELL_CHARS = 120
ELLIPSIS = "…"

# A zero-width space, written as an HTML entity: GitHub renders it as nothing, but it
# breaks the token that the mention, issue-reference and autolink filters look for. The
# same device renovate and dependabot use in their PR bodies.
ZWSP_ENTITY = "&#8203;"

# ASCII punctuation that opens Markdown syntax anywhere in a line (emphasis, code, links and
# images, table cells, strikethrough, math), backslash-escaped. ``&``, ``<`` and ``>`` become
# entities instead (raw HTML); ``@``, ``#``, ``://`` and ``www.`` get ZWSP_ENTITY (mentions,
# issue references, autolinks); what only counts at the start of a line (lists, headings,
# quotes, setext underlines) is escaped there alone, to keep the source readable.
_MD_PUNCTUATION = re.compile(r"([\\`*_{}\[\]|~$])")
_LINE_START = re.compile(r"^(\s*)([-+=#]|\d+(?=[.)]))")
# Tokens GitHub turns into pings or links: ``@user``, ``#123``, ``scheme://``, ``www.``.
# A ZWSP_ENTITY goes after the first character.
_LINKING = re.compile(r"@(?=[A-Za-z0-9_\-])|#(?=[0-9A-Za-z])|:(?=//)|(?i:\bwww)(?=\.)")
_WHITESPACE = re.compile(r"\s+")
_MERMAID_SAFE = re.compile(r"[^A-Za-z0-9 .,/_\-]")  # no quotes, brackets or %% (directives)


def truncate_text(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """Cut ``text`` to at most ``limit`` characters, ending in an ellipsis when cut."""
    if len(text) <= limit:
        return text
    return text[: max(limit - 1, 0)] + ELLIPSIS


def one_line(text: str) -> str:
    """Collapse every run of whitespace (newlines included) into one space."""
    return _WHITESPACE.sub(" ", text).strip()


def _escape_start(match: re.Match[str]) -> str:
    lead, token = match.group(1), match.group(2)
    if token[0].isdigit():  # "1." / "1)" would start an ordered list: escape what follows
        return lead + token + "\\"
    return lead + "\\" + token


def md_text(text: object, limit: int = MAX_TEXT_CHARS) -> str:
    """User text as inert Markdown inline content (GitHub-flavoured).

    Cuts first, then escapes, so an entity or escape is never cut in half.

    Example:
        >>> print(md_text("[x](y) @someone | <b>"))
        \\[x\\](y) @&#8203;someone \\| &lt;b&gt;
    """
    out = _MD_PUNCTUATION.sub(r"\\\1", truncate_text(one_line(str(text)), limit))
    out = _LINE_START.sub(_escape_start, out)
    out = out.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _LINKING.sub(lambda m: m.group(0) + ZWSP_ENTITY, out)


def md_cell(text: object, limit: int = MAX_CELL_CHARS) -> str:
    """User text for one GFM table cell: inert, one line, pipes escaped, never empty."""
    out = md_text(text, limit)
    return out if out else " "


def chart_text(text: object, limit: int = MAX_TEXT_CHARS) -> str:
    """User text for a Plotly label or hover line (Plotly reads a subset of HTML)."""
    return html.escape(truncate_text(str(text), limit), quote=True)


def mermaid_label(text: object, limit: int = 40) -> str:
    """A label for a mermaid chart: a fixed safe alphabet, no quotes, no brackets."""
    return truncate_text(_MERMAID_SAFE.sub("", str(text)).strip(), limit) or "value"


def json_for_script(data: Any) -> str:
    """JSON that can sit inside ``<script type="application/json">`` and not escape it.

    ``<``, ``>`` and ``&`` become ``\\u003c``, ``\\u003e`` and ``\\u0026`` (so neither
    ``</script>`` nor ``<!--`` can appear), and so do the line separators U+2028/U+2029.
    ``JSON.parse`` reads the same values back. NaN and Infinity raise, as in report.json.
    """
    text = json.dumps(data, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )

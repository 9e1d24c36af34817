"""The shell every HTML page of batchscope shares (report.html, the Nsight Compute and
--target-gpu pages, serving.html): the jinja2 environment and its templates, the static
files, plotly.js inlined, and the Content Security Policy that allows only the page's own
scripts. Below every page; no page's words.

Example:
    >>> "script-src" in page_csp("console.log(1)")  # doctest: +SKIP
    True
"""

from __future__ import annotations

import base64
import hashlib
from functools import cache, lru_cache
from importlib import resources
from pathlib import Path

import jinja2

HERE = Path(__file__).resolve().parent


@lru_cache(maxsize=1)
def plotly_js() -> str:
    """The plotly.js bundle shipped inside the ``plotly`` Python package."""
    text = resources.files("plotly").joinpath("package_data/plotly.min.js").read_text("utf-8")
    if "</script" in text.lower():  # would end the inline <script> early
        raise RuntimeError("plotly.min.js contains '</script' and cannot be inlined")
    return text


@cache
def static_text(name: str) -> str:
    """A file of reports/static, as text."""
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

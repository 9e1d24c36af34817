"""Open a report.html in a real headless browser (Debian's chromium) and report what it did.

One chromium run per page does three things at once: ``--dump-dom`` serializes the DOM after
the page script ran (it writes ``data-charts-drawn`` and friends on ``<body>``),
``--screenshot`` saves what a reader would see, and ``--log-net-log`` records every URL
request. Requests the page made carry the page's origin as their initiator (``"null"`` for a
file); chromium's own background traffic (updates, accounts, time) says ``"not an origin"``.
Host resolution is mapped to nowhere as well, so nothing can leave the machine either way.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# Chromium flags that keep a headless run quiet, sandbox-free (containers run as root) and
# deterministic: virtual time runs the page's timers and promises to completion at once.
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-extensions", "--hide-scrollbars", "--host-resolver-rules=MAP * ~NOTFOUND",
    "--virtual-time-budget=10000",
)
BROWSER_INITIATOR = "not an origin"
TIMEOUT_S = 120
_BODY = re.compile(r"<body(\s[^>]*)?>")
_ATTR = re.compile(r'([\w-]+)="([^"]*)"')


def find_chromium() -> str | None:
    """The browser to use: $BATCHSCOPE_CHROMIUM, else the first candidate on PATH."""
    forced = os.environ.get("BATCHSCOPE_CHROMIUM")
    if forced:
        return forced if shutil.which(forced) else None
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


@dataclass
class PageRun:
    """What one headless run of a page produced."""

    dom: str
    body: dict[str, str]
    page_requests: list[str]
    screenshot: Path
    stderr: str


def _page_requests(net_log: Path) -> list[str]:
    text = net_log.read_text(encoding="utf-8", errors="replace").rstrip()
    try:
        log = json.loads(text)
    except json.JSONDecodeError:  # a log cut short: close the event list
        log = json.loads(text.rstrip(",") + "]}")
    names = {v: k for k, v in log["constants"]["logEventTypes"].items()}
    out = []
    for event in log.get("events", []):
        params = event.get("params") or {}
        if (names.get(event["type"]) == "URL_REQUEST_START_JOB" and "url" in params
                and params.get("initiator") != BROWSER_INITIATOR):
            out.append(str(params["url"]))
    return out


def open_page(chromium: str, page: Path, out_dir: Path, width: int = 1400,
              height: int = 4000) -> PageRun:
    """Load ``page`` once; return its DOM, the attributes of ``<body>``, its requests, a PNG."""
    out_dir.mkdir(parents=True, exist_ok=True)
    shot, net_log = out_dir / f"{page.stem}.png", out_dir / f"{page.stem}.netlog.json"
    with tempfile.TemporaryDirectory(prefix="batchscope-chromium-") as profile:
        proc = subprocess.run(
            [chromium, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}",
             f"--log-net-log={net_log}", f"--screenshot={shot}", "--dump-dom",
             page.resolve().as_uri()],
            capture_output=True, text=True, timeout=TIMEOUT_S, check=False,
        )
    # The real <body> follows </head> (the head's script may mention "<body>" in a comment).
    match = _BODY.search(proc.stdout, max(proc.stdout.find("</head>"), 0))
    body = dict(_ATTR.findall(match.group(1) or "")) if match else {}
    return PageRun(proc.stdout, body, _page_requests(net_log), shot, proc.stderr[-4000:])


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")

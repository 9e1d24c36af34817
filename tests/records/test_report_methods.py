"""A Report is data: writing it, its explanation and a notebook's display are the reports
layer's functions (``batchscope.save``, ``batchscope.explanation``, ``batchscope.show``),
and the records never reach up to them.

``import batchscope.records`` runs ``batchscope/__init__.py`` first, which imports the API
and with it every layer, the reports included: a test that imported only the records that
way would pass whatever the records did. So the fresh interpreter below puts a bare
``batchscope`` package in place of that ``__init__``, loads the records, reads a recorded
report.json and checks that no reports module came with them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import batchscope
from batchscope.records import Report
from batchscope.records.codec import decode_report
from batchscope.reports import ReportPage, show_reports_in

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "tests" / "data" / "reports" / "mlp.json"

SCRIPT = """
import json, sys, types
from pathlib import Path

root, recorded = sys.argv[1:]
package = types.ModuleType("batchscope")  # the package, without its __init__'s imports
package.__path__ = [str(Path(root) / "batchscope")]
sys.modules["batchscope"] = package

from batchscope.records.codec import decode_report

report = decode_report(Path(recorded).read_text(), "mlp.json")
print(json.dumps({"loaded": sorted(m for m in sys.modules if m.startswith("batchscope.")),
                  "batches": len(report.batches)}))
"""


def test_the_records_load_and_decode_without_the_reports_layer() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(ROOT), str(RECORDED)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.splitlines()[-1])
    assert got["batches"] > 0
    assert "batchscope.records.report" in got["loaded"]
    assert [m for m in got["loaded"] if m.startswith("batchscope.reports")] == []


def test_save_explanation_and_show_render_a_read_report(tmp_path: Path) -> None:
    report = decode_report(RECORDED.read_text(), "mlp.json")
    paths = batchscope.save(report, tmp_path / "out")
    assert sorted(paths) == ["html", "json", "markdown"]
    assert all(Path(p).is_file() for p in paths.values())
    # The explanation the function gives is the one save() wrote into report.json.
    written = json.loads(Path(paths["json"]).read_text())
    assert batchscope.explanation(report) == written["recommendation"]["explanation"] != ""
    # The notebook's page is report.html itself, escaped into a sandboxed frame.
    page = batchscope.show(report)
    assert page.html == Path(paths["html"]).read_text()
    shown = page._repr_html_()
    assert shown.startswith('<iframe srcdoc="') and 'sandbox="allow-scripts"' in shown
    assert "<script" not in shown and "&lt;script" in shown


class _Formatter:
    def __init__(self) -> None:
        self.printers: dict[type, object] = {}

    def for_type(self, typ: type, func: object) -> object:
        self.printers[typ] = func
        return None


class _Formatters:
    def __init__(self) -> None:
        self.formatters = {"text/html": _Formatter()}


class _Shell:
    def __init__(self) -> None:
        self.display_formatter = _Formatters()


def test_a_running_ipython_shows_a_bare_report_as_its_page() -> None:
    assert show_reports_in(None) is False  # a script: nothing to tell
    shell = _Shell()
    assert show_reports_in(shell) is True
    printer = shell.display_formatter.formatters["text/html"].printers[Report]
    report = decode_report(RECORDED.read_text(), "mlp.json")
    assert callable(printer)
    assert printer(report) == ReportPage(batchscope.show(report).html)._repr_html_()

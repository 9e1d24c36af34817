"""A Report's conveniences (save, explanation, a notebook's display) need no registry.

``import batchscope.records`` runs ``batchscope/__init__.py`` first, which imports the API
and with it every layer, the reports included: a test that imported only the records that
way would pass whatever the records did. So the fresh interpreter below puts a bare
``batchscope`` package in place of that ``__init__``: it loads the records and nothing
above them, checks that no reports module came with them, and then calls the methods.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "tests" / "data" / "reports" / "mlp.json"

SCRIPT = """
import json, sys, types
from pathlib import Path

root, recorded, out = sys.argv[1:]
package = types.ModuleType("batchscope")  # the package, without its __init__'s imports
package.__path__ = [str(Path(root) / "batchscope")]
sys.modules["batchscope"] = package

from batchscope.records.codec import decode_report

loaded_first = sorted(m for m in sys.modules if m.startswith("batchscope.reports"))
report = decode_report(Path(recorded).read_text(), "mlp.json")
paths = report.save(out)
print(json.dumps({"loaded_first": loaded_first, "paths": paths,
                  "explanation": report.explanation(), "shown": report._repr_html_()[:40]}))
"""


def test_report_save_works_where_only_the_records_were_imported(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(ROOT), str(RECORDED),
                           str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.splitlines()[-1])
    assert got["loaded_first"] == []  # the records alone loaded no reports module
    assert sorted(got["paths"]) == ["html", "json", "markdown"]
    assert all(Path(p).is_file() for p in got["paths"].values())
    # The explanation the method gives is the one save() wrote into report.json.
    written = json.loads(Path(got["paths"]["json"]).read_text())
    assert got["explanation"] == written["recommendation"]["explanation"] != ""
    assert got["shown"].startswith('<iframe srcdoc="')

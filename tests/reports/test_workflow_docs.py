"""The GitHub Actions example in docs/: safe for forks, and its comment script really works."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.reports.conftest import REPORTS

DOCS = Path(__file__).resolve().parent.parent.parent / "docs"
PR, COMMENT = DOCS / "batchscope-pr.yml", DOCS / "batchscope-comment.yml"


def code_lines(path: Path) -> list[str]:
    return [line for line in path.read_text(encoding="utf-8").splitlines()
            if not line.lstrip().startswith("#")]


def test_measuring_workflow_runs_on_pull_request_only() -> None:
    lines = code_lines(PR)
    assert "  pull_request:" in lines
    assert not any("pull_request_target" in line for line in lines)
    assert "  contents: read" in lines
    assert "secrets." not in "\n".join(lines)


def test_comment_workflow_never_runs_pr_code() -> None:
    text = "\n".join(code_lines(COMMENT))
    assert "workflow_run:" in text and "pull_request_target" not in text
    assert "actions/checkout" not in text  # nothing from the PR is checked out
    assert "name: batchscope-json" in text  # only the JSON artifact is downloaded
    assert "batchscope-report-html" not in text
    for expression in ("workflow_run.id", "workflow_run.head_sha", "github.repository",
                       "github.token", "workflow_run.event", "workflow_run.conclusion"):
        assert expression in text
    # ${{ }} carries only event ids, SHAs and the token: never text from the artifact or PR.
    allowed = ("github.event.workflow_run.", "github.token", "github.repository")
    for expr in text.split("${{")[1:]:
        assert expr.strip().startswith(allowed), expr[:60]


def _comment_script() -> str:
    text = COMMENT.read_text(encoding="utf-8")
    body = text.split("python - <<'PY'\n", 1)[1].split("\n          PY\n", 1)[0]
    return textwrap.dedent(body)


def test_comment_script_renders_from_the_json(tmp_path: Path) -> None:
    art = tmp_path / "artifact"
    for side in ("base", "head"):
        (art / side).mkdir(parents=True)
        shutil.copy(REPORTS / "llm_decode.json", art / side / "report.json")
    (art / "pr.json").write_text(json.dumps({"pr": 7}))
    proc = subprocess.run([sys.executable, "-c", _comment_script()], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    comment = (tmp_path / "comment.md").read_text(encoding="utf-8")
    recommended = json.loads((REPORTS / "llm_decode.json").read_text())["recommendation"]
    assert f"**Recommended batch size: {recommended['batch_size']}**" in comment
    assert "batchscope compare: no regression" in comment
    assert len(comment) < 65_536 and (tmp_path / "pr.txt").read_text() == "7"


def test_comment_script_refuses_a_forged_pr_number(tmp_path: Path) -> None:
    (tmp_path / "artifact").mkdir()
    (tmp_path / "artifact" / "pr.json").write_text('{"pr": "7; rm -rf /"}')
    proc = subprocess.run([sys.executable, "-c", _comment_script()], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode != 0 and not (tmp_path / "pr.txt").exists()

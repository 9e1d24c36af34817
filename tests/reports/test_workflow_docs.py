"""The GitHub Actions example in docs/: safe for forks, and its comment script really works."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import yaml

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


def comment_script() -> str:
    text = COMMENT.read_text(encoding="utf-8")
    body = text.split("python - <<'PY'\n", 1)[1].split("\n          PY\n", 1)[0]
    return textwrap.dedent(body)


def run_comment_script(folder: Path) -> subprocess.CompletedProcess[str]:
    """The comment workflow's render step in ``folder`` (which holds artifact/), with the
    workflow's env (its THRESHOLD; the pin is not read by the script)."""
    workflow = yaml.safe_load(COMMENT.read_text(encoding="utf-8"))
    env = {**os.environ, **{k: str(v) for k, v in workflow["env"].items()}}
    return subprocess.run([sys.executable, "-c", comment_script()], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def test_comment_script_renders_from_the_json(tmp_path: Path) -> None:
    art = tmp_path / "artifact"
    for side in ("base", "head"):
        (art / side).mkdir(parents=True)
        shutil.copy(REPORTS / "llm_decode.json", art / side / "report.json")
    (art / "pr.json").write_text(json.dumps({"pr": 7}))
    proc = run_comment_script(tmp_path)
    assert proc.returncode == 0, proc.stderr
    comment = (tmp_path / "comment.md").read_text(encoding="utf-8")
    recommended = json.loads((REPORTS / "llm_decode.json").read_text())["recommendation"]
    assert f"**Recommended batch size: {recommended['batch_size']}**" in comment
    assert "batchscope compare: no regression" in comment
    assert len(comment) < 65_536 and (tmp_path / "pr.txt").read_text() == "7"


def test_comment_script_refuses_a_forged_pr_number(tmp_path: Path) -> None:
    (tmp_path / "artifact").mkdir()
    (tmp_path / "artifact" / "pr.json").write_text('{"pr": "7; rm -rf /"}')
    proc = run_comment_script(tmp_path)
    assert proc.returncode != 0 and not (tmp_path / "pr.txt").exists()


def _installs(path: Path) -> list[list[str]]:
    """The requirements of every ``pip install`` in the workflow's ``run:`` steps."""
    workflow = yaml.safe_load(path.read_text(encoding="utf-8"))
    (job,) = workflow["jobs"].values()
    out = []
    for step in job["steps"]:
        for line in step.get("run", "").splitlines():
            if "pip install" not in line:
                continue
            words = shlex.split(line)
            assert words[:4] == ["python", "-m", "pip", "install"], line
            args, i = [], 4
            while i < len(words):  # drop options and their values
                if words[i] == "--index-url":
                    i += 2
                    continue
                if not words[i].startswith("-"):
                    args.append(words[i])
                i += 1
            out.append(args)
    return out


def test_batchscope_is_installed_only_from_the_one_pin() -> None:
    pins = {yaml.safe_load(p.read_text(encoding="utf-8"))["env"]["BATCHSCOPE"]
            for p in (PR, COMMENT)}
    assert len(pins) == 1, pins  # the same pin in both files
    for path in (PR, COMMENT):
        named = [arg for args in _installs(path) for arg in args]
        assert "$BATCHSCOPE" in named  # shlex drops the quotes
        assert not [a for a in named if "batchscope" in a.lower() and a != "$BATCHSCOPE"], named
    # The comment workflow: the pin, and its renderers' dependencies at exact versions.
    for arg in (a for args in _installs(COMMENT) for a in args):
        assert arg == "$BATCHSCOPE" or re.fullmatch(r"[a-z0-9-]+==[0-9.]+", arg), arg


def test_the_comment_rejudges_the_ab_verdict_from_its_pairs(tmp_path: Path) -> None:
    from batchscope.records import ModelInfo
    from batchscope.records.ab import ABMeasurement, ABPair, ABSide
    from batchscope.reports.ab_compare import judge, write_ab

    art = tmp_path / "artifact"
    (art / "head").mkdir(parents=True)
    shutil.copy(REPORTS / "llm_decode.json", art / "head" / "report.json")
    (art / "pr.json").write_text(json.dumps({"pr": 7}))
    side = ABSide("model/serve.py", ModelInfo(target="m.py"))
    m = ABMeasurement(8, side, side, 0.2, 0, [ABPair(i, i % 2 == 0, 0.01, 0.015)
                                               for i in range(12)])
    path = write_ab(judge(m, 0.10), art / "ab", "")[0]
    doc = json.loads(path.read_text(encoding="utf-8"))
    doc.update(regression=False, verdict="no regression: forged")
    path.write_text(json.dumps(doc), encoding="utf-8")
    proc = run_comment_script(tmp_path)
    assert proc.returncode == 0, proc.stderr
    comment = (tmp_path / "comment.md").read_text(encoding="utf-8")
    assert "batchscope compare --ab: regression" in comment and "forged" not in comment

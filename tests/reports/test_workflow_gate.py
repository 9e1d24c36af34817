"""docs/batchscope-pr.yml's shell steps, run here on base/head pairs of small models.

The measuring workflow's ``run:`` steps run in order, with ``MODEL``, ``SWEEP``, ``AB`` and
``THRESHOLD`` from the file, on three pairs: identical files (the job passes), a head 30%
slower by time alone (the A/B step fails with exit 1) and a head that does 25% more work (the
work step fails with exit 1, and the A/B is skipped, as on GitHub).

What is replaced, because it only makes sense on GitHub:

- the ``uses:`` steps: checkout (the test writes ``base/`` and ``head/`` itself),
  setup-python (this interpreter, first on PATH, with its installed batchscope: this
  checkout's), upload-artifact (the test checks that the files they name were written);
- the steps that check the pin and install batchscope, by name (:data:`REPLACED`): the
  installed batchscope is this checkout's; the pin check runs on its own below;
- ``${{ }}`` in a step's ``env``: the pull request's number is 7 (no ``run:`` holds one:
  checked); ``$GITHUB_STEP_SUMMARY``: a file in the workspace.

Each ``run:`` runs as GitHub runs ``shell: bash`` (``bash --noprofile --norc -eo pipefail``)
with the workflow's env and the step's; after a failed step, only steps whose ``if:`` is
``${{ !cancelled() }}`` run, as on GitHub. The sweeps skip their decision rounds here (the
suite's BATCHSCOPE_NO_ROUNDS=1, tests/conftest.py), and read this machine's ceilings from a
cache the module fills once (:func:`_ceilings_once`).
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from batchscope.hardware.cache import cache_path, load_or_measure, write_json_atomically
from batchscope.records import ModelInfo
from batchscope.records.ab import ABMeasurement, ABPair, ABSide
from batchscope.records.work import WorkCount
from batchscope.reports.ab_compare import judge
from tests.reports.test_workflow_docs import COMMENT, PR, run_comment_script

PR_NUMBER = 7
REPLACED = ("Check that batchscope is pinned to one commit",
            "Install batchscope at the pinned commit, and the CPU build of torch")
# Conditions under which GitHub runs a step after an earlier one failed.
RUNS_AFTER_FAILURE = ("${{ !cancelled() }}", "${{ always() }}", "always()", "!cancelled()")
WORK_GATE = "Gate 1: the work per step, counted (exact), from the two sweeps"
TIME_GATE = "Gate 2: the step time, base against head in interleaved pairs (A/B)"
STEP_TIMEOUT_S = 400

# A 512-wide MLP: LAYERS layers, and after each forward a busy wait lasting EXTRA of the
# forward's own time (benchmarks/stability_models/_variants.py's Slower): the same counted
# work, a slower step. Four layers at batch 64 are 134 MFLOP a step (4 x 2 x 64 x 512 x 512),
# ~2 ms on one core: long enough that a block of 0.2 s holds ~100 steps. Three batch sizes
# keep each sweep short; the base recommends 64 (or 8 on a bad day: the gate holds either).
MODEL_SOURCE = '''"""A 512-wide MLP of {layers} layers, {extra:.0%} slower than its forward."""
import time

import torch

UNIT = "sample"
BATCH_SIZES = [1, 8, 64]
LAYERS = {layers}
EXTRA = {extra}
WIDTH = 512


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.layers = torch.nn.Sequential(
            *[m for _ in range(LAYERS) for m in (torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU())])

    def forward(self, x):
        started = time.perf_counter()
        out = self.layers(x)
        until = time.perf_counter() + (time.perf_counter() - started) * EXTRA
        while time.perf_counter() < until:
            pass
        return out


def build_model():
    return Model().eval()


def make_inputs(batch_size):
    return torch.randn(batch_size, WIDTH, generator=torch.Generator().manual_seed(1))
'''


def model_source(layers: int = 4, extra: float = 0.0) -> str:
    """The model file: ``layers`` layers (5 against 4 is 25% more FLOPs, bytes and op
    calls), ``extra`` of each forward's time spent spinning after it."""
    return MODEL_SOURCE.format(layers=layers, extra=extra)


@pytest.fixture(scope="module", autouse=True)
def _ceilings_once(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """This machine's ceilings, measured once for the module's six sweeps and cached even
    on a busy machine. ``load_or_measure`` caches only a quiet measurement, so under load
    every sweep would measure them again (65 s each on the shared 2-core VM at a load of 6);
    the gate reads none of them (it compares counted work and paired times). A folder of the
    module's own, so that the suite's cache keeps only quiet figures."""
    suite = cache_path("cpu")
    mp = pytest.MonkeyPatch()
    mp.setenv("BATCHSCOPE_CACHE_DIR", str(tmp_path_factory.mktemp("gate-ceilings")))
    ours = cache_path("cpu")
    if suite.is_file():  # the suite's, measured on a quiet machine
        shutil.copy(suite, ours)
    yield
    mp.undo()


def measure_ceilings_once() -> None:
    """Fill the module's ceilings cache (the first sweep test's cost, not each sweep's)."""
    path = cache_path("cpu")
    if not path.is_file():
        write_json_atomically(path, load_or_measure("cpu").to_dict(), "ceilings")


def load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return doc


@dataclass
class StepRun:
    name: str
    returncode: int | None  # None: skipped (an earlier step failed)
    output: str
    wall_s: float = 0.0


def _step_env(step: dict[str, Any]) -> dict[str, str]:
    """A step's env, its ``${{ }}`` replaced: only the pull request's number is allowed."""
    out = {}
    for key, value in (step.get("env") or {}).items():
        text = str(value)
        text = text.replace("${{ github.event.pull_request.number }}", str(PR_NUMBER))
        assert "${{" not in text, f"{step.get('name')}: env {key} holds an expression: {text}"
        out[key] = text
    return out


def run_job(workflow: dict[str, Any], workspace: Path) -> list[StepRun]:
    """Run the workflow's one job's ``run:`` steps in ``workspace``, as GitHub would."""
    measure_ceilings_once()
    (job,) = workflow["jobs"].values()
    assert workflow["defaults"]["run"]["shell"] == "bash"
    summary = workspace / "step_summary.md"
    summary.touch()
    env = {**os.environ, **{k: str(v) for k, v in workflow["env"].items()},
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "GITHUB_STEP_SUMMARY": str(summary), "GITHUB_WORKSPACE": str(workspace)}
    names = [s.get("name") for s in job["steps"]]
    for name in REPLACED:
        assert name in names, f"the workflow has no step {name!r} (the test replaces it)"
    runs: list[StepRun] = []
    failed = False
    for i, step in enumerate(job["steps"]):
        name = step.get("name", f"step {i}")
        if "uses" in step or name in REPLACED:
            continue
        assert "${{" not in step["run"], f"{name}: an expression in run: (pass it in env)"
        if failed and str(step.get("if", "")).strip() not in RUNS_AFTER_FAILURE:
            runs.append(StepRun(name, None, ""))
            continue
        script = workspace / f"step_{i}.sh"
        script.write_text(step["run"], encoding="utf-8")
        started = time.monotonic()
        proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
                              cwd=workspace, env={**env, **_step_env(step)}, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=STEP_TIMEOUT_S, check=False)
        runs.append(StepRun(name, proc.returncode, proc.stdout, time.monotonic() - started))
        failed = failed or proc.returncode != 0
    return runs


def lay_out(workspace: Path, model: str, base: str, head: str) -> None:
    for side, source in (("base", base), ("head", head)):
        path = workspace / side / model
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source, encoding="utf-8")


def job_result(runs: list[StepRun]) -> int:
    """The job's exit: the first failed step's code, 0 when none failed."""
    return next((r.returncode for r in runs if r.returncode), 0)


def report(runs: list[StepRun]) -> str:
    return "\n".join(f"--- {r.name}: exit {r.returncode} in {r.wall_s:.0f} s\n{r.output[-3000:]}"
                     for r in runs)


def by_name(runs: list[StepRun]) -> dict[str, StepRun]:
    return {r.name: r for r in runs}


def uploaded_paths(workflow: dict[str, Any]) -> list[str]:
    (job,) = workflow["jobs"].values()
    paths = []
    for step in job["steps"]:
        if "upload-artifact" in step.get("uses", ""):
            paths += [p.strip() for p in step["with"]["path"].splitlines() if p.strip()]
    return paths


@pytest.mark.slow
def test_identical_files_pass_and_the_comment_renders(tmp_path: Path) -> None:
    workflow = load(PR)
    model = workflow["env"]["MODEL"]
    lay_out(tmp_path, model, model_source(), model_source())
    runs = run_job(workflow, tmp_path)
    assert job_result(runs) == 0, report(runs)
    for path in uploaded_paths(workflow):
        assert (tmp_path / path).is_file(), path
    ab = json.loads((tmp_path / "out/ab/ab.json").read_text())
    assert not ab["regression"] and not ab["work_regression"], ab["verdict"]
    assert "compare --ab" in (tmp_path / "step_summary.md").read_text()
    # The artifact, laid out as upload-artifact does (paths below their common folder
    # out/), through the comment workflow's own script.
    art = tmp_path / "comment" / "artifact"
    for path in uploaded_paths(workflow):
        if path.endswith(".json"):
            target = art / Path(path).relative_to("out")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes((tmp_path / path).read_bytes())
    proc = run_comment_script(tmp_path / "comment")
    assert proc.returncode == 0, proc.stderr
    comment = (tmp_path / "comment" / "comment.md").read_text(encoding="utf-8")
    # The comment judges the pairs again: the same verdict (inconclusive passes too, where
    # a loaded machine's pairs could not rule out a slower step).
    label = "inconclusive" if ab["inconclusive"] else "no regression"
    assert f"batchscope compare --ab: {label}" in comment
    assert (tmp_path / "comment" / "pr.txt").read_text() == str(PR_NUMBER)


@pytest.mark.slow
def test_a_head_30_percent_slower_by_time_alone_fails_on_time(tmp_path: Path) -> None:
    workflow = load(PR)
    lay_out(tmp_path, workflow["env"]["MODEL"], model_source(), model_source(extra=0.30))
    runs = by_name(run_job(workflow, tmp_path))
    everything = report(list(runs.values()))
    assert runs[WORK_GATE].returncode == 0, everything  # the same counted work
    assert runs[TIME_GATE].returncode == 1, everything
    ab = json.loads((tmp_path / "out/ab/ab.json").read_text())
    assert ab["time_regression"] and not ab["work_regression"], ab["verdict"]


@pytest.mark.slow
def test_a_head_with_25_percent_more_work_fails_on_work(tmp_path: Path) -> None:
    workflow = load(PR)
    lay_out(tmp_path, workflow["env"]["MODEL"], model_source(), model_source(layers=5))
    runs = by_name(run_job(workflow, tmp_path))
    everything = report(list(runs.values()))
    assert runs[WORK_GATE].returncode == 1, everything
    assert "more work per step" in runs[WORK_GATE].output, everything
    assert "FLOPs +25.0%" in " ".join(runs[WORK_GATE].output.split()), everything
    assert runs[TIME_GATE].returncode is None, everything  # not timed: the work decided
    assert (tmp_path / "out/pr.json").is_file() and (tmp_path / "out/head/report.json").is_file()


@pytest.mark.parametrize("path", [PR, COMMENT])
def test_the_pin_check_refuses_the_placeholder_and_takes_a_commit(path: Path,
                                                                 tmp_path: Path) -> None:
    workflow = load(path)
    (job,) = workflow["jobs"].values()
    (check,) = [s["run"] for s in job["steps"] if s.get("name") == REPLACED[0]]
    pin = workflow["env"]["BATCHSCOPE"]
    commit = "0123456789abcdef0123456789abcdef01234567"

    def check_pin(value: str) -> int:
        proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", check],
                              env={**os.environ, "BATCHSCOPE": value}, capture_output=True,
                              text=True, timeout=30, check=False)
        return proc.returncode

    assert check_pin(pin) == 1  # the file's placeholder: a user must fill it in
    filled = re.sub(r"@[^@]+$", "@" + commit, pin)
    assert check_pin(filled) == 0
    for bad in (filled.replace("@" + commit, "@main"), filled.replace("@" + commit, "@v0.2.0"),
                filled[:-1], "batchscope==0.1.0", "batchscope"):
        assert check_pin(bad) == 1, bad


def _option(options: list[str], name: str) -> int:
    return int(options[options.index(name) + 1])


def test_the_ab_settings_spare_identical_code_and_catch_a_30_percent_slower_step() -> None:
    """The workflow's --pairs and --rounds on seeded synthetic pairs (never this machine's
    speed): each pair's ratio scatters by 10%, and each pair of worker processes runs at
    its own speed for its whole life, scattered by 15% (a loaded 2-core VM's pairs of
    processes read identical files at 0.73x-1.30x). Identical code must fail in under 1% of
    runs, a step 30% slower be caught in over 85%. Four rounds instead of ten flag identical
    code in ~4% of runs here: one in sixteen runs has every pair of processes above 1."""
    options = shlex.split(load(PR)["env"]["AB"])
    pairs, rounds = _option(options, "--pairs"), _option(options, "--rounds")
    threshold = float(load(PR)["env"]["THRESHOLD"]) / 100
    side = ABSide("m.py", ModelInfo(target="m.py"), work=WorkCount(1, 1, 1))
    rng = random.Random(11)

    def flagged(true_ratio: float, trials: int) -> float:
        hits = 0
        for _ in range(trials):
            speeds = [math.exp(rng.gauss(0.0, 0.15)) for _ in range(rounds)]
            m = ABMeasurement(64, side, side, 0.2, 0, [
                ABPair(i, False, 0.01, 0.01 * true_ratio * speeds[i * rounds // pairs]
                       * math.exp(rng.gauss(0.0, 0.10)), round=i * rounds // pairs)
                for i in range(pairs)], pairs, rounds=rounds)
            hits += judge(m, threshold).regression
        return hits / trials

    assert flagged(1.0, 2000) < 0.01
    assert flagged(1.30, 1000) > 0.85

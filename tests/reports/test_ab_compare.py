"""``diagnose compare --ab``: the verdict's rules on seeded synthetic pairs (never this
machine's speed), its files, and real A/B runs of two tiny model files (slow)."""

from __future__ import annotations

import json
import math
import random
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from batchscope.cli import tools_app
from batchscope.records import ModelInfo, Status
from batchscope.records.ab import AB_SCHEMA, ABComparison, ABMeasurement, ABPair, ABSide
from batchscope.records.work import WorkCount
from batchscope.reports.ab_compare import ab_json, judge, ratio_bar, time_rule, write_ab
from batchscope.reports.compare_render import render_ab_markdown
from batchscope.typed_json import decode

runner = CliRunner()
SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "mlp.py"
WORK = WorkCount(flops=1_000_000, bytes=400_000, op_calls=11)
CPU = ModelInfo(target="m.py", device="cpu", threads=1)


def ratios(true: float, sigma: float, n: int, rng: random.Random) -> list[float]:
    return [true * math.exp(rng.gauss(0.0, sigma)) for _ in range(n)]


def share_flagged(true: float, sigma: float, n: int = 30, trials: int = 1000) -> float:
    rng = random.Random(7)
    return sum(time_rule(ratios(true, sigma, n, rng), 0.10)[0] for _ in range(trials)) / trials


def measurement(pair_ratios: list[float], head_work: WorkCount = WORK,
                head_status: Status = Status.OK) -> ABMeasurement:
    pairs = [ABPair(i, i % 2 == 0, 0.010, 0.010 * r) for i, r in enumerate(pair_ratios)]
    return ABMeasurement(
        8, ABSide("base.py", CPU, work=WORK), ABSide("head.py", CPU, head_status, work=head_work),
        block_s=0.2, seed=0, pairs=pairs, pairs_asked=len(pairs))


def test_the_rule_catches_a_15_percent_slowdown_and_spares_identical_code() -> None:
    # 30 pairs whose ratios scatter by 10% (one standard deviation of their logs): the
    # documented 95% power and a false alarm rate far under 5%
    assert share_flagged(1.15, 0.10) >= 0.90
    assert share_flagged(1.00, 0.10) <= 0.05
    assert share_flagged(1.05, 0.10) <= 0.05  # real but within the threshold
    assert share_flagged(1.15, 0.05) >= 0.99


def test_heavy_tailed_pairs_do_not_fool_the_median() -> None:
    # a third of the pairs hit by a 100× stall on one side (a foreign process on the core):
    # the median of the ratios holds, the interval widens
    rng = random.Random(3)
    noisy = [r * (100.0 if rng.random() < 0.15 else 0.01 if rng.random() < 0.18 else 1.0)
             for r in ratios(1.0, 0.05, 30, rng)]
    regression, _ = time_rule(noisy, 0.10)
    assert not regression


def test_verdicts_regression_inconclusive_and_none() -> None:
    rng = random.Random(11)
    slow = judge(measurement(ratios(1.2, 0.03, 30, rng)), 0.10)
    assert slow.regression and slow.time_regression and not slow.work_regression
    assert slow.ratio is not None and slow.ratio_interval is not None
    assert slow.ratio_interval.low > 1.0 and slow.ratio > ratio_bar(0.10)
    assert slow.verdict.startswith("regression: step time at batch 8, head over base")
    same = judge(measurement(ratios(1.0, 0.03, 30, rng)), 0.10)
    assert not same.regression and not same.inconclusive
    assert same.verdict.startswith("no regression") and "is the same" in same.verdict
    noisy = judge(measurement([0.5, 2.0, 0.8, 1.25, 0.6, 1.6] * 5), 0.10)  # median 1
    assert noisy.inconclusive and not noisy.regression
    assert "too noisy to tell" in noisy.verdict
    assert any("scatter" in w for w in noisy.warnings)


def test_more_work_is_a_regression_at_equal_time() -> None:
    result = judge(measurement([1.0] * 10, WorkCount(flops=1_500_000, bytes=400_000,
                                                     op_calls=11)), 0.10)
    assert result.work_regression and result.regression and not result.time_regression
    assert result.verdict.startswith("regression: the head does more work per step at batch 8")
    assert "FLOPs +50.0%" in result.verdict


def test_a_head_that_cannot_run_the_batch_is_a_regression() -> None:
    m = measurement([], head_status=Status.OOM)
    m.head.error = "out of memory"
    result = judge(m, 0.10)
    assert result.regression and "the head could not run batch 8 (oom: out of memory)" in \
        result.verdict


def test_the_files_hold_the_typed_record(tmp_path: Path) -> None:
    result = judge(measurement(ratios(1.0, 0.03, 12, random.Random(1))), 0.10)
    text = render_ab_markdown(result)
    assert text.startswith("### ✅ batchscope compare --ab: no regression")
    assert "| step time, head / base |" in text and "#### Pairs" in text
    paths = write_ab(result, tmp_path / "ab", text)
    assert [p.name for p in paths] == ["ab.json", "ab.md"]
    back = decode(json.loads(paths[0].read_text(encoding="utf-8")), ABComparison)
    assert back.schema == AB_SCHEMA and back == result
    assert ab_json(back) == paths[0].read_text(encoding="utf-8")


def test_option_errors_exit_4(tmp_path: Path) -> None:
    for args, said in (
        (["--ab", str(SAMPLE), str(tmp_path / "missing.py")], "is not a file"),
        (["--ab", str(SAMPLE), str(SAMPLE), "--pairs", "3"], "--pairs must be at least 6"),
        (["--ab", str(SAMPLE), str(SAMPLE), "--device", "tpu"], "unknown device"),
        (["--ab", str(SAMPLE), str(SAMPLE), "--block-time", "0"], "--block-time"),
        ([str(SAMPLE), str(SAMPLE), "--pairs", "10"], "add --ab"),
    ):
        out = runner.invoke(tools_app, ["compare", *args, "--out", str(tmp_path / "o")])
        assert out.exit_code == 4, out.output
        assert said in " ".join(out.output.split())


def _copy(tmp_path: Path, name: str, extra: str = "") -> Path:
    path = tmp_path / name
    shutil.copy(SAMPLE, path)
    if extra:
        with path.open("a", encoding="utf-8") as f:
            f.write(extra)
    return path


@pytest.mark.slow
def test_a_real_ab_run_of_identical_files_is_no_regression(tmp_path: Path) -> None:
    base, head = _copy(tmp_path, "base.py"), _copy(tmp_path, "head.py")
    out = tmp_path / "ab"
    result = runner.invoke(tools_app, [
        "compare", "--ab", str(base), str(head), "--batch-size", "16", "--pairs", "8",
        "--block-time", "0.05", "--device", "cpu", "--threads", "1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads((out / "ab.json").read_text(encoding="utf-8"))
    assert data["schema"] == AB_SCHEMA and data["regression"] is False
    m = data["measurement"]
    assert m["batch_size"] == 16 and len(m["pairs"]) == 8 and m["stopped"] == ""
    assert {p["head_first"] for p in m["pairs"]} == {True, False}  # seed 0 draws both orders
    assert all(p["base_latency_s"] > 0 and p["head_latency_s"] > 0 for p in m["pairs"])
    assert m["base"]["work"] == m["head"]["work"] and m["base"]["work"]["flops"] > 0
    assert data["work"]["changes"] and data["work_regression"] is False
    assert (out / "ab.md").read_text(encoding="utf-8").startswith("### ")


@pytest.mark.slow
def test_a_real_ab_run_whose_head_fails_or_breaks_the_contract(tmp_path: Path) -> None:
    base = _copy(tmp_path, "base.py")
    # the head raises at batch 16 only: the base can, the head cannot -> regression
    failing = _copy(tmp_path, "failing.py", (
        "\n\ndef run(model, inputs):\n"
        "    if inputs.shape[0] == 16:\n"
        "        raise RuntimeError('no batch 16 here')\n"
        "    return model(inputs)\n"))
    args = ["--batch-size", "16", "--pairs", "6", "--block-time", "0.02", "--device", "cpu",
            "--threads", "1", "--out", str(tmp_path / "ab")]
    result = runner.invoke(tools_app, ["compare", "--ab", str(base), str(failing), *args])
    assert result.exit_code == 1, result.output
    assert "the head could not run batch 16" in " ".join(result.output.split())
    broken = tmp_path / "broken.py"
    broken.write_text("def build_model():\n    return 3\n\n"
                      "def make_inputs(batch_size):\n    return None\n", encoding="utf-8")
    result = runner.invoke(tools_app, ["compare", "--ab", str(base), str(broken), *args])
    assert result.exit_code == 4, result.output

"""``diagnose compare --ab``: the verdict's rules on seeded synthetic pairs (never this
machine's speed), its files, and real A/B runs of two tiny model files (slow)."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import random
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from batchscope.cli import tools_app
from batchscope.errors import UsageError
from batchscope.records import ModelInfo, Status
from batchscope.records.ab import (
    AB_SCHEMA,
    INNER_INTERVAL_PAIRS,
    ABComparison,
    ABMeasurement,
    ABPair,
    ABSide,
    ABStop,
    ABStopKind,
)
from batchscope.records.codec import decode_ab
from batchscope.records.work import WorkCount
from batchscope.reports.ab_compare import (
    TimeCall,
    ab_json,
    across_rounds,
    judge,
    load_ab,
    ratio_bar,
    round_medians,
    time_call,
    time_rule,
    write_ab,
)
from batchscope.reports.compare_render import render_ab_markdown
from batchscope.stats import median_interval
from batchscope.typed_json import decode
from tests.reports.test_compare_properties import json_values

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
    assert "the interval reaches both 1 and 1.111×" in noisy.verdict
    assert any("scatter" in w for w in noisy.warnings)


def test_one_pair_of_processes_at_its_own_speed_cannot_decide_alone() -> None:
    # Issue 31, MobileNet at batch 2: identical files ran 0.86x in one pair of worker
    # processes and 2.03x in another, each pair's ratios tight around its own level. One
    # pair of processes alone called it a regression; the rounds' medians keep it open.
    rng = random.Random(5)
    levels = (0.86, 2.03, 1.0)
    pairs = [ABPair(i, i % 2 == 0, 0.010, 0.010 * r, round=i // 10)
             for i, r in enumerate(x for level in levels for x in ratios(level, 0.03, 10, rng))]
    m = ABMeasurement(8, ABSide("base.py", CPU, work=WORK), ABSide("head.py", CPU, work=WORK),
                      block_s=0.2, seed=0, pairs=pairs, pairs_asked=30, rounds=3)
    assert round_medians(pairs) == pytest.approx(list(levels), rel=0.05)
    spread = judge(m, 0.10)
    assert not spread.regression and spread.inconclusive
    assert spread.ratio_interval.low <= 0.87 and spread.ratio_interval.high >= 2.0
    assert "over 3 pairs of worker processes" in spread.verdict
    # the second pair of processes alone was a confident regression
    alone = judge(dataclasses.replace(m, pairs=pairs[10:20], rounds=1), 0.10)
    assert alone.regression
    # a slowdown every pair of processes shows is still a regression
    slow = [dataclasses.replace(p, head_latency_s=0.010 * r)
            for p, r in zip(pairs, ratios(1.25, 0.03, 30, rng))]
    assert judge(dataclasses.replace(m, pairs=slow), 0.10).regression


def test_with_nine_rounds_or_more_their_medians_are_samples_of_their_own() -> None:
    # Ten pairs of processes whose own speeds scatter by 10% around a true 1.25x: the
    # interval is their median's, not their whole range, so one outlying pair of processes
    # neither decides nor keeps the verdict open; with three rounds, every median counts.
    rng = random.Random(9)
    levels = [*ratios(1.25, 0.10, 10, rng), 0.80]
    low, high = across_rounds(levels, 1.24, 1.26)
    assert 1.0 < low <= 1.24 and high >= 1.26 and low > 0.80
    assert across_rounds([0.80, 1.25, 1.3], 1.24, 1.26) == (0.80, 1.3)
    assert across_rounds([1.2], 1.1, 1.3) == (1.1, 1.3)


def test_an_interval_above_1_that_reaches_the_bar_is_worded_as_such() -> None:
    # 30 pairs: the 10th ratio (the interval's low end) 1.05, the median 1.065, the 21st
    # (its high end) 1.3: slower beyond the noise, maybe past the threshold
    pair_ratios = [0.95] * 9 + [1.05] * 6 + [1.08] * 5 + [1.3] * 10
    result = judge(measurement(pair_ratios), 0.10)
    assert result.ratio_interval is not None and result.ratio_interval.low > 1.0
    assert result.ratio is not None and result.ratio <= ratio_bar(0.10)
    assert result.inconclusive and not result.regression
    assert "reaches both 1" not in result.verdict
    assert "slower beyond the pairs' noise (the interval lies above 1)" in result.verdict
    assert "reaches past 1.111×" in result.verdict


def test_the_time_calls() -> None:
    bar = ratio_bar(0.10)
    assert time_call(1.2, 1.15, 1.25, 0.10) == TimeCall.REGRESSION
    assert time_call(1.05, 1.02, 1.08, 0.10) == TimeCall.SLOWER_WITHIN
    assert time_call(1.0, 0.95, bar, 0.10) == TimeCall.SAME
    assert time_call(1.0, 0.9, 1.2, 0.10) == TimeCall.SPANS_ONE_AND_BAR
    assert time_call(1.05, 1.01, 1.2, 0.10) == TimeCall.SLOWER_MAYBE_PAST
    assert time_call(1.2, 0.99, 1.3, 0.10) == TimeCall.SPANS_ONE_AND_BAR
    assert [c for c in TimeCall if c.inconclusive] == [TimeCall.SPANS_ONE_AND_BAR,
                                                       TimeCall.SLOWER_MAYBE_PAST]


def test_the_fewest_pairs_are_those_whose_interval_is_narrower_than_their_range() -> None:
    n = INNER_INTERVAL_PAIRS
    assert median_interval(list(range(n - 1))) == (0, n - 2)  # the whole range
    assert median_interval(list(range(n))) == (1, n - 2)  # the 2nd to the 8th
    few = judge(measurement([1.0, 1.01, 0.99, 1.02] * 2), 0.10)
    assert any("only 8 pairs: the interval is their whole range" in w for w in few.warnings)
    enough = judge(measurement([1.0, 1.01, 0.99, 1.02] * 2 + [1.0]), 0.10)
    assert not any("whole range" in w for w in enough.warnings)


@pytest.mark.parametrize(("stop", "words"), [
    (ABStop(ABStopKind.INTERRUPTED, 5), "interrupted by the user during pair 5"),
    (ABStop(ABStopKind.HEAD_FAILED, 4, Status.OOM, "CUDA out of memory\n  at line 3"),
     "the head failed a timing block at pair 4 (oom: CUDA out of memory)"),
    (ABStop(ABStopKind.BASE_FAILED, 2, Status.TIMEOUT, ""),
     "the base failed a timing block at pair 2 (timeout: no reason given)"),
])
def test_the_stop_is_a_kind_worded_by_the_report(stop: ABStop, words: str,
                                                 tmp_path: Path) -> None:
    m = measurement([1.0, 1.01, 0.99, 1.02] * 3)
    m.pairs_asked, m.stop = 30, stop
    result = judge(m, 0.10)
    assert f"the pairs stopped after 12 of 30: {words}" in result.warnings
    path = write_ab(result, tmp_path, render_ab_markdown(result))[0]
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["measurement"]["stop"]["kind"] == stop.kind.value
    assert decode(data, ABComparison).measurement.stop == stop


@pytest.mark.parametrize(("kind", "code"), [(ABStopKind.INTERRUPTED, 2),
                                             (ABStopKind.BASE_FAILED, 0)])
def test_the_exit_code_reads_the_stops_kind(kind: ABStopKind, code: int, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    m = measurement([1.0, 1.01, 0.99, 1.02] * 3)
    failed = None if kind == ABStopKind.INTERRUPTED else Status.MODEL_ERROR
    m.stop = ABStop(kind, 13, failed, "boom")
    monkeypatch.setattr("batchscope.profiler.ab_run.run_ab", lambda config, progress: m)
    out = runner.invoke(tools_app, ["compare", "--ab", str(SAMPLE), str(SAMPLE), "--out",
                                    str(tmp_path / "ab")])
    assert out.exit_code == code, out.output
    assert (tmp_path / "ab" / "ab.json").is_file()


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


def test_load_ab_reads_the_measurement_and_the_reader_judges_it_again(tmp_path: Path) -> None:
    m = measurement([1.5] * 12)  # a head 50% slower in every pair
    path = write_ab(judge(m, 0.10), tmp_path, "")[0]
    assert load_ab(path) == m
    # A writer's verdict is not read: a file that says "no regression" over these pairs is
    # judged a regression again from them.
    doc = json.loads(path.read_text(encoding="utf-8"))
    doc.update(regression=False, time_regression=False, verdict="no regression: trust me")
    path.write_text(json.dumps(doc), encoding="utf-8")
    assert judge(load_ab(path), 0.10).regression


@pytest.mark.parametrize(("change", "said"), [
    (lambda d: d["measurement"]["pairs"][0].update(base_latency_s=0.0),
     "measurement.pairs[0].base_latency_s is 0.0, not a number > 0"),
    (lambda d: d["measurement"].update(batch_size=0), "measurement.batch_size is 0"),
    (lambda d: d["measurement"]["head"]["work"].update(flops=-1), "work.flops is -1"),
    (lambda d: d["measurement"]["pairs"][1].update(ratio="1.0", head_latency_s="fast"),
     "measurement.pairs[1].head_latency_s is a string"),
    (lambda d: d.update(schema="batchscope.report/2"), "expected an A/B result"),
    (lambda d: d.pop("measurement"), "measurement is missing"),
])
def test_load_ab_refuses_a_hostile_file_in_one_sentence(change, said: str,
                                                          tmp_path: Path) -> None:
    path = write_ab(judge(measurement([1.0] * 12), 0.10), tmp_path, "")[0]
    doc = json.loads(path.read_text(encoding="utf-8"))
    change(doc)
    path.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(UsageError) as raised:
        load_ab(path)
    assert said in str(raised.value) and "is not a batchscope A/B result" in str(raised.value)
    for text in ("NaN", '{"schema": "batchscope.ab/1", "measurement": ' + "[" * 50 + "]" * 50
                 + "}", '{"schema": "\\ud800"}'):
        path.write_text(text, encoding="utf-8")
        with pytest.raises(UsageError):
            load_ab(path)
    with pytest.raises(UsageError, match="cannot read"):
        load_ab(tmp_path / "missing.json")


def test_option_errors_exit_4(tmp_path: Path) -> None:
    for args, said in (
        (["--ab", str(SAMPLE), str(tmp_path / "missing.py")], "is not a file"),
        (["--ab", str(SAMPLE), str(SAMPLE), "--pairs", "8"], "--pairs must be at least 9"),
        (["--ab", str(SAMPLE), str(SAMPLE), "--rounds", "40"], "--rounds must be between 1"),
        ([str(SAMPLE), str(SAMPLE), "--rounds", "4"], "add --ab"),
        (["--ab", str(SAMPLE), str(SAMPLE), "--device", "tpu"], "unknown device"),
        (["--ab", str(SAMPLE), str(SAMPLE), "--block-time", "0"], "--block-time"),
        ([str(SAMPLE), str(SAMPLE), "--pairs", "10"], "add --ab"),
        (["--ab", str(SAMPLE), str(SAMPLE), "--work-only"], "drop one"),
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
        "compare", "--ab", str(base), str(head), "--batch-size", "16", "--pairs", "20",
        "--rounds", "3",
        "--block-time", "0.05", "--device", "cpu", "--threads", "1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads((out / "ab.json").read_text(encoding="utf-8"))
    assert data["schema"] == AB_SCHEMA and data["regression"] is False
    m = data["measurement"]
    assert m["batch_size"] == 16 and len(m["pairs"]) == 20 and m["stop"] is None
    # three pairs of worker processes (as asked), each started afresh
    assert m["rounds"] == 3 and sorted({p["round"] for p in m["pairs"]}) == [0, 1, 2]
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
    args = ["--batch-size", "16", "--pairs", "9", "--block-time", "0.02", "--device", "cpu",
            "--threads", "1", "--out", str(tmp_path / "ab")]
    result = runner.invoke(tools_app, ["compare", "--ab", str(base), str(failing), *args])
    assert result.exit_code == 1, result.output
    assert "the head could not run batch 16" in " ".join(result.output.split())
    broken = tmp_path / "broken.py"
    broken.write_text("def build_model():\n    return 3\n\n"
                      "def make_inputs(batch_size):\n    return None\n", encoding="utf-8")
    result = runner.invoke(tools_app, ["compare", "--ab", str(base), str(broken), *args])
    assert result.exit_code == 4, result.output


def _paths(doc: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a JSON document: each object's and list's members, and the root."""
    out = [at]
    if isinstance(doc, dict):
        for key, value in doc.items():
            out += _paths(value, (*at, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            out += _paths(value, (*at, i))
    return out


def _with(doc: Any, at: tuple[Any, ...], value: Any) -> Any:
    if not at:
        return value
    out = copy.deepcopy(doc)
    node = out
    for key in at[:-1]:
        node = node[key]
    node[at[-1]] = value
    return out


AB_DOC = json.loads(ab_json(judge(measurement([1.0, 1.2, 0.9] * 4,
                                              head_work=WorkCount(2, 3, 4, 5.0)), 0.10)))
AB_PLACES = _paths(AB_DOC)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(AB_PLACES), json_values)
def test_a_hostile_ab_json_is_read_judged_and_rendered_or_refused_in_one_sentence(
        at: tuple[Any, ...], value: Any) -> None:
    text = json.dumps(_with(AB_DOC, at, value), allow_nan=True)
    try:
        m = decode_ab(text, "ab.json")
    except UsageError as exc:
        assert str(exc).startswith("ab.json is not a batchscope A/B result: ")
        assert "\n" not in str(exc)
        return
    render_ab_markdown(judge(m, 0.10))  # whatever decoded is judged and rendered

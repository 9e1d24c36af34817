"""Request streams, traces and the metrics of a run."""

from __future__ import annotations

import json

import pytest

from batchscope.errors import UsageError
from batchscope.serving.metrics import Slo, percentile, summarize
from batchscope.serving.requests import (
    Request,
    TokenRange,
    load_trace,
    parse_token_range,
    poisson_stream,
    scaled_trace,
)
from batchscope.serving.simulator import Served


def test_percentile_interpolates_between_ranks():
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == pytest.approx(2.5)
    assert percentile([5.0], 99) == 5.0
    assert percentile([], 50) is None


def _served(arrival, first, finished, out):
    return Served(Request(arrival, 1, out), arrival, first, finished)


def test_summary_counts_tokens_over_the_run():
    # 2 + 4 tokens from 0 to 0.08 s: 75 tokens/s; TPOTs 20 and 20 ms.
    runs = [_served(0.0, 0.02, 0.04, 2), _served(0.0, 0.02, 0.08, 4)]
    m = summarize(runs, Slo(tpot_s=0.025))
    assert m.throughput_tokens_per_s == pytest.approx(75.0)
    assert m.tpot_p50_s == pytest.approx(0.02)
    assert m.keeps_up is None  # both arrived at once: no arrival rate to keep up with
    assert m.slo_met is True
    assert m.goodput_requests_per_s == pytest.approx(25.0)
    late = summarize(runs, Slo(tpot_s=0.01))
    assert late.slo_met is False and late.goodput_requests_per_s == 0.0


def test_a_server_falling_behind_misses_any_slo():
    # Arrivals span 0.01 s, finishes 5 s: the queue grows with every request.
    runs = [_served(0.0, 1.0, 5.0, 2), _served(0.01, 6.0, 10.0, 2)]
    m = summarize(runs, Slo(tpot_s=100.0))
    assert m.keeps_up is False and m.slo_met is False
    # Arrivals 1 s apart, finishes 1 s apart: keeping up.
    steady = [_served(0.0, 0.1, 0.5, 2), _served(1.0, 1.1, 1.5, 2)]
    assert summarize(steady).keeps_up is True


def test_poisson_stream_is_seeded_and_rate_scales_the_same_pattern():
    r = TokenRange(4, 8)
    a = poisson_stream(2.0, 50, r, r, seed=3)
    assert a == poisson_stream(2.0, 50, r, r, seed=3)
    b = poisson_stream(4.0, 50, r, r, seed=3)
    assert [x.arrival_s / 2 for x in a] == pytest.approx([x.arrival_s for x in b])
    assert all(4 <= x.prompt_tokens <= 8 for x in a)
    assert 1.0 < len(a) / a[-1].arrival_s < 4.0  # 50 draws of a rate-2 process


@pytest.mark.parametrize("text", ["", "x", "8:4", "-3", "1:2:3", "0"])
def test_bad_token_ranges_are_one_sentence(text):
    with pytest.raises(UsageError, match="--output-tokens"):
        parse_token_range(text, "--output-tokens", 1)


def test_token_range_parses():
    assert parse_token_range("16:256", "--x", 1) == TokenRange(16, 256)
    assert parse_token_range(" 7 ", "--x", 1) == TokenRange(7, 7)


def test_trace_formats(tmp_path):
    rows = [{"arrival_s": 1.0, "prompt_tokens": 5, "output_tokens": 3},
            {"arrival_s": 0.5, "prompt_tokens": 2, "output_tokens": 1}]
    lines = tmp_path / "t.jsonl"
    lines.write_text("\n".join(json.dumps(r) for r in rows))
    listed = tmp_path / "t.json"
    listed.write_text(json.dumps(rows))
    csv = tmp_path / "t.csv"
    csv.write_text("arrival_s,prompt_tokens,output_tokens\n1.0,5,3\n0.5,2,1\n")
    for path in (lines, listed, csv):
        assert load_trace(path) == [Request(0.5, 2, 1), Request(1.0, 5, 3)]


@pytest.mark.parametrize("content, match", [
    ("", "holds no requests"),
    ("[]", "holds no requests"),
    ('{"arrival_s": 0, "prompt_tokens": 1, "output_tokens": NaN}', "output_tokens"),
    ('{"arrival_s": 0, "prompt_tokens": 1, "output_tokens": 0}', "output_tokens"),
    ('{"arrival_s": -1, "prompt_tokens": 1, "output_tokens": 2}', "arrival_s"),
    ('{"arrival_s": 0, "prompt_tokens": 1.5, "output_tokens": 2}', "prompt_tokens"),
    ('{"arrival_s": 0, "output_tokens": 2}', "prompt_tokens"),
    ("not json", "is not CSV"),
])
def test_bad_traces_are_one_sentence(tmp_path, content, match):
    path = tmp_path / "t.jsonl"
    path.write_text(content)
    with pytest.raises(UsageError, match=match):
        load_trace(path)


def test_missing_trace(tmp_path):
    with pytest.raises(UsageError, match="cannot read the trace"):
        load_trace(tmp_path / "nope.csv")


def test_scaled_trace_keeps_lengths_and_sets_the_rate():
    trace = [Request(0.0, 1, 2), Request(1.0, 3, 4), Request(2.0, 5, 6)]
    fast = scaled_trace(trace, 4.0)  # 2 gaps over 0.5 s: 4/s
    assert [r.arrival_s for r in fast] == pytest.approx([0.0, 0.25, 0.5])
    assert [r.output_tokens for r in fast] == [2, 4, 6]

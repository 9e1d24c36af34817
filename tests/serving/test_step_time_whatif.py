"""T(batch, context) from a report, and the what-if over it."""

from __future__ import annotations

import pytest

from batchscope.errors import UsageError
from batchscope.serving.metrics import Slo
from batchscope.serving.requests import Request, TokenRange
from batchscope.serving.step_time import fit_step_time
from batchscope.serving.whatif import WhatIfOptions, what_if
from tests.serving.conftest import KV_BYTES, decode_doc, step_s


def test_grid_fit_recovers_the_step_time_everywhere():
    model = fit_step_time(decode_doc())
    assert model.source == "context grid"
    for b in (1, 2, 4, 8, 16):  # 2 and 8 are not in the grid: the split's shape, scaled
        for c in (0, 128, 300, 512):
            assert model.step_s(b, c) == pytest.approx(step_s(b, c), rel=1e-6)
    assert model.worst_error() == pytest.approx(0.0, abs=1e-9)
    assert model.kv_bytes_per_token == pytest.approx(KV_BYTES)
    # Between measured sizes: linear in b (step_s is linear in b at a fixed context).
    assert model.step_s(3, 200) == pytest.approx(step_s(3, 200), rel=1e-6)


def test_per_op_split_alone_scales_the_state_ops_with_the_context():
    model = fit_step_time(decode_doc(grid_contexts=()))
    assert model.source == "per-op split"
    # The state op's time at c0 = 128 is KV_S b 128 for 129 slots: the fit's per-token cost
    # is KV_S 128/129 b, so at 512 it is off by 1/129 of the KV part only.
    assert model.step_s(8, 128) == pytest.approx(step_s(8, 128))
    assert model.step_s(8, 512) == pytest.approx(step_s(8, 512), rel=0.01)
    assert model.kv_bytes_per_token == pytest.approx(KV_BYTES)


def test_without_ops_or_grid_the_step_does_not_grow_with_context():
    model = fit_step_time(decode_doc(grid_contexts=(), ops=False))
    assert model.source == "none"
    assert model.step_s(4, 1000) == model.step_s(4, 128)


def test_context_must_be_known():
    with pytest.raises(UsageError, match="--context"):
        fit_step_time(decode_doc(contexts=False))
    assert fit_step_time(decode_doc(contexts=False), context=128).base_context == 128


def test_nothing_measured():
    doc = decode_doc()
    doc["batches"] = [{"batch_size": 1, "status": "oom"}]
    with pytest.raises(UsageError, match="no measured batch size"):
        fit_step_time(doc)


def small(**kw) -> WhatIfOptions:
    return WhatIfOptions(requests=120, output_tokens=TokenRange(8, 64), **kw)


def test_continuous_serves_more_than_static_at_high_load():
    result = what_if(decode_doc(), small())
    best = result["best"]
    assert best["continuous"]["throughput_tokens_per_s"] > \
        best["static"]["throughput_tokens_per_s"]
    assert best["static"]["idle_slot_share"] > 0  # finished rows held until the longest ends
    assert result["recommendation"]["policy"] == "continuous"
    assert "continuous batching" in result["recommendation"]["sentence"]
    assert result["caps"] == [1, 2, 4, 8, 16]
    # KV: 90% of (1 GB free - 100 MB weights) at 1000 B a token
    assert result["kv_capacity_tokens"] == int(0.9 * 9 * 10**8 // KV_BYTES)


def test_slo_names_the_cap_and_the_rate():
    result = what_if(decode_doc(), small(slo=Slo(tpot_s=0.2)))
    rec = result["recommendation"]
    assert rec["max_rate_per_s"] > 0 and rec["cap"] in result["caps"]
    assert "p99 TPOT ≤ 200 ms" in rec["sentence"]
    # A step at the chosen cap must itself fit the target.
    assert step_s(rec["cap"], 128) < 0.2
    impossible = what_if(decode_doc(), small(slo=Slo(tpot_s=1e-6)))
    assert impossible["recommendation"]["cap"] is None
    assert "No batch cap meets" in impossible["recommendation"]["sentence"]


def test_kv_memory_limits_admission():
    # 2000 tokens of KV: two requests of 128 + up to 64 tokens at once, whatever the cap.
    result = what_if(decode_doc(), small(kv_memory_bytes=2000 * KV_BYTES, caps=[16],
                                         rates_per_s=[50.0]))
    (cont,) = [r for r in result["runs"] if r["policy"] == "continuous"]
    assert result["kv_capacity_tokens"] == 2000
    assert cont["mean_batch"] <= 2000 / 128


def test_trace_replay(tmp_path):
    trace = [Request(i * 0.5, 100, 10) for i in range(20)]
    result = what_if(decode_doc(), small(trace=trace, rates_per_s=[2.0, 4.0]))
    assert result["stream"]["kind"] == "trace"
    assert result["stream"]["trace_rate_per_s"] == pytest.approx(2.0)
    assert {r["rate_per_s"] for r in result["runs"]} == {2.0, 4.0}


@pytest.mark.parametrize("options, match", [
    (WhatIfOptions(rates_per_s=[-1.0]), "--rate"),
    (WhatIfOptions(rates_per_s=[float("nan")]), "--rate"),
    (WhatIfOptions(requests=0), "--requests"),
    (WhatIfOptions(caps=[32]), "above the largest batch size"),
    (WhatIfOptions(slo=Slo(tpot_s=float("nan"))), "--slo-tpot-ms"),
    (WhatIfOptions(prefill_s_per_token=-1.0), "--prefill"),
])
def test_bad_options_are_one_sentence(options, match):
    with pytest.raises(UsageError, match=match):
        what_if(decode_doc(), options)


def test_a_report_with_gaps_still_fits():
    # null bytes of an op, a grid point without input bytes, a failed grid point
    doc = decode_doc()
    doc["batches"][0]["ops"][1]["bytes"]["state"] = None
    doc["serving"]["context_grid"][0]["input_bytes"] = None
    doc["serving"]["context_grid"].append({"batch_size": 16, "context": 2048, "status": "oom"})
    model = fit_step_time(doc)
    assert model.source == "context grid"
    assert model.step_s(16, 512) == pytest.approx(step_s(16, 512), rel=1e-6)


def test_a_very_slow_model_still_gets_rates():
    doc = decode_doc()
    for b in doc["batches"]:
        b["latency_s"]["median"] *= 1e6  # steps of a day: rates of 1e-8 requests/s
    doc["serving"]["context_grid"] = []
    result = what_if(doc, small(caps=[1]))
    assert all(rate > 0 for rate in result["rates_per_s"])

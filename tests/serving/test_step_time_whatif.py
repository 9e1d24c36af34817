"""T(batch, context) from a report, and the what-if over it."""

from __future__ import annotations

import dataclasses

import pytest

from batchscope.errors import UsageError
from batchscope.records import Status
from batchscope.records.codec import decode, to_builtins
from batchscope.records.serving import (
    KvBytesSource,
    KvMemorySource,
    Policy,
    ServingSection,
    StepTimeSource,
    StreamKind,
    WhatIf,
)
from batchscope.serving.metrics import Slo
from batchscope.serving.report_section import REPORT_REQUESTS, serving_section
from batchscope.serving.requests import Request, TokenRange
from batchscope.serving.step_time import fit_step_time
from batchscope.serving.whatif import WhatIfOptions, what_if
from tests.serving.conftest import KV_BYTES, decode_doc, decode_model, decode_report_of, step_s


def test_grid_fit_recovers_the_step_time_everywhere():
    model = fit_step_time(decode_model())
    assert model.source == StepTimeSource.CONTEXT_GRID
    for b in (1, 2, 4, 8, 16):  # 2 and 8 are not in the grid: the split's shape, scaled
        for c in (0, 128, 300, 512):
            assert model.step_s(b, c) == pytest.approx(step_s(b, c), rel=1e-6)
    assert model.worst_error() == pytest.approx(0.0, abs=1e-9)
    assert model.kv_bytes_per_token == pytest.approx(KV_BYTES)
    assert model.kv_bytes_source == KvBytesSource.GRID_INPUTS
    # Between measured sizes: linear in b (step_s is linear in b at a fixed context).
    assert model.step_s(3, 200) == pytest.approx(step_s(3, 200), rel=1e-6)


def test_per_op_split_alone_scales_the_state_ops_with_the_context():
    model = fit_step_time(decode_model(grid_contexts=()))
    assert model.source == StepTimeSource.PER_OP_SPLIT
    # The state op's time at c0 = 128 is KV_S b 128 for 129 slots: the fit's per-token cost
    # is KV_S 128/129 b, so at 512 it is off by 1/129 of the KV part only.
    assert model.step_s(8, 128) == pytest.approx(step_s(8, 128))
    assert model.step_s(8, 512) == pytest.approx(step_s(8, 512), rel=0.01)
    assert model.kv_bytes_per_token == pytest.approx(KV_BYTES)
    assert model.kv_bytes_source == KvBytesSource.STATE_BYTES


def test_without_ops_or_grid_the_step_does_not_grow_with_context():
    model = fit_step_time(decode_model(grid_contexts=(), ops=False))
    assert model.source == StepTimeSource.NONE
    assert model.step_s(4, 1000) == model.step_s(4, 128)


def test_context_must_be_known():
    with pytest.raises(UsageError, match="--context"):
        fit_step_time(decode_model(contexts=False))
    assert fit_step_time(decode_model(contexts=False), context=128).base_context == 128


def test_nothing_measured():
    doc = decode_doc()
    doc["batches"] = [{"batch_size": 1, "status": "oom"}]
    with pytest.raises(UsageError, match="no measured batch size"):
        fit_step_time(decode_report_of(doc))


def small(**kw) -> WhatIfOptions:
    return WhatIfOptions(requests=120, output_tokens=TokenRange(8, 64), **kw)


def test_continuous_serves_more_than_static_at_high_load():
    result = what_if(decode_model(), small())
    cont, stat = result.best[Policy.CONTINUOUS], result.best[Policy.STATIC]
    assert cont is not None and stat is not None
    assert cont.throughput_tokens_per_s > stat.throughput_tokens_per_s
    assert stat.idle_slot_share is not None
    assert stat.idle_slot_share > 0  # finished rows held until the longest ends
    assert result.recommendation.policy == Policy.CONTINUOUS
    assert result.recommendation.cap == cont.cap
    assert result.caps == [1, 2, 4, 8, 16]
    # KV: 90% of (1 GB free - 100 MB weights) at 1000 B a token
    assert result.kv_capacity_tokens == int(0.9 * 9 * 10**8 // KV_BYTES)
    assert result.kv_memory_source == KvMemorySource.FREE_MEMORY
    assert result.kv_memory_bytes == int(0.9 * 9 * 10**8)


@pytest.mark.slow
def test_slo_names_the_cap_and_the_rate():
    result = what_if(decode_model(), small(slo=Slo(tpot_s=0.2)))
    rec = result.recommendation
    assert rec.max_rate_per_s is not None and rec.max_rate_per_s > 0
    assert rec.cap in result.caps
    assert result.slo.tpot_s == 0.2 and result.slo.ttft_s is None
    # The pick is the highest rate within the SLO over every policy and cap.
    assert rec.max_rate_per_s == max(r.max_rate_per_s or 0 for r in result.max_rate_within_slo)
    # A step at the chosen cap must itself fit the target.
    assert step_s(rec.cap, 128) < 0.2
    impossible = what_if(decode_model(), small(slo=Slo(tpot_s=1e-6)))
    assert impossible.recommendation.cap is None and impossible.recommendation.policy is None


def test_kv_memory_limits_admission():
    # 2000 tokens of KV: two requests of 128 + up to 64 tokens at once, whatever the cap.
    result = what_if(decode_model(), small(kv_memory_bytes=2000 * KV_BYTES, caps=[16],
                                           rates_per_s=[50.0]))
    (cont,) = [r for r in result.runs if r.policy == Policy.CONTINUOUS]
    assert result.kv_capacity_tokens == 2000
    assert result.kv_memory_source == KvMemorySource.OPTION
    assert cont.mean_batch is not None and cont.mean_batch <= 2000 / 128


def test_trace_replay(tmp_path):
    trace = [Request(i * 0.5, 100, 10) for i in range(20)]
    result = what_if(decode_model(), small(trace=trace, rates_per_s=[2.0, 4.0]))
    assert result.stream.kind == StreamKind.TRACE
    assert result.stream.trace_rate_per_s == pytest.approx(2.0)
    assert {r.rate_per_s for r in result.runs} == {2.0, 4.0}


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
        what_if(decode_model(), options)


def test_a_report_with_gaps_still_fits():
    # an op without state bytes, a grid point without input bytes, a failed grid point
    doc = decode_doc()
    doc["batches"][0]["ops"][1]["bytes"]["state"] = 0
    doc["serving"]["context_grid"][0]["input_bytes"] = None
    doc["serving"]["context_grid"].append({"batch_size": 16, "context": 2048, "status": "oom"})
    model = fit_step_time(decode_report_of(doc))
    assert model.source == StepTimeSource.CONTEXT_GRID
    assert model.step_s(16, 512) == pytest.approx(step_s(16, 512), rel=1e-6)


def test_a_very_slow_model_still_gets_rates():
    doc = decode_doc()
    for b in doc["batches"]:
        b["latency_s"]["median"] *= 1e6  # steps of a day: rates of 1e-8 requests/s
    doc["serving"]["context_grid"] = []
    result = what_if(decode_report_of(doc), small(caps=[1]))
    assert all(rate > 0 for rate in result.rates_per_s)


def test_the_what_if_reads_back_as_it_was_written():
    # report.json holds to_builtins of the section; the one decoder gives the same record.
    result = what_if(decode_model(), small(slo=Slo(ttft_s=0.5, tpot_s=0.2)))
    doc = to_builtins(result)
    assert doc["kv_memory_source"] == "free_memory"
    assert doc["step_time"]["kv_bytes_source"] == "grid_inputs"
    assert set(doc["best"]) == {"static", "continuous"}
    assert "sentence" not in doc["recommendation"]  # the renderer words the pick
    assert decode(doc, WhatIf) == result


def test_the_step_time_fit_is_recorded_with_its_grid():
    model = fit_step_time(decode_model())
    fit = model.record()
    assert [t.batch_size for t in fit.curve] == [1, 2, 4, 8, 16]
    # 2 contexts x 3 grid sizes, each measured against the fit and the per-op split alone
    assert len(fit.points) == 6
    assert all(p.split_error is not None for p in fit.points)
    assert fit.worst_error == model.worst_error()


def test_the_report_section_runs_the_what_if_once_the_sweep_is_done():
    report = decode_model()
    assert report.serving is not None
    grid = report.serving.context_grid
    running = serving_section(report, grid, final=False)
    assert running == ServingSection(contexts=[128, 512], base_context=128, context_grid=grid)
    done = serving_section(report, grid, final=True)
    assert done.what_if is not None and done.what_if_error is None
    # No recommendation in this report: every measured size is a cap, the report's stream.
    assert done.what_if.caps == [1, 2, 4, 8, 16]
    assert done.what_if.stream.requests == REPORT_REQUESTS


def test_a_section_without_a_measured_batch_says_why():
    report = decode_model()
    failed = [dataclasses.replace(b, status=Status.OOM) for b in report.batches]
    section = serving_section(dataclasses.replace(report, batches=failed), [], final=True)
    assert section.what_if is None
    assert section.what_if_error == ("the report has no measured batch size to take step "
                                     "times from.")


@pytest.mark.slow
def test_the_renderer_words_the_pick_and_the_sources():
    from batchscope.reports.serving_render import document, explain, recommendation_sentence

    plain = what_if(decode_model(), small())
    assert "continuous batching" in recommendation_sentence(plain)
    words = " ".join(explain(plain))
    assert "(the inputs' bytes at two contexts)" in words
    assert "(90% of the memory the sweep found free beside the weights)" in words
    within = what_if(decode_model(), small(slo=Slo(tpot_s=0.2)))
    assert "p99 TPOT ≤ 200 ms" in recommendation_sentence(within)
    assert document(within)["recommendation"]["sentence"] == recommendation_sentence(within)
    impossible = what_if(decode_model(), small(slo=Slo(tpot_s=1e-6)))
    assert recommendation_sentence(impossible).startswith(
        "No batch cap meets p99 TPOT ≤ 0.001 ms under either policy")
    capped = what_if(decode_model(), small(kv_memory_bytes=2000 * KV_BYTES, caps=[16],
                                           rates_per_s=[50.0]))
    assert "(--kv-memory) holds 2,000 tokens" in " ".join(explain(capped))

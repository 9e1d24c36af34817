"""A --target-gpu prediction of a decode model served: its steps at every context, the
paged engine's KV read, the prefill predicted on the GPU (serving/step_time._fit_target,
target/prefill.py). Structure and exact arithmetic; nothing timed on this machine."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from batchscope.cli import diagnose_app, tools_app
from batchscope.contract import load_model_file
from batchscope.errors import UsageError
from batchscope.records.serving import KvBytesSource, Policy, StepTimeSource
from batchscope.serving.requests import Request
from batchscope.serving.simulator import simulate
from batchscope.serving.step_time import fit_step_time, paged_per_token_s
from batchscope.target.calibrated import TERMS
from batchscope.target.predict import diagnose_target, predict
from tests.conftest import MODELS
from tests.serving.conftest import decode_model

runner = CliRunner()
TINY = MODELS / "tiny_decode.py"
# tiny_decode: 2 layers, a key and a value cache each, 32 fp32 numbers per row per token.
KV_BYTES_PER_TOKEN = 2 * 2 * 32 * 4


def test_a_decode_model_is_predicted_at_every_context_and_a_graph_has_no_host():
    section = predict(load_model_file(TINY), "H100 SXM5 80GB", "fp32", [1, 2, 4],
                      cuda_graphs=True)
    assert section.cuda_graphs
    points = {(p.batch_size, p.context): p for p in section.context_grid}
    assert sorted(points) == [(b, c) for b in (1, 2, 4) for c in (16, 64)]
    for b in section.batches:  # the first context is the batches' own step
        assert points[(b.batch_size, 16)].predicted_step_s == b.predicted_step_s
        # replayed as one graph: no host, the kernels back to back
        assert b.host_s == 0 and b.predicted_step_s == pytest.approx(b.device_s)
        grown = points[(b.batch_size, 64)].input_bytes - points[(b.batch_size, 16)].input_bytes
        assert grown == b.batch_size * 48 * KV_BYTES_PER_TOKEN
        assert points[(b.batch_size, 64)].predicted_step_s > b.predicted_step_s
    eager = predict(load_model_file(TINY), "H100 SXM5 80GB", "fp32", [1])
    assert eager.batches[0].host_s > 0 and not eager.cuda_graphs
    assert section.weight_bytes is not None and section.weight_bytes > 0


@pytest.fixture(scope="module")
def predicted():
    return diagnose_target(TINY, "H100 SXM5 64GB", "fp32", [1, 2, 4], cuda_graphs=True)


def test_serve_takes_the_predicted_steps_padded_through_the_grid(predicted):
    model = fit_step_time(predicted)
    assert model.source == StepTimeSource.CONTEXT_GRID and model.batch_sizes == [1, 2, 4]
    assert model.kv_bytes_per_token == KV_BYTES_PER_TOKEN
    assert model.kv_bytes_source == KvBytesSource.GRID_INPUTS
    for p in predicted.target.context_grid:  # a line through two contexts: exact at both
        assert model.step_s(p.batch_size, p.context) == pytest.approx(p.predicted_step_s)
    # the KV room beside the weights is the GPU's memory, not this machine's
    assert predicted.model.available_memory_bytes == 64 * 2**30 - predicted.target.reserved_bytes
    assert predicted.model.parameter_bytes == predicted.target.weight_bytes


def test_a_paged_engine_reads_each_rows_cache_once_at_the_memory_side(predicted):
    model = fit_step_time(predicted, paged=True)
    assert model.source == StepTimeSource.PAGED_KV
    assert TERMS.gemm_memory is not None
    for b, per_token in zip(model.batch_sizes, model.per_token_s, strict=True):
        assert per_token == pytest.approx(
            b * KV_BYTES_PER_TOKEN / (1631e9 * TERMS.gemm_memory.efficiency))
        assert per_token == paged_per_token_s(predicted, KV_BYTES_PER_TOKEN, b)
    padded = fit_step_time(predicted)
    # the shared part is the grid line's at no context, whichever attention reads it
    assert model.shared_s == pytest.approx(padded.shared_s)


def test_paged_is_refused_on_a_sweep_of_this_machine():
    with pytest.raises(UsageError, match="--target-gpu prediction"):
        fit_step_time(decode_model(), paged=True)


def test_a_paged_step_is_at_its_rows_mean_context():
    """Two prompts of 10 and 30 tokens admitted together: padded attention steps at the
    longest (30, then 31), paged at their mean (20, then 21)."""
    seen: list[int] = []

    def step_s(rows: int, context: int) -> float:
        seen.append(context)
        return 0.01

    requests = [Request(0.0, 10, 2), Request(0.0, 30, 2)]
    simulate(requests, Policy.CONTINUOUS, 2, step_s)
    assert seen == [30, 31]
    seen.clear()
    simulate(requests, Policy.CONTINUOUS, 2, step_s, paged=True)
    assert seen == [20, 21]


LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
         "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 4,
         "num_hidden_layers": 2, "vocab_size": 1000, "max_position_embeddings": 512,
         "rms_norm_eps": 1e-5, "bos_token_id": 1, "eos_token_id": 2}


@pytest.mark.slow
def test_serve_on_a_prediction_predicts_prefill_and_refuses_an_engine(tmp_path):
    pytest.importorskip("transformers")
    config = tmp_path / "llama"
    config.mkdir()
    (config / "config.json").write_text(json.dumps(LLAMA))
    out = tmp_path / "out"
    done = runner.invoke(diagnose_app, [
        f"hf:{config}", "--task", "causal-lm-decode", "--contexts", "16,64",
        "--target-gpu", "H100 SXM5 64GB", "--dtype", "fp16", "--batch-sizes", "1,2,4",
        "--cuda-graphs", "--fused", "--out", str(out)])
    assert done.exit_code == 0, done.output
    report = out / "report.json"
    target = json.loads(report.read_text())["target"]
    assert target["fused"] and target["cuda_graphs"] and len(target["context_grid"]) == 6
    served = runner.invoke(tools_app, [
        "serve", str(report), "--paged", "--requests", "20", "--prompt-tokens", "8:16",
        "--output-tokens", "4:8", "--caps", "2,4", "--rate", "50", "--out", str(tmp_path)])
    assert served.exit_code == 0, served.output
    what_if = json.loads((tmp_path / "serving.json").read_text())
    assert all(r["preemptions"] == 0 for r in what_if["runs"])  # 20 short requests fit
    for run in what_if["runs"]:  # the band: the same run on the low and the high steps
        low, high = run["throughput_band_tokens_per_s"]
        assert low <= run["throughput_tokens_per_s"] <= high
        fast, slow = run["tpot_p50_band_s"]
        assert fast <= run["tpot_p50_s"] <= slow
    assert what_if["paged"] and what_if["predicted_on"] == "H100 SXM5 64GB"
    assert what_if["step_time"]["source"] == "paged KV read"
    prefill = what_if["prefill"]
    assert prefill["source"] == "predicted" and len(prefill["points"]) == 3
    assert len({p["prompt_tokens"] for p in prefill["points"]}) == 3  # shortest, median, longest
    assert all(0 < p["measured_s"] < 1 for p in prefill["points"])
    words = (tmp_path / "serving.md").read_text()
    assert "Prefill is predicted on the H100 SXM5 64GB" in words
    assert "Attention is paged (--paged)" in words
    assert "Step times are predicted on the H100 SXM5 64GB (--target-gpu)" in words
    refused = runner.invoke(tools_app, ["serve", str(report), "--engine", "transformers",
                                        "--out", str(tmp_path)])
    assert refused.exit_code == 4 and "prediction for the H100 SXM5 64GB" in refused.output
    runs = tmp_path / "engine_runs.json"
    runs.write_text("{}")  # refused before it is read
    refused = runner.invoke(tools_app, ["serve", str(report), "--engine-runs", str(runs),
                                        "--out", str(tmp_path)])
    assert refused.exit_code == 4 and "runs cannot calibrate" in refused.output


def test_a_paged_server_takes_kv_as_it_goes_and_preempts_the_latest():
    """KV for 10 tokens; two requests of a 3-token prompt and 4 output tokens. Reserving
    all 7 at admission, B waits for A (done at 0.04, B at 0.08). Paged, both start; at the
    third step 10 + 2 tokens would not fit, so B (admitted last, 5 tokens held, 2 made) is
    preempted, readmitted when A leaves (0.04), prefilled again at 3 + 2 tokens, and done
    two steps later (0.06)."""
    prefilled: list[int] = []

    def prefill_s(tokens: int) -> float:
        prefilled.append(tokens)
        return 0.0

    def step_s(rows: int, context: int) -> float:
        return 0.01

    requests = [Request(0.0, 3, 4), Request(0.0, 3, 4)]
    reserved = simulate(requests, Policy.CONTINUOUS, 2, step_s, 10)
    assert [s.finished_s for s in reserved.served] == pytest.approx([0.04, 0.08])
    assert reserved.preemptions == 0
    paged = simulate(requests, Policy.CONTINUOUS, 2, step_s, 10, prefill_s, paged=True)
    a, b = paged.served
    assert (a.finished_s, b.finished_s) == pytest.approx((0.04, 0.06))
    assert b.first_token_s == pytest.approx(0.01)  # made before it was preempted
    assert paged.preemptions == 1 and prefilled == [3, 3, 5]
    assert paged.steps == 6
    # static batching reserves as before, paged or not
    static = simulate(requests, Policy.STATIC, 2, step_s, 10, paged=True)
    assert static.preemptions == 0
    assert [s.finished_s for s in static.served] == pytest.approx([0.04, 0.08])


@pytest.mark.parametrize(("capacity", "requests"), [
    (1000, [Request(0.0, 995, 5)]),  # fits the room alone, not beside the watermark
    (2000, [Request(0.0, 1, 50), Request(0.0, 1979, 15)]),  # preempted near the room's size
])
def test_a_paged_server_serves_what_fits_its_room_alone(capacity, requests):
    sim = simulate(requests, Policy.CONTINUOUS, 2, lambda rows, context: 0.01, capacity,
                   paged=True)
    assert all(s.finished_s is not None and not s.rejected for s in sim.served)


def test_every_paged_request_is_served_or_rejected_and_no_token_is_lost():
    """Seeded streams into small KV rooms: every request finishes with all its tokens (a
    preempted one keeps those it made) or is rejected as larger than the room."""
    import random

    for seed in range(20):
        rng = random.Random(seed)
        capacity = rng.randint(20, 200)
        requests = [Request(rng.uniform(0, 1), rng.randint(1, 60), rng.randint(1, 40))
                    for _ in range(30)]
        sim = simulate(requests, Policy.CONTINUOUS, rng.randint(1, 8),
                       lambda rows, context: 0.01, capacity, lambda p: 0.001, paged=True)
        for s in sim.served:
            too_big = s.request.prompt_tokens + s.request.output_tokens > capacity
            assert s.rejected == too_big, (seed, s)
            assert too_big or (s.finished_s is not None and s.first_token_s is not None)
        made = sum(s.request.output_tokens for s in sim.served if not s.rejected)
        assert sim.row_steps == made  # one token a row a step, none made twice


def test_the_preemptions_are_said_in_words(predicted):
    """A KV room of 64 tokens for 30 requests of up to 30 arriving at once, 4 rows at a
    time: paged continuous batching preempts, and the KV paragraph says how often, where."""
    from batchscope.reports.serving_render import render_markdown
    from batchscope.serving.whatif import WhatIfOptions, what_if

    arriving_at_once = [Request(0.0, 8 + i % 9, 8 + i % 7) for i in range(30)]
    options = WhatIfOptions(rates_per_s=[1000.0], trace=arriving_at_once, caps=[4],
                            kv_memory_bytes=64 * KV_BYTES_PER_TOKEN, paged=True)
    result = what_if(predicted, options)
    (cont,) = [r for r in result.runs if r.policy == Policy.CONTINUOUS]
    assert cont.preemptions > 0 and cont.completed == 30
    from batchscope.records.codec import decode, to_builtins
    from batchscope.records.serving import WhatIf

    assert decode(to_builtins(result), WhatIf) == result  # the band's pairs load back
    assert cont.throughput_band_tokens_per_s is not None
    words = render_markdown(result)
    assert (f"preempted rows (to prefill them again) in 1 of its runs, at most "
            f"{cont.preemptions:,} at cap 4") in words

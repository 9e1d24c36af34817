"""transformers' own serving run for real on a tiny Llama (serving/engines/transformers_engine.py)
and ``diagnose serve --engine transformers`` end to end: structure and counts, never a
speed of this machine."""

from __future__ import annotations

import json
import textwrap

import pytest
from typer.testing import CliRunner

from batchscope.cli import tools_app
from batchscope.errors import UsageError
from batchscope.records.policy import Policy
from batchscope.serving.engines import transformers_engine as te
from batchscope.serving.requests import Request
from tests.serving.conftest import decode_doc

pytest.importorskip("transformers")
runner = CliRunner()

MODEL_FILE = textwrap.dedent('''
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM


    def build_engine_model():
        torch.manual_seed(0)
        return LlamaForCausalLM(LlamaConfig(
            num_hidden_layers=2, hidden_size=64, intermediate_size=128,
            num_attention_heads=4, num_key_value_heads=4, vocab_size=1000,
            max_position_embeddings=512))
''')


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("engine") / "tiny_llama.py"
    path.write_text(MODEL_FILE)
    return path


@pytest.fixture(scope="module")
def model(model_file):
    return te.load_engine_model(str(model_file))


STREAM = [Request(0.0, 12, 3), Request(0.0, 20, 5), Request(0.15, 9, 4)]


@pytest.mark.parametrize("policy", list(Policy))
def test_the_engine_serves_every_request_its_own_tokens_after_it_arrives(model, policy):
    run = te.serve(model, policy, STREAM, 2)
    assert run.policy == policy and run.cap == 2
    assert sorted((s.request.arrival_s, s.request.prompt_tokens, s.output_tokens)
                  for s in run.served) == sorted((r.arrival_s, r.prompt_tokens, r.output_tokens)
                                                 for r in STREAM)
    assert all(s.finished_s >= s.request.arrival_s for s in run.served)
    assert run.output_tokens == 12 and run.span_s > 0 and run.tokens_per_s > 0
    # Every generated token took a forward call of the model (static: one per step of each
    # batch, the prefill's among them; continuous: at least one per step of the longest).
    assert run.forward_calls >= max(r.output_tokens for r in STREAM)
    assert 0 < run.forward_s <= run.span_s + run.startup_s
    if policy == Policy.CONTINUOUS:
        assert run.startup_s > 0
    # Each call kept with what it held: every prompt token and every token after a request's
    # first (which its prefill makes) computed once; generate() computes its padded batch,
    # the first batch two rows of the longer prompt (20 tokens) for 5 tokens, the last
    # request alone for 4.
    calls = run.forwards
    assert len(calls) == run.forward_calls
    assert sum(c.duration_s for c in calls) == pytest.approx(run.forward_s)
    assert all(1 <= c.rows <= 2 and c.rows <= c.query_tokens <= c.kv_tokens for c in calls)
    assert any(c.decode for c in calls) and not all(c.decode for c in calls)
    if policy == Policy.STATIC:
        assert sum(c.query_tokens for c in calls) == 2 * 20 + 2 * 4 + 9 + 3
        first = [c for c in calls if c.rows == 2]
        assert [c.kv_tokens for c in first] == [40, 42, 44, 46, 48]
    else:
        assert sum(c.query_tokens for c in calls) == sum(
            r.prompt_tokens + r.output_tokens - 1 for r in STREAM)


def test_prefill_is_timed_at_each_prompt_length(model):
    points = te.time_prefill(model, [16, 8, 16], repeats=1)
    assert [p.prompt_tokens for p in points] == [8, 16]
    assert all(p.measured_s > 0 for p in points)


def test_prefill_warms_up_once_then_times_its_repeats_through_the_engine():
    calls: list[int] = []

    def model(input_ids, use_cache):  # a stand-in that records each call's prompt length
        calls.append(int(input_ids.shape[1]))

    points = te.time_prefill(model, [8, 4], repeats=3)
    assert [p.prompt_tokens for p in points] == [4, 8]
    assert calls == [4] * (1 + 3) + [8] * (1 + 3)  # one warm-up call, then three timed
    assert all(p.measured_s >= 0 for p in points)


def test_a_file_without_build_engine_model_is_one_sentence(tmp_path):
    path = tmp_path / "plain.py"
    path.write_text("def build_model():\n    return None\n")
    with pytest.raises(te.NoEngineModel, match="defines no build_engine_model"):
        te.load_engine_model(str(path))
    bad = tmp_path / "bad.py"
    bad.write_text("def build_engine_model():\n    return object()\n")
    with pytest.raises(UsageError, match="no transformers generation model"):
        te.load_engine_model(str(bad))


def _report(tmp_path, model_file):
    report = tmp_path / "report.json"
    report.write_text(json.dumps(decode_doc(target=str(model_file))))
    return report


def test_serve_times_prefill_on_the_reports_model_by_default(tmp_path, model_file):
    result = runner.invoke(tools_app, ["serve", str(_report(tmp_path, model_file)),
                                       "--requests", "8", "--rate", "1", "--caps", "2",
                                       "--prompt-tokens", "8:16", "--output-tokens", "2:4"])
    assert result.exit_code == 0, result.output
    doc = json.loads((tmp_path / "serving.json").read_text())
    prefill = doc["prefill"]
    assert prefill["source"] == "model" and doc["engine"] is None
    assert [p["prompt_tokens"] for p in prefill["points"]] == sorted(
        {p["prompt_tokens"] for p in prefill["points"]})
    assert 8 <= prefill["points"][0]["prompt_tokens"] <= prefill["points"][-1]["prompt_tokens"] \
        <= 16


@pytest.mark.slow
def test_serve_with_the_transformers_engine_end_to_end(tmp_path, model_file):
    result = runner.invoke(tools_app, ["serve", str(_report(tmp_path, model_file)),
                                       "--engine", "transformers", "--requests", "8",
                                       "--rate", "2", "--caps", "1,2",
                                       "--prompt-tokens", "8:16", "--output-tokens", "2:4"])
    assert result.exit_code == 0, result.output
    doc = json.loads((tmp_path / "serving.json").read_text())
    engine = doc["engine"]
    assert engine["engine"] == "transformers" and engine["repeats"] == 2
    assert {(p["policy"], p["cap"]) for p in engine["points"]} == {
        (p, c) for p in ("static", "continuous") for c in (1, 2)}
    for point in engine["points"]:
        assert point["requests"] == 2 * point["cap"] and point["measured_s"] > 0
        assert point["engine_forward_calls"] > 0
    assert {c["policy"] for c in engine["costs"]} == {"static", "continuous"}
    # The engine's own decode step, from its calls: static's at the caps' rows.
    steps = {s["policy"]: s for s in engine["steps"]}
    assert [p["rows"] for p in steps["static"]["points"]] == [1, 2]
    # (The step's values are this machine's times, and the part left after the KV slope
    # can go below zero on a noisy run: only what holds anywhere is asserted.)
    assert all(p["forwards"] > 0 for s in steps.values() for p in s["points"])
    assert all(p["engine_step_only_s"] is None or p["engine_step_only_s"] > 0
               for p in engine["points"])
    assert doc["prefill"]["source"] == "model"
    largest = [p for p in engine["points"] if p["cap"] == 2]
    said = "On its own decode calls alone" in (tmp_path / "serving.md").read_text()
    assert said == any(p["engine_step_only_s"] is not None for p in largest)
    # Its runs are kept, and a what-if asked again of them needs no engine.
    again = tmp_path / "again"
    result = runner.invoke(tools_app, ["serve", str(_report(tmp_path, model_file)),
                                       "--engine-runs", str(tmp_path / "engine_runs.json"),
                                       "--requests", "8", "--rate", "2", "--caps", "1,2",
                                       "--prompt-tokens", "8:16", "--output-tokens", "2:4",
                                       "--out", str(again)])
    assert result.exit_code == 0, result.output
    reused = json.loads((again / "serving.json").read_text())
    assert reused["engine"]["points"] == engine["points"]
    assert reused["engine"]["steps"] == engine["steps"]

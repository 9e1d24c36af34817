"""`diagnose hf:MODEL --task TASK` (issue 18): GPT-2, BERT, ViT and T5 families built from
configs saved here (random weights, nothing downloaded), swept for real."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from batchscope.cli import diagnose_app, main
from batchscope.errors import ExitCode

transformers = pytest.importorskip("transformers")

FAST = ["--min-time", "0.05", "--seq-len", "16"]
# GPT-2: 2 layers, 4 heads of 32: a KV cache of 2 x 2 x 4 x 32 float32 per token and row
GPT2 = {"n_layer": 2, "n_embd": 128, "n_head": 4, "vocab_size": 1000, "n_positions": 512,
        "bos_token_id": 0, "eos_token_id": 0}


@pytest.fixture(scope="module")
def configs(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    transformers.GPT2Config(**GPT2).save_pretrained(root / "gpt2")
    transformers.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=2,
                            intermediate_size=128, vocab_size=1000).save_pretrained(root / "bert")
    transformers.ViTConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=2,
                           intermediate_size=128, image_size=32,
                           patch_size=8).save_pretrained(root / "vit")
    transformers.T5Config(num_layers=1, num_decoder_layers=1, d_model=64, d_ff=128,
                          num_heads=2, d_kv=32, vocab_size=1000, decoder_start_token_id=0,
                          pad_token_id=0).save_pretrained(root / "t5")
    return root


def _sweep(tmp_path, target: str, *args: str, batch_sizes: str = "1") -> dict:
    out = tmp_path / "out"
    result = CliRunner().invoke(diagnose_app, [target, "--out", str(out), *FAST,
                                               "--batch-sizes", batch_sizes, *args])
    assert result.exit_code == 0, result.output
    return json.loads((out / "report.json").read_text())


@pytest.mark.parametrize("family, task, unit, mode", [
    ("bert", "seq-cls", "sequence", "inference"),
    ("vit", "image-cls", "image", "inference"),
    ("gpt2", "causal-lm-prefill", "token", "inference"),
    ("t5", "seq2seq-train", "sequence", "train"),
])
@pytest.mark.slow
def test_each_family_sweeps_from_its_config(configs, tmp_path, family, task, unit, mode):
    doc = _sweep(tmp_path, f"hf:{configs / family}", "--task", task)
    assert doc["model"]["unit"] == unit and doc["model"]["mode"] == mode
    assert doc["model"]["target"].endswith("hf_model.py")  # the file written, kept
    for b in doc["batches"]:
        assert b["status"] == "ok" and b["coverage"] > 0.8  # the join holds on HF code
    generated = (tmp_path / "out" / "hf_model.py").read_text()
    assert "random weights" in generated and f"--task {task}" in generated
    if unit == "token":  # a prefill row is --seq-len tokens: throughput in tokens/s
        (b,) = doc["batches"]
        assert doc["model"]["units_per_row"] == 16
        assert b["throughput_per_s"] == pytest.approx(16 * b["batch_size"]
                                                      / b["latency_s"]["median"])


@pytest.mark.slow
def test_decode_counts_the_kv_cache_as_state(configs, tmp_path):
    doc = _sweep(tmp_path, f"hf:{configs / 'gpt2'}", "--task", "causal-lm-decode",
                 "--context", "64", batch_sizes="1,2")
    assert doc["model"]["unit"] == "token" and doc["model"]["contexts"] == [64]
    kv = 2 * 2 * 4 * 64 * 32 * 4  # layers x (k, v) x heads x context x head dim x fp32
    ids = 2 * 8  # the new token's id and its position, int64
    assert [b["bytes"]["state"] for b in doc["batches"]] == [kv + ids, 2 * (kv + ids)]
    assert doc["serving"]["what_if"] is not None  # a decode report feeds the what-if


@pytest.mark.slow
def test_seq_lens_grid_a_causal_lm_over_batch_and_length(configs, tmp_path):
    # The 2-D sweep: batches 1 and 2 at 16 tokens, then both again at 8.
    doc = _sweep(tmp_path, f"hf:{configs / 'gpt2'}", "--task", "causal-lm-train",
                 "--seq-lens", "16,8", batch_sizes="1,2")
    assert doc["model"]["seq_lens"] == [16, 8] and doc["model"]["units_per_row"] == 16
    generated = (tmp_path / "out" / "hf_model.py").read_text()
    assert "SEQ_LENS = [16, 8]" in generated and 'UNITS_PER_ROW = "seq_len"' in generated
    points = {(p["batch_size"], p["seq_len"]): p for p in doc["sequence_grid"]["points"]}
    assert set(points) == {(b, n) for b in (1, 2) for n in (8, 16)}
    for (b, n), p in points.items():
        assert p["status"] == "ok" and p["units_per_row"] == n
        assert p["throughput_per_s"] == pytest.approx(b * n / p["latency_s"])
    assert "Batch size × sequence length" in doc["recommendation"]["explanation"]


@pytest.mark.parametrize("args, words", [
    (["hf:{root}/gpt2"], "needs --task"),
    (["hf:{root}/gpt2", "--task", "summarize"], "unknown --task"),
    (["hf:{root}", "--task", "seq-cls"], "has no config.json"),
    (["hf:no-such-org/no-such-model", "--task", "seq-cls"], "nothing is downloaded"),
    (["{root}/gpt2/config.json", "--task", "seq-cls"], "go with an hf:"),
    (["hf:{root}/gpt2", "--task", "causal-lm-decode", "--seq-lens", "8,16"], "--contexts"),
])
def test_bad_hf_targets_get_one_sentence(configs, tmp_path, capsys, args, words):
    argv = [a.format(root=configs) for a in args] + ["--out", str(tmp_path / "o")]
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == int(ExitCode.USAGE)
    assert words in capsys.readouterr().err.replace("\n", " ")


def test_offline_hint_names_the_command_the_installed_hub_ships():
    # huggingface_hub 1.x and 2.x ship `hf` only: the hint must not name huggingface-cli.
    from importlib import metadata

    from batchscope.errors import UsageError
    from batchscope.integrations.hf_models import resolve

    scripts = {e.name for e in metadata.distribution("huggingface_hub").entry_points
               if e.group == "console_scripts"}
    with pytest.raises(UsageError) as err:
        resolve("hf:no-such-org/no-such-model")
    text = str(err.value)
    command = text.split("fetch it first (")[1].split(" download ")[0]
    assert command in scripts
    assert f"{command} download no-such-org/no-such-model config.json" in text


def test_a_prefill_is_predicted_on_a_target_gpu(configs, tmp_path):
    # issue 50: exit 4, "cannot run on meta tensors ... Tensor.item() cannot be called on
    # meta tensors": with no cache, transformers looked for packed sequences in the position
    # ids. The prefill fills a cache, as an engine's does (and as the decode task predicted).
    out = tmp_path / "out"
    result = CliRunner().invoke(diagnose_app, [
        f"hf:{configs / 'gpt2'}", "--task", "causal-lm-prefill", "--seq-len", "16",
        "--target-gpu", "A100 SXM4 80GB", "--batch-sizes", "1,4", "--out", str(out)])
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "report.json").read_text())
    batches = doc["target"]["batches"]
    assert [b["batch_size"] for b in batches] == [1, 4]
    assert all(b["flops"] > 0 and b["predicted_step_s"] > 0 for b in batches)


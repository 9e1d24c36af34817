"""`diagnose hf:DIR` on transformers' default configs (issue 32, "the first hour of a new
user"): the defaults fit the config, and what cannot fit is one sentence before any sweep.

The configs are transformers' own classes at their defaults (or tiny, where a step runs);
nothing here sweeps: the checks happen in the parent before one, and a step is run through
the generated model file's functions directly.
"""

from __future__ import annotations

import math

import pytest

from batchscope.cli import main
from batchscope.contract import load_model_file
from batchscope.errors import ExitCode, UsageError
from batchscope.integrations.hf_models import (
    DECODE_ROOM_TOKENS,
    HfTask,
    model_file_source,
    write_model_file,
)

transformers = pytest.importorskip("transformers")

# A GPT-2 small enough to run a decode step in milliseconds, with a short position window.
TINY_GPT2 = {"n_positions": 64, "n_layer": 1, "n_embd": 32, "n_head": 2, "vocab_size": 100,
             "bos_token_id": 0, "eos_token_id": 0}


@pytest.fixture(scope="module")
def configs(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf-defaults")
    transformers.GPT2Config().save_pretrained(root / "gpt2")  # n_positions 1024
    transformers.BertConfig().save_pretrained(root / "bert")  # max_position_embeddings 512
    transformers.T5Config().save_pretrained(root / "t5")  # no decoder_start_token_id
    transformers.GPT2Config(**TINY_GPT2).save_pretrained(root / "tiny-gpt2")
    transformers.GPT2Config(**{**TINY_GPT2, "eos_token_id": None,
                               "bos_token_id": None}).save_pretrained(root / "gpt2-no-eos")
    transformers.T5Config(num_layers=1, num_decoder_layers=1, d_model=32, d_ff=64, num_heads=2,
                          d_kv=16, vocab_size=100).save_pretrained(root / "tiny-t5")
    transformers.T5Config(num_layers=1, d_model=32, d_ff=64, num_heads=2, d_kv=16,
                          vocab_size=100, pad_token_id=None,
                          eos_token_id=None).save_pretrained(root / "t5-no-ids")
    return root


def _generated(configs, family: str, task: str, **kwargs) -> str:
    options = {"context": None, "seq_len": 128, **kwargs}
    return model_file_source(f"hf:{configs / family}", task, **options)


def _refused(configs, tmp_path, capsys, *args: str) -> str:
    """``diagnose hf:... ARGS``: exit 4 with one ``error:`` sentence, and no sweep (no
    report); the sentence, on one line."""
    out = tmp_path / "out"
    argv = [a.format(root=configs) for a in args] + ["--out", str(out)]
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == int(ExitCode.USAGE)
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err
    assert not (out / "report.json").exists()  # refused before any sweep
    return " ".join(err.split())


def test_default_decode_context_fits_gpt2_and_the_tokens_decoded_after_it(configs):
    # GPT2Config(): n_positions 1024. The default context was 1024, and the step's new token
    # at position 1024 ended batch 1 as "IndexError: index out of range in self".
    text = _generated(configs, "gpt2", "causal-lm-decode")
    context = 1024 - DECODE_ROOM_TOKENS  # 768: room for the 256 tokens the what-if decodes
    assert f"context={context})" in text and f"CONTEXTS = [{context}]" in text
    # BertConfig(): max_position_embeddings 512 -> 512 - 256 = 256 (was 1024: "index 1024 is
    # out of bounds for dimension 1 with size 512").
    assert "CONTEXTS = [256]" in _generated(configs, "bert", "causal-lm-decode")
    # A hand-written config.json that leaves n_positions at GPT-2's default: the same.
    (configs / "gpt2-minimal").mkdir(exist_ok=True)
    (configs / "gpt2-minimal" / "config.json").write_text('{"model_type": "gpt2"}')
    assert f"CONTEXTS = [{context}]" in _generated(configs, "gpt2-minimal", "causal-lm-decode")


def test_the_default_decode_context_runs_a_step_on_a_tiny_gpt2(configs, tmp_path):
    # n_positions 64: 64 - 256 leaves no room, so half the window, 32 (was 1024).
    path = write_model_file(f"hf:{configs / 'tiny-gpt2'}", "causal-lm-decode", tmp_path,
                            context=None, seq_len=128)
    spec = load_model_file(path)
    assert spec.contexts == [32]
    model = spec.build_model().eval()
    inputs = spec.call_make_inputs(2)
    assert inputs["position_ids"].tolist() == [[32], [32]]
    logits = spec.step_fn(model, inputs)()
    assert tuple(logits.shape) == (2, 1, TINY_GPT2["vocab_size"])


@pytest.mark.parametrize("args, words", [
    # An explicit context the window does not hold: the field and the largest that fits.
    (["hf:{root}/gpt2", "--task", "causal-lm-decode", "--context", "1024"],
     ["--context 1024 does not fit", "n_positions is 1024", "--context 1023 or less"]),
    (["hf:{root}/bert", "--task", "causal-lm-decode", "--context", "600"],
     ["max_position_embeddings is 512"]),
    # ...and every --contexts of a decode sweep's context grid
    (["hf:{root}/tiny-gpt2", "--task", "causal-lm-decode", "--contexts", "16,64"],
     ["--contexts 64 does not fit", "n_positions is 64", "63 or fewer tokens"]),
    # The same check on the sequence tasks' rows.
    (["hf:{root}/bert", "--task", "seq-cls", "--seq-len", "513"],
     ["--seq-len 513 does not fit", "max_position_embeddings is 512"]),
    (["hf:{root}/gpt2", "--task", "causal-lm-train", "--seq-lens", "128,2048"],
     ["--seq-lens 2048 does not fit", "n_positions is 1024"]),
    (["hf:{root}/tiny-gpt2", "--task", "causal-lm-prefill"],  # the default 128 > 64
     ["--seq-len 128 does not fit", "n_positions is 64"]),
    # A task the architecture has no class for, naming the config's model_type.
    (["hf:{root}/gpt2", "--task", "image-cls"],
     ["'gpt2' model (model_type", "no AutoModelForImageClassification", "seq-cls"]),
    (["hf:{root}/t5", "--task", "causal-lm-decode"],
     ["'t5' model (model_type", "no AutoModelForCausalLM", "seq2seq-train"]),
    # Token ids a task needs and the config gives no way to: named, with what to set.
    (["hf:{root}/t5-no-ids", "--task", "seq2seq-train"], ["set decoder_start_token_id"]),
    (["hf:{root}/gpt2-no-eos", "--task", "seq-cls", "--seq-len", "16"], ["set pad_token_id"]),
])
def test_what_does_not_fit_the_config_is_one_sentence_before_any_sweep(
        configs, tmp_path, capsys, args, words):
    sentence = _refused(configs, tmp_path, capsys, *args)
    for word in words:
        assert word in sentence, sentence


def test_lengths_that_fit_the_window_are_kept(configs):
    # The window's last position is a context's new token, and a row may fill the window.
    assert "CONTEXTS = [1023]" in _generated(configs, "gpt2", "causal-lm-decode", context=1023)
    assert "seq_len=512" in _generated(configs, "bert", "seq-cls", seq_len=512)
    # T5's positions are relative: no window, any length.
    assert "seq_len=4096" in _generated(configs, "t5", "seq2seq-train", seq_len=4096)
    with pytest.raises(UsageError, match="from 0 up"):
        _generated(configs, "gpt2", "causal-lm-decode", context=-1)


def test_seq2seq_train_on_a_default_t5_config_starts_the_decoder_as_t5_does(configs):
    # T5Config() in transformers 5 has no decoder_start_token_id: training ended batch 1 as
    # "AttributeError: 'T5Config' object has no attribute 'decoder_start_token_id'". T5
    # starts its decoder from the pad token (0).
    assert "decoder_start_token_id" not in (configs / "tiny-t5" / "config.json").read_text()
    task = HfTask(str(configs / "tiny-t5"), "seq2seq-train", weights=False, seq_len=8,
                  context=0)
    model = task.build_model()
    assert model.config.decoder_start_token_id == 0 == model.config.pad_token_id
    loss = task.run(model, task.make_inputs(2))
    assert loss.ndim == 0 and math.isfinite(loss.item())


def test_seq_cls_on_gpt2_batches_more_than_one_row(configs):
    # GPT2Config() sets no pad_token_id, and GPT2ForSequenceClassification refuses batch 2
    # without one ("Cannot handle batch sizes > 1 if no padding token is defined"); its eos
    # token pads, as transformers' docs set it.
    task = HfTask(str(configs / "tiny-gpt2"), "seq-cls", weights=False, seq_len=8, context=0)
    model = task.build_model()
    assert model.config.pad_token_id == model.config.eos_token_id == 0
    logits = task.run(model, task.make_inputs(2))
    assert tuple(logits.shape) == (2, model.config.num_labels)

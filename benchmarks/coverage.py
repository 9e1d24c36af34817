"""Counting coverage: how much of a step batchscope counts, over standard modules and models.

For each case below, in eval (inference_mode) and in train (forward, the default loss,
backward, AdamW), at one batch size, in one process:

- **counted share**: the share of the profiled op time in ops batchscope counted (its own
  capture and counting passes joined, as the worker runs them; inductor's fused kernels
  count as counted: their ops were counted on the eager module). Measured, so it moves a
  little with the machine; the rest of the table is exact;
- **FLOPs**: batchscope's, ``torch.utils.flop_counter.FlopCounterMode``'s over the same
  step, fvcore's (``FlopCountAnalysis`` of the forward, eval only, MACs doubled) where it
  installs, and an analytic count where one exists (eval: every GEMM and convolution by hand,
  2 FLOPs per multiply-add, attention's two products over the full score matrix);
- **--target-gpu / sweep**: the FLOPs and bytes ``--target-gpu`` counts for the same model on
  meta tensors (``target.predict.count_on_meta``), over the sweep's count.

    python benchmarks/coverage.py                      # every case, batch 4
    python benchmarks/coverage.py --only mha lstm      # cases whose name contains these
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from batchscope.classifiers.coverage import uncounted_times_s
from batchscope.contract import spec_from_callables
from batchscope.hardware.busy import OtherLoad
from batchscope.profiler.capture import capture_steps
from batchscope.profiler.counting import count_model_step
from batchscope.profiler.join import fill_breakdown
from batchscope.profiler.training import default_optimizer, training_step
from batchscope.records import BatchResult, ByteSplit, Status
from batchscope.target.predict import count_on_meta
from benchmarks._common import table
from benchmarks.flop_accounting import as_positional, forward_call, fvcore_flops

SEQ = 64
D = 256
HEADS = 4
FF = 1024
WHOLE = 0.999  # a counted share this close to 1 names no uncounted ops


@dataclass(frozen=True)
class Case:
    """One module or model: how to build it and its inputs at batch b."""

    name: str
    build: Callable[[], nn.Module]
    inputs: Callable[[int], Any]
    analytic: Callable[[int], int] | None = None  # eval FLOPs by hand at batch b
    train: bool = True
    why_not_train: str = ""


class Call(nn.Module):
    """``fn(self.inner, x)`` as a module's forward: a functional call or a module whose
    forward takes more than one argument."""

    def __init__(self, fn: Callable[..., Any], inner: nn.Module | None = None) -> None:
        super().__init__()
        self.inner = inner if inner is not None else nn.Identity()
        self.fn = fn

    def forward(self, x: Any) -> Any:
        return self.fn(self.inner, x)


class Logits(nn.Module):
    """A Hugging Face model returning its logits alone (keyword inputs)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, **inputs: Any) -> torch.Tensor:
        return self.model(**inputs).logits


def _attention(b: int, lq: int, lk: int, d: int) -> int:
    return 2 * 2 * b * lq * lk * d  # q @ k^T and scores @ v


def _linears(model: nn.Module, rows: int, per_sequence: int = 0) -> int:
    """2 FLOPs per weight element per row of every Linear (and HF Conv1D) weight; a
    pooler's and a classifier's rows are one per sequence (``per_sequence``)."""
    total = 0
    for name, m in model.named_modules():
        if isinstance(m, nn.Linear) or type(m).__name__ == "Conv1D":
            head = per_sequence and any(w in name for w in ("pooler", "classifier"))
            total += 2 * (per_sequence if head else rows) * m.weight.numel()
    return total


def _te_analytic(b: int) -> int:
    per_layer = 2 * b * SEQ * (D * 3 * D + D * D + 2 * D * FF) + _attention(b, SEQ, SEQ, D)
    return 2 * per_layer + 2 * b * D * 10


def _rnn(gates: int, layers: int, i: int, h: int) -> Callable[[int], int]:
    def flops(b: int) -> int:
        return sum(2 * SEQ * b * gates * h * ((i if k == 0 else h) + h) for k in range(layers))
    return flops


def _conv(out: tuple[int, ...], cin: int, kernel: int, dims: int) -> Callable[[int], int]:
    def flops(b: int) -> int:  # 2 * output elements * (C_in * kernel volume)
        return 2 * b * math.prod(out) * cin * kernel ** dims
    return flops


def _hf(kind: str) -> Case:
    import transformers as T

    ids = lambda b: {"input_ids": torch.randint(0, 1000, (b, SEQ))}  # noqa: E731
    small = {"hidden_size": D, "num_hidden_layers": 2, "num_attention_heads": HEADS,
             "intermediate_size": FF}
    builders: dict[str, tuple[Callable[[], nn.Module], Callable[[int], Any], bool]] = {
        "bert": (lambda: T.BertForSequenceClassification(T.BertConfig(vocab_size=1000, **small)),
                 ids, True),
        "gpt2": (lambda: T.GPT2LMHeadModel(T.GPT2Config(vocab_size=1000, n_embd=D, n_layer=2,
                                                         n_head=HEADS, n_positions=SEQ)),
                 ids, True),
        "llama": (lambda: T.LlamaForCausalLM(T.LlamaConfig(vocab_size=1000, num_key_value_heads=2,
                                                           **small)), ids, True),
        "t5": (lambda: T.T5ForConditionalGeneration(T.T5Config(
                   vocab_size=1000, d_model=D, d_ff=FF, num_layers=2, num_heads=HEADS,
                   d_kv=D // HEADS, decoder_start_token_id=0)),
               lambda b: {**ids(b), "decoder_input_ids": torch.randint(0, 1000, (b, SEQ // 4))},
               False),
        "vit": (lambda: T.ViTForImageClassification(T.ViTConfig(image_size=64, patch_size=8,
                                                                **small)),
                lambda b: {"pixel_values": torch.randn(b, 3, 64, 64)}, True),
        "whisper": (lambda: T.WhisperForConditionalGeneration(T.WhisperConfig(
                        vocab_size=1000, d_model=D, encoder_layers=2, decoder_layers=2,
                        encoder_attention_heads=HEADS, decoder_attention_heads=HEADS,
                        encoder_ffn_dim=FF, decoder_ffn_dim=FF, num_mel_bins=32,
                        max_source_positions=SEQ, max_target_positions=SEQ, pad_token_id=0,
                        bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)),
                    lambda b: {"input_features": torch.randn(b, 32, 2 * SEQ),
                               "decoder_input_ids": torch.randint(3, 1000, (b, SEQ // 4))},
                    False),
    }
    build, inputs, analytic = builders[kind]

    def model() -> nn.Module:
        torch.manual_seed(0)
        return Logits(build())

    def flops(b: int) -> int:  # every linear's weights per token, plus attention per layer
        m = model()
        if kind == "vit":
            tokens, conv = (64 // 8) ** 2 + 1, 2 * b * 64 * 3 * D * 8 * 8
            return _linears(m, b * tokens, b) + 2 * _attention(b, tokens, tokens, D) + conv
        return _linears(m, b * SEQ, b) + 2 * _attention(b, SEQ, SEQ, D)

    return Case(f"hf {kind}", model, inputs, flops if analytic else None)


def cases() -> list[Case]:
    x = lambda *shape: (lambda b: torch.randn(b, *shape))  # noqa: E731
    te_layer = lambda: nn.TransformerEncoderLayer(D, HEADS, FF, batch_first=True)  # noqa: E731

    class Classifier(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(1000, D)
            self.encoder = nn.TransformerEncoder(te_layer(), 2, enable_nested_tensor=False)
            self.head = nn.Linear(D, 10)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.head(self.encoder(self.embed(ids)).mean(dim=1))

    def quantized() -> nn.Module:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.ao.quantization.quantize_dynamic(
                nn.Sequential(nn.Linear(D, FF), nn.ReLU(), nn.Linear(FF, D)), {nn.Linear},
                dtype=torch.qint8)

    def compiled() -> nn.Module:
        return torch.compile(nn.Sequential(nn.Linear(D, FF), nn.GELU(), nn.Linear(FF, D)))

    mlp = lambda b: 2 * b * (D * FF + FF * D)  # noqa: E731
    return [
        Case("TransformerEncoder classifier", Classifier,
             lambda b: torch.randint(0, 1000, (b, SEQ)), _te_analytic),
        Case("nn.Transformer (enc-dec)", lambda: Call(lambda m, s: m(s, s[:, : SEQ // 4]),
                                                       nn.Transformer(D, HEADS, 1, 1, FF,
                                                                      batch_first=True)),
             x(SEQ, D)),
        Case("nn.MultiheadAttention", lambda: Call(lambda m, q: m(q, q, q)[0],
                                                   nn.MultiheadAttention(D, HEADS,
                                                                         batch_first=True)),
             x(SEQ, D), lambda b: 2 * b * SEQ * 4 * D * D + _attention(b, SEQ, SEQ, D)),
        Case("nn.LSTM (2 layers)", lambda: Call(lambda m, s: m(s)[0], nn.LSTM(D, D, 2,
                                                                          batch_first=True)),
             x(SEQ, D), _rnn(4, 2, D, D)),
        Case("nn.GRU", lambda: Call(lambda m, s: m(s)[0], nn.GRU(D, D, batch_first=True)),
             x(SEQ, D), _rnn(3, 1, D, D)),
        Case("nn.RNN", lambda: Call(lambda m, s: m(s)[0], nn.RNN(D, D, batch_first=True)),
             x(SEQ, D), _rnn(1, 1, D, D)),
        Case("nn.Conv1d", lambda: nn.Conv1d(64, 128, 3), x(64, 256),
             _conv((128, 254), 64, 3, 1)),
        Case("nn.Conv2d", lambda: nn.Conv2d(32, 64, 3), x(32, 32, 32),
             _conv((64, 30, 30), 32, 3, 2)),
        Case("nn.Conv3d", lambda: nn.Conv3d(8, 16, 3), x(8, 16, 16, 16),
             _conv((16, 14, 14, 14), 8, 3, 3)),
        Case("nn.ConvTranspose2d", lambda: nn.ConvTranspose2d(64, 32, 3, stride=2),
             x(64, 16, 16), lambda b: 2 * b * 64 * 16 * 16 * 32 * 9),
        Case("nn.GroupNorm (conv block)", lambda: nn.Sequential(
            nn.Conv2d(32, 64, 3, padding=1), nn.GroupNorm(8, 64), nn.SiLU()), x(32, 32, 32)),
        Case("BatchNorm CNN", lambda: nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)), x(3, 64, 64)),
        Case("MLP (LayerNorm, GELU, dropout)", lambda: nn.Sequential(
            nn.Linear(D, FF), nn.GELU(), nn.Dropout(0.1), nn.Linear(FF, D), nn.LayerNorm(D)),
             x(D), mlp),
        Case("RMSNorm MLP", lambda: nn.Sequential(nn.RMSNorm(D), nn.Linear(D, FF), nn.SiLU(),
                                                   nn.Linear(FF, D)), x(D), mlp),
        Case("nn.EmbeddingBag", lambda: Call(lambda m, i: m(i), nn.EmbeddingBag(10000, D)),
             lambda b: torch.randint(0, 10000, (b, SEQ)), lambda b: b * SEQ * D),
        Case("F.interpolate bilinear", lambda: Call(
            lambda m, t: F.interpolate(m(t), scale_factor=2, mode="bilinear"),
            nn.Conv2d(16, 16, 1)), x(16, 32, 32)),
        Case("F.interpolate nearest", lambda: Call(
            lambda m, t: F.interpolate(m(t), scale_factor=2, mode="nearest"),
            nn.Conv2d(16, 16, 1)), x(16, 32, 32)),
        Case("F.grid_sample", lambda: Call(
            lambda m, t: F.grid_sample(m(t), torch.zeros(t.shape[0], 32, 32, 2,
                                                         device=t.device),
                                       align_corners=False), nn.Conv2d(16, 16, 1)),
             x(16, 32, 32)),
        Case("fused AdamW MLP", lambda: nn.Sequential(nn.Linear(D, FF), nn.ReLU(),
                                                      nn.Linear(FF, D)), x(D), mlp),
        Case("dynamic-quantized Linear", quantized, x(D), mlp, train=False,
             why_not_train="a dynamic-quantized model has no backward"),
        Case("torch.compile'd MLP", compiled, x(D), mlp),
        *(_hf(kind) for kind in ("bert", "gpt2", "llama", "t5", "vit", "whisper")),
    ]


OPTIMIZERS: dict[str, Callable[[nn.Module], torch.optim.Optimizer]] = {
    "fused AdamW MLP": lambda m: torch.optim.AdamW(m.parameters(), fused=True),
}


def _total(ops: list[Any]) -> tuple[int, ByteSplit]:
    split = ByteSplit()
    for op in ops:
        split = split + op.bytes
    return sum(op.flops or 0 for op in ops), split


def measure(case: Case, train: bool, b: int) -> dict[str, Any]:
    """Every figure of one case in one mode."""
    torch.manual_seed(0)
    spec = spec_from_callables(case.build, case.inputs, mode="train" if train else "inference",
                               name=case.name,
                               make_optimizer=OPTIMIZERS.get(case.name) if train else None)
    model = spec.build_model()
    model.train(train)
    inputs = spec.make_inputs(b)
    optimizer = (spec.make_optimizer or default_optimizer)(model) if train else None
    step = (training_step(spec, model, inputs, optimizer) if optimizer
            else spec.step_fn(model, inputs))
    grad = nullcontext if train else torch.inference_mode
    eager = getattr(model, "_orig_mod", model)
    count_step = step if eager is model else (
        training_step(spec, eager, inputs, optimizer) if optimizer else spec.step_fn(eager, inputs))
    out: dict[str, Any] = {}
    with grad():
        for _ in range(2):
            step()
        capture = capture_steps(step, lambda: None, torch.device("cpu"))
        ops = count_model_step(count_step, model, optimizer, inputs, root=eager)
        from torch.utils.flop_counter import FlopCounterMode

        with FlopCounterMode(display=False) as counter:
            count_step()
    result = BatchResult(b, Status.OK)
    fill_breakdown(result, ops, capture.steps)
    op_time = result.op_time_s or 0.0
    uncounted = uncounted_times_s(result)
    out["counted"] = 1 - sum(uncounted.values()) / op_time if op_time else None
    whole = out["counted"] is None or out["counted"] >= WHOLE
    out["holes"] = [] if whole else sorted(uncounted, key=lambda k: -uncounted[k])[:2]
    out["flops"], out["bytes"] = _total(ops)
    out["flop_counter"] = counter.get_total_flops()
    if not train:
        try:
            args, kwargs = forward_call(eager, spec.step_fn(eager, inputs))
            out["fvcore"] = fvcore_flops(eager, as_positional(eager, args, kwargs))[0]
        except Exception as exc:  # noqa: BLE001 - a tool that fails is reported
            out["fvcore"] = f"fails ({type(exc).__name__})"
        out["analytic"] = case.analytic(b) if case.analytic else None
    try:
        meta = count_on_meta(spec, b, torch.float32, peak=False)
        m_flops, m_bytes = _total(meta.ops)
        out["target"] = (m_flops / out["flops"] if out["flops"] else math.nan,
                         m_bytes.total / out["bytes"].total if out["bytes"].total else math.nan)
    except Exception as exc:  # noqa: BLE001 - a model meta tensors cannot run
        out["target"] = f"n/a ({type(exc).__name__})"
    return out


def _flops(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, str):
        return value
    return f"{value / 1e6:,.2f} M"


def _vs(value: Any, ours: int) -> str:
    if not isinstance(value, (int, float)) or not ours:
        return _flops(value)
    return f"{_flops(value)} ({value / ours:.1%})"


def row(case: Case, train: bool, r: dict[str, Any]) -> list[str]:
    counted = "–" if r["counted"] is None else f"{r['counted']:.1%}"
    if r["holes"]:
        counted += " (" + ", ".join(r["holes"]) + ")"
    target = r["target"] if isinstance(r["target"], str) else \
        f"{r['target'][0]:.4f} / {r['target'][1]:.4f}"
    analytic = r.get("analytic")
    ours = r["flops"]
    off = f" ({ours / analytic - 1:+.2%})" if analytic else ""
    return [case.name, "train" if train else "eval", counted, _flops(ours),
            _vs(r["flop_counter"], ours), _vs(r.get("fvcore"), ours) if not train else "–",
            (_flops(analytic) + off) if analytic else "–", target]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--only", nargs="*", default=[])
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    started = time.perf_counter()
    rows = []
    with OtherLoad() as load:
        rows = _rows(args.batch_size, args.only)
    header = ["module", "mode", "counted share of op time", "batchscope FLOPs",
              "FlopCounterMode", "fvcore (forward)", "analytic",
              "--target-gpu / sweep (FLOPs / bytes)"]
    print(f"batch {args.batch_size}, torch {torch.__version__}, "
          f"{time.perf_counter() - started:.0f} s; other processes took {load.note()} of "
          "the CPU\n")
    print(table(header, rows))


def _rows(batch_size: int, only: list[str]) -> list[list[str]]:
    rows = []
    for case in cases():
        if only and not any(w.lower() in case.name.lower() for w in only):
            continue
        for train in (False, True):
            if train and not case.train:
                rows.append([case.name, "train", f"– ({case.why_not_train})", *["–"] * 5])
                continue
            try:
                rows.append(row(case, train, measure(case, train, batch_size)))
            except Exception as exc:  # noqa: BLE001 - one case's failure is a row
                rows.append([case.name, "train" if train else "eval",
                             f"failed: {type(exc).__name__}: {str(exc)[:80]}", *["–"] * 5])
            print(f"{case.name} ({'train' if train else 'eval'}): done", file=sys.stderr,
                  flush=True)
    return rows

if __name__ == "__main__":
    main()

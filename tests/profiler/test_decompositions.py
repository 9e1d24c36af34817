"""Ops with no formula counted by their decomposition on meta twins (issue 48): the fused
fast paths of nn.TransformerEncoderLayer and nn.MultiheadAttention, the CPU LSTM kernel,
and torch's own decompositions. Small modules on the CPU (their fast paths need a real
device), counted only: nothing here times anything."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from batchscope.profiler.counting import _MetaTwins, count_model_step
from batchscope.profiler.decompositions import BATCHSCOPE_EXPANSIONS, expansion_for
from batchscope.records import ByteSplit, CountedOp

aten = torch.ops.aten


def count(model: nn.Module, x: Any, fast_path: bool = True) -> list[CountedOp]:
    """One inference step counted as the sweep counts it; ``fast_path=False`` runs the
    modules' slow path (torch.backends.mha), the ops the fast path's decomposition runs."""
    was = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(fast_path)
    try:
        model.eval()
        with torch.inference_mode():
            return count_model_step(lambda: model(x), model, None, x)
    finally:
        torch.backends.mha.set_fastpath_enabled(was)


def totals(ops: list[CountedOp]) -> tuple[int | None, ByteSplit]:
    split = ByteSplit()
    for op in ops:
        split = split + op.bytes
    flops = [op.flops for op in ops]
    return (None if None in flops else sum(f or 0 for f in flops)), split


class SelfAttention(nn.Module):
    def __init__(self, mha: nn.MultiheadAttention) -> None:
        super().__init__()
        self.mha = mha

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mha(x, x, x)[0]


def test_multihead_attention_fast_path_is_counted_as_its_slow_path() -> None:
    # issue 48: nn.MultiheadAttention(256, 4) in eval at batch 2, seq 64 counted 0 FLOPs
    torch.manual_seed(0)
    model = SelfAttention(nn.MultiheadAttention(256, 4, batch_first=True))
    x = torch.randn(2, 64, 256)
    fast = count(model, x)
    assert [op.name for op in fast] == ["_native_multi_head_attention"]
    flops, split = totals(fast)
    # by hand: qkv 2*128*256*768 + q k^T and attn v 2 * 2*2*4*64*64*64 + out 2*128*256*256
    analytic = 50_331_648 + 8_388_608 + 16_777_216  # 75.5 MFLOP
    assert flops is not None and abs(flops / analytic - 1) < 0.01
    # the same FLOPs and bytes (weights, state, activations) as the slow path it stands for
    assert totals(count(model, x, fast_path=False)) == (flops, split)
    # its weights: in_proj 768x256 + 768, out_proj 256x256 + 256, fp32, each read once
    assert split.weights == 4 * (768 * 256 + 768 + 256 * 256 + 256)


def test_transformer_encoder_fast_path_is_counted_as_its_slow_path() -> None:
    # issue 48: a 4-layer encoder counted 70.7 kFLOP a step: its layers were uncounted
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(128, 4, 512, batch_first=True)
    model = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    x = torch.randn(2, 32, 128)
    fast = count(model, x)
    assert [op.name for op in fast] == ["_transformer_encoder_layer_fwd"] * 2
    assert all(op.flops for op in fast)
    flops, split = totals(fast)
    assert totals(count(model, x, fast_path=False)) == (flops, split)
    # by hand per layer: qkv 2*64*128*384, out 2*64*128*128, ffn 2 * 2*64*128*512,
    # scores and attn v 2 * 2*2*32*32*128
    analytic = 2 * (6_291_456 + 2_097_152 + 16_777_216 + 1_048_576)
    assert flops is not None and abs(flops / analytic - 1) < 0.02


def test_the_cpu_lstm_kernel_is_counted_as_aten_lstm_runs_it_on_meta() -> None:
    torch.manual_seed(0)

    class Lstm(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = nn.LSTM(16, 32, 2, batch_first=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.rnn(x)[0]

    model, x = Lstm(), torch.randn(2, 8, 16)
    ops = count(model, x)
    assert "mkldnn_rnn_layer" in {op.name for op in ops}
    flops, split = totals(ops)
    meta_flops, meta_split = totals(count(model.to("meta"), x.to("meta")))
    assert flops == meta_flops
    # the oneDNN path transposes and stacks a few more small tensors than the meta one
    assert abs(split.total / meta_split.total - 1) < 0.01
    # by hand: 2 * 8*2 steps*rows * 4*32 gates * (16 + 32), then (32 + 32); plus the gates
    gemms = 2 * 16 * 128 * (16 + 32) + 2 * 16 * 128 * (32 + 32)
    assert flops is not None and 0 <= flops / gemms - 1 < 0.03


def test_torch_decompositions_count_one_kernel_ops_by_their_flops_and_own_bytes() -> None:
    x = torch.randn(2, 3, 8, 8)
    model = nn.Upsample(scale_factor=2, mode="bilinear")
    (op,) = count(model, x)
    assert op.name == "upsample_bilinear2d" and op.flops is not None and op.flops > 0
    # one kernel: its own input and output, not the parts' gathers
    assert op.bytes.total == 4 * (2 * 3 * 8 * 8 + 2 * 3 * 16 * 16)
    assert expansion_for(aten.upsample_bilinear2d.default).source == "torch._decomp"
    assert not expansion_for(aten.upsample_bilinear2d.default).bytes_of_parts


def test_batchscope_decompositions_are_keyed_by_op_objects() -> None:
    assert all(isinstance(op, torch._ops.OpOverload) for op in BATCHSCOPE_EXPANSIONS)
    assert expansion_for(aten.mm.default) is None  # torch has none; the formula counts it


def test_meta_twins_keep_views_of_one_storage_and_where_they_come_from() -> None:
    weight, state = torch.randn(4, 6), torch.randn(3)
    twins = _MetaTwins({weight.untyped_storage().data_ptr()},
                       {state.untyped_storage().data_ptr()})
    w_twin, view_twin, s_twin = twins.of([weight, weight[:, 1:3], state])
    assert w_twin.is_meta and view_twin.is_meta and s_twin.is_meta
    assert w_twin.untyped_storage()._cdata == view_twin.untyped_storage()._cdata
    assert (view_twin.shape, view_twin.stride(), view_twin.storage_offset()) == (
        (4, 2), (6, 1), 1)
    assert twins.weights >= {w_twin.untyped_storage()._cdata}
    assert s_twin.untyped_storage()._cdata in twins.state
    assert twins.of(weight) is w_twin  # the same tensor, the same twin: `q is k` holds


@pytest.mark.parametrize("fast_path", [True, False])
def test_a_decomposition_leaves_the_real_step_as_it_was(fast_path: bool) -> None:
    torch.manual_seed(0)
    model = SelfAttention(nn.MultiheadAttention(32, 2, batch_first=True))
    x = torch.randn(1, 4, 32)
    with torch.inference_mode():
        expected = model.eval()(x)
    was = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(fast_path)
    try:
        with torch.inference_mode():
            seen: list[torch.Tensor] = []
            count_model_step(lambda: seen.append(model(x)), model, None, x)
    finally:
        torch.backends.mha.set_fastpath_enabled(was)
    assert torch.allclose(seen[0], expected)


class Recurrent(nn.Module):
    def __init__(self, rnn: nn.Module) -> None:
        super().__init__()
        self.rnn = rnn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.rnn(x)[0]


@pytest.mark.parametrize("kind", ["gru", "rnn", "lstm"])
@pytest.mark.parametrize("train", [False, True])
def test_an_rnn_on_meta_tensors_counts_what_it_counts_on_the_cpu(kind: str, train: bool) -> None:
    # torch's CPU RNNs project every step's input at once (GRU, RNN) or run oneDNN's
    # kernel (LSTM); on meta every step projected its own input: --target-gpu counted 1.7x a
    # GRU's bytes, 4x an LSTM training step's (meta_rnn.py runs the CPU's path there)
    from batchscope.profiler.training import default_optimizer

    def counted(meta: bool) -> tuple[int | None, ByteSplit]:
        torch.manual_seed(0)
        rnn = {"gru": nn.GRU, "rnn": nn.RNN, "lstm": nn.LSTM}[kind](8, 12, 2, batch_first=True)
        model, x = Recurrent(rnn), torch.randn(2, 6, 8)
        if meta:
            model, x = model.to("meta"), x.to("meta")
        model.train(train)
        if not train:
            with torch.inference_mode():
                return totals(count_model_step(lambda: model(x), model, None, x))
        optimizer = default_optimizer(model)

        def step() -> None:
            model(x).square().mean().backward()
            optimizer.step()

        step()  # the optimizer's state and the gradients exist, as in a sweep
        return totals(count_model_step(step, model, optimizer, x))

    (cpu_flops, cpu_bytes), (meta_flops, meta_bytes) = counted(False), counted(True)
    assert cpu_flops is not None and cpu_flops == meta_flops
    # within 0.2% (an LSTM's backward: oneDNN's path copies a few small tensors more)
    assert abs(meta_bytes.total / cpu_bytes.total - 1) < 0.002

"""The formula registry, on shapes alone (meta tensors: no data, no arithmetic run)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils import flop_counter

from batchscope.profiler import fused_formulas  # noqa: F401  (the fused kernels' formulas join REGISTRY)
from batchscope.profiler.formulas import (
    ACCUMULATING,
    HIDDEN_WRITES,
    OVERWRITES_DESTINATION,
    POINTWISE,
    REGISTRY,
    VIEW,
    formula_for,
    hidden_writes,
    indexed_elements,
    reads_destination,
)

aten = torch.ops.aten
# Composite on this CPU build (so counting decomposes it) but a kernel of its own elsewhere.
COMPOSITE_HERE_ONLY = {"_fused_rms_norm"}


def meta(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.empty(shape, device="meta", dtype=dtype)


def flops(func: torch._ops.OpOverload, *args: Any, out: Any = None, **kwargs: Any) -> int | None:
    formula = formula_for(func)
    return None if formula is None else formula.flops(args, kwargs, out)


def touched(func: torch._ops.OpOverload, *args: Any, out: Any = None) -> dict[int, int]:
    formula = formula_for(func)
    assert formula is not None and formula.touched is not None
    return formula.touched(args, {}, out)


def test_every_torch_formula_is_reused() -> None:
    torch_packets = [
        p for p in flop_counter.flop_registry if isinstance(p, torch._ops.OpOverloadPacket)
    ]
    assert torch_packets and all(p in REGISTRY for p in torch_packets)
    a, b = meta(64, 128), meta(128, 32)
    assert (
        flops(aten.mm.default, a, b) == flop_counter.flop_registry[aten.mm](a, b) == 524288
    )  # 2*64*128*32


def test_explicit_formulas_are_not_composite_ops() -> None:
    """Counting decomposes composite ops first, so a formula on one would never run."""
    composite = torch._C.DispatchKey.CompositeImplicitAutograd
    dead = []
    for target in REGISTRY:
        packet = (
            target if isinstance(target, torch._ops.OpOverloadPacket) else target._overloadpacket
        )
        overloads = (
            [getattr(packet, o) for o in packet.overloads()] if target is packet else [target]
        )
        kernels = []
        for overload in overloads:
            try:
                kernels.append(
                    torch._C._dispatch_has_kernel_for_dispatch_key(overload.name(), composite)
                )
            except RuntimeError:  # TorchScript-only overloads (sum.int, ...)
                continue
        if kernels and all(kernels) and packet.__name__ not in COMPOSITE_HERE_ONLY:
            dead.append(packet.__name__)
    assert dead == []


def test_cpu_attention_uses_the_flash_formula() -> None:
    q, k, v = meta(2, 8, 16, 64), meta(2, 8, 128, 64), meta(2, 8, 128, 64)
    expected = flop_counter.flop_registry[aten._scaled_dot_product_flash_attention](q, k, v)
    # q @ k^T: 2 * (2*8) * 16 * 128 * 64 = 4194304, attn @ v the same
    assert (
        flops(aten._scaled_dot_product_flash_attention_for_cpu.default, q, k, v, 0.0, False)
        == expected
        == 8388608
    )
    grad = meta(2, 8, 16, 64)
    backward = aten._scaled_dot_product_flash_attention_for_cpu_backward.default
    assert (
        flops(backward, grad, q, k, v, grad, meta(2, 8, 16), 0.0, False) == 5 * 4194304
    )  # five products


def test_layer_norm_and_batch_norm() -> None:
    x, w, b = meta(4, 10, 32), meta(32), meta(32)
    assert (
        flops(aten.native_layer_norm.default, x, [32], w, b, 1e-5) == 10240
    )  # (4 + 2 + 2) * 4*10*32
    assert (
        flops(aten.native_layer_norm.default, x, [32], None, None, 1e-5) == 7680
    )  # (4 + 2) * 1280
    x, c = meta(8, 16, 4, 4), meta(16)
    # inference: (2 apply + 2 affine) * 8*16*4*4 = 4 * 2048 = 8192; training adds 4 stats: 16384
    assert (
        flops(aten._native_batch_norm_legit_no_training.default, x, c, c, c, c, 0.1, 1e-5) == 8192
    )
    assert flops(aten.native_batch_norm.default, x, c, c, c, c, False, 0.1, 1e-5) == 8192
    assert flops(aten.native_batch_norm.default, x, c, c, c, c, True, 0.1, 1e-5) == 16384
    assert flops(aten._native_batch_norm_legit.no_stats, x, c, c, True, 0.1, 1e-5) == 16384
    backward = aten.native_batch_norm_backward.default
    # training: (10 + 2 + 1) * 2048 = 26624; frozen statistics: (2 + 2 + 1) * 2048 = 10240
    assert flops(backward, x, x, c, c, c, c, c, True, 1e-5, [True, True, True]) == 26624
    assert flops(backward, x, x, c, c, c, c, c, False, 1e-5, [True, True, True]) == 10240


def test_softmax_pooling_reductions() -> None:
    x = meta(4, 8, 16)
    assert flops(aten._softmax.default, x, -1, False) == 2560  # 5 * 4*8*16
    assert (
        flops(aten._log_softmax_backward_data.default, x, x, -1, torch.float32) == 2048
    )  # 4 * 512
    image, pooled = meta(2, 8, 16, 16), meta(2, 8, 7, 7)
    # out 2*8*7*7 = 784 windows of 3*3 = 7056
    assert (
        flops(aten.max_pool2d_with_indices.default, image, [3, 3], [2, 2], out=(pooled, pooled))
        == 7056
    )
    assert (
        flops(aten.avg_pool2d.default, image, [2], out=meta(2, 8, 8, 8)) == 4096
    )  # 1024 windows of 2*2
    assert flops(aten._adaptive_avg_pool2d.default, image, [1, 1]) == 4096  # each input read once
    assert flops(aten.sum.dim_IntList, x, [-1]) == 512  # 4*8*16 adds
    assert flops(aten.max.dim, x, -1) == 512  # a reduction...
    assert formula_for(aten.max.other) is POINTWISE  # ...but max(a, b) is elementwise


def test_generic_rules() -> None:
    assert formula_for(aten.view.default) is VIEW and not VIEW.moves_bytes
    assert formula_for(aten.add.Tensor) is POINTWISE
    assert flops(aten.add.Tensor, meta(64, 128), meta(128), out=meta(64, 128)) == 8192  # 64 * 128
    assert formula_for(aten.masked_fill_.Scalar) is POINTWISE  # untagged in-place of a tagged op
    assert flops(aten._foreach_mul_.Scalar, [meta(3, 4), meta(5)], 0.9) == 17  # 12 + 5
    assert flops(aten._foreach_addcmul_.Scalar, [meta(3, 4)], [meta(3, 4)], [meta(3, 4)]) == 12


def test_data_movement_is_zero_flops_not_uncounted() -> None:
    x = meta(4, 4)
    for func in (
        aten.clone.default,
        aten.copy_.default,
        aten.cat.default,
        aten._to_copy.default,
        aten.fill_.Scalar,
    ):
        formula = formula_for(func)
        assert formula is not None and formula.moves_bytes and formula.flops((x,), {}, x) == 0
    for func in (
        aten.detach.default,
        aten.t.default,
        aten._unsafe_view.default,
        aten.empty.memory_format,
    ):
        formula = formula_for(func)
        assert formula is not None and not formula.moves_bytes


def test_uncounted_ops_have_no_formula() -> None:
    assert formula_for(aten.sort.default) is None
    assert formula_for(aten.topk.default) is None
    assert formula_for(aten.nonzero.default) is None


def test_gathers_touch_the_rows_they_read() -> None:
    table, ids = meta(50257, 768), meta(4, 1, dtype=torch.int64)
    assert flops(aten.embedding.default, table, ids) == 0
    assert touched(aten.embedding.default, table, ids) == {id(table): 3072}  # 4 rows * 768
    index = meta(5, dtype=torch.int64)
    assert touched(aten.index_select.default, table, 0, index) == {id(table): 3840}  # 5 * 768
    assert touched(aten.gather.default, table, 1, meta(4, 2, dtype=torch.int64)) == {id(table): 8}
    logp, target = meta(32, 1000), meta(32, dtype=torch.int64)
    assert touched(aten.nll_loss_forward.default, logp, target, None, 1, -100) == {id(logp): 32}


def test_scatters_touch_the_rows_they_write() -> None:
    cache, source = meta(2, 4, 64, 16), meta(2, 4, 1, 16)
    position = meta(1, dtype=torch.int64)
    assert touched(aten.index_copy_.default, cache, 2, position, source) == {
        id(cache): 128
    }  # 2*4*1*16
    rows = meta(3, dtype=torch.int64)
    assert touched(aten.index_put_.default, cache, [rows], meta(1)) == {
        id(cache): 12288
    }  # 3 * 4*64*16
    assert indexed_elements([2, 4, 64, 16], [None, None, position]) == 128  # 2 * 4 * 1 * 16
    assert indexed_elements([10, 6], [meta(10, dtype=torch.bool)]) == 60  # mask: upper bound 10 * 6


def test_in_place_ops_read_their_destination_unless_they_overwrite_it() -> None:
    # op objects, not names: a misspelt one fails at import, none is silently dropped
    assert all(isinstance(op, (torch._ops.OpOverloadPacket, torch._ops.OpOverload))
               for op in OVERWRITES_DESTINATION + ACCUMULATING)
    x, rows = meta(4, 4), meta(2, dtype=torch.int64)
    for func in (aten.add_.Tensor, aten.mul_.Scalar, aten.lerp_.Scalar, aten.addcdiv_.default,
                 aten.relu_.default, aten.scatter_add_.default, aten.scatter_.reduce):
        assert reads_destination(func, (x,), {})
    for func in (aten.fill_.Scalar, aten.zero_.default, aten.copy_.default, aten.normal_.default,
                 aten.scatter_.src, aten.masked_fill_.Scalar):
        assert not reads_destination(func, (x,), {})
    assert not reads_destination(aten.index_put_.default, (x, [rows], meta(4)), {})
    assert reads_destination(aten.index_put_.default, (x, [rows], meta(4), True), {})


def test_batch_norm_writes_its_running_stats_in_training_only() -> None:
    x, w, b, mean, var = meta(8, 4), meta(4), meta(4), meta(4), meta(4)
    assert aten.native_batch_norm in HIDDEN_WRITES
    args = (x, w, b, mean, var, True, 0.1, 1e-5)
    assert hidden_writes(aten.native_batch_norm.default, args) == [mean, var]
    assert hidden_writes(aten.native_batch_norm.default, (*args[:5], False, 0.1, 1e-5)) == []
    assert hidden_writes(aten.add_.Tensor, (x, x)) == []


def test_matvec_and_dot() -> None:
    mat, vec = meta(24, 40), meta(40)
    assert flops(aten.mv.default, mat, vec) == 1920  # 2 * 24 * 40
    assert flops(aten.addmv.default, meta(24), mat, vec) == 1920
    assert flops(aten.dot.default, vec, vec) == 80  # 2 * 40


@pytest.mark.parametrize(
    "name", ["mm", "addmm", "bmm", "baddbmm", "convolution", "convolution_backward"]
)
def test_matmul_and_conv_come_from_torch(name: str) -> None:
    assert REGISTRY[getattr(aten, name)].flops.__qualname__.startswith("_torch_formula")


def test_formulas_are_registered_against_op_objects_not_names() -> None:
    from batchscope.profiler.formulas import register

    with pytest.raises(TypeError, match="op objects"):
        register("mm")(lambda args, kwargs, out: 0)  # type: ignore[arg-type]  # a name
    with pytest.raises(AttributeError):
        _ = aten.no_such_op_here  # an op object misspelt fails where it is written
    assert all(isinstance(t, (torch._ops.OpOverloadPacket, torch._ops.OpOverload))
               for t in REGISTRY)

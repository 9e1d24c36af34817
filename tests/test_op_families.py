"""Which ops are matmuls, convolutions, probed or collectives has one home (op_families): the
probes, the TF32 roofs, the formula registry and the roofline read it."""

from __future__ import annotations

import pytest

from batchscope.op_families import (
    FAMILIES,
    PROBED_OPS,
    PROBES,
    REPLAYED_OPS,
    Family,
    ProbeKind,
    family,
    is_collective,
    ops_of,
    probed,
)
from batchscope.profiler import (
    device_time,
    formulas,
    fused_formulas,  # noqa: F401  (the fused kernels' formulas join REGISTRY)
    probe,
)


def test_the_probed_ops_are_op_families_own() -> None:
    assert probe.MATMUL_PROBES == probed(ProbeKind.SHAPES) == {"addmm", "mm", "bmm", "baddbmm"}
    assert probed(ProbeKind.REPLAYED) == REPLAYED_OPS
    assert set(PROBES) == PROBED_OPS
    assert probed(ProbeKind.CONV_ARGS) == {"convolution"}


def test_the_tf32_roofs_cover_every_matmul_and_convolution() -> None:
    assert ops_of(Family.MATMUL) == device_time.TF32_MATMUL_OPS
    assert ops_of(Family.CONV) == device_time.TF32_CONV_OPS
    # the names the table brought in beside the ones listed before
    assert {"addbmm", "_scaled_mm"} <= device_time.TF32_MATMUL_OPS
    assert {"conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
            "mkldnn_convolution"} <= device_time.TF32_CONV_OPS


def test_each_formula_carries_its_ops_family() -> None:
    by_name = {getattr(t, "_overloadpacket", t).__name__: f
               for t, f in formulas.REGISTRY.items()}
    assert by_name["mm"].family == Family.MATMUL and by_name["addmm"].family == Family.MATMUL
    assert by_name["_addmm_activation"].family == Family.MATMUL  # registered here, not torch
    assert by_name["convolution"].family == Family.CONV
    assert by_name["convolution_backward"].family == Family.CONV
    assert by_name["native_layer_norm"].family is None and formulas.POINTWISE.family is None
    # one table: every formula's tag is the table's word for its op, and every tagged op
    # is in the table
    for name, formula in by_name.items():
        assert formula.family == family(name), name
    assert all(name in FAMILIES for name, formula in by_name.items()
               if formula.family is not None)


def test_aten_scatter_is_not_a_collective() -> None:
    # issue 32: the decode sample's KV-cache write (k_cache.scatter_(2, slots, k)) was named
    # "scatter_" like c10d's scatter_ and classified communication (NCCL) on one CPU
    import torch

    from batchscope.classifiers.roofline import classify_op
    from batchscope.hardware.types import Ceilings
    from batchscope.profiler.counting import count_step
    from batchscope.profiler.join import StepJoin, group_ops
    from batchscope.records import Bound

    cache, slots, k = torch.zeros(2, 4, 8, 16), torch.zeros(2, 4, 1, 16, dtype=torch.long), \
        torch.randn(2, 4, 1, 16)
    counted = count_step(lambda: cache.scatter_(2, slots, k), weights=[], state=[cache])
    assert [op.name for op in counted] == ["scatter_"]
    assert not is_collective("scatter_") and is_collective("c10d::scatter_")
    (stat,) = group_ops(counted, StepJoin(attributed_s=[1e-5], matched=[True]))
    ceilings = Ceilings(device="cpu", name="test", peak_flops_per_s={"float32": 1e11},
                        bandwidth_bytes_per_s=2e10, overhead_s=1e-6, source="cache")
    assert classify_op(stat, ceilings).bound not in (Bound.COMMUNICATION, Bound.TRANSFER)


def test_a_collective_is_named_with_its_namespace() -> None:
    # one process, one rank: c10d's all-reduce reaches the counting mode as c10d::allreduce_
    import torch
    import torch.distributed as dist

    from batchscope.profiler.counting import count_step

    if not dist.is_available():
        pytest.skip("this torch is built without torch.distributed")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        grad = torch.ones(8)
        counted = count_step(lambda: dist.all_reduce(grad), weights=[], state=[])
    finally:
        dist.destroy_process_group()
    names = [op.name for op in counted]
    assert "c10d::allreduce_" in names and "allreduce_" not in names
    assert all(is_collective(n) for n in names if n.startswith("c10d::"))

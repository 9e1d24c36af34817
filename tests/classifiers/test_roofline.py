"""Classification of single ops against the ceilings measured on this machine."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from batchscope.classifiers.data_parallel import communication_share
from batchscope.classifiers.roofline import classify_op, time_share
from batchscope.hardware import load_or_measure
from batchscope.profiler.counting import count_step
from batchscope.profiler.join import StepJoin, group_ops
from batchscope.records import BatchResult, Bound, ByteSplit, FlagKind, OpStat, Status
from batchscope.reports.flag_text import flag_text


@pytest.fixture(scope="module")
def ceilings():
    return load_or_measure("cpu")


def counted_op(fn, *tensors) -> OpStat:
    with torch.inference_mode():
        ops = count_step(fn, weights=[], state=tensors)
    join = StepJoin(attributed_s=[1.0] * len(ops), matched=[True] * len(ops))
    (stat,) = [s for s in group_ops(ops, join) if s.flops]
    return stat


@pytest.mark.slow
def test_large_fp32_matmul_is_compute_bound(ceilings):
    a, b = torch.randn(4096, 4096), torch.randn(4096, 4096)
    op = classify_op(counted_op(lambda: torch.mm(a, b), a, b), ceilings)
    # FLOPs 2 * 4096**3 = 137438953472; bytes 3 * 4096**2 * 4 = 201326592 (a, b, out)
    assert op.flops == 137_438_953_472 and op.bytes.total == 201_326_592
    assert op.intensity == pytest.approx(682.67, rel=1e-3)  # far above any CPU ridge (~5-20)
    assert op.bound == Bound.COMPUTE


def test_large_add_is_memory_bound(ceilings):
    n = 64 * 2**20
    a, b = torch.ones(n), torch.ones(n)
    op = classify_op(counted_op(lambda: torch.add(a, b), a, b), ceilings)
    # FLOPs n = 67108864; bytes 3 * n * 4 = 805306368: 1/12 FLOP per byte
    assert op.flops == n and op.bytes.total == 3 * n * 4
    assert op.bound == Bound.MEMORY


def test_one_element_add_is_overhead_bound(ceilings):
    a, b = torch.ones(1), torch.ones(1)
    op = classify_op(counted_op(lambda: torch.add(a, b), a, b), ceilings)
    # 1 FLOP and 12 bytes: its roof is ~1e-9 s, far below the ~1 us fixed cost of an op
    assert op.flops == 1 and op.bytes.total == 12
    assert op.bound == Bound.OVERHEAD


def test_faster_than_its_roof_is_flagged(ceilings):
    n = 64 * 2**20
    op = OpStat(op_id="add@0", name="add", input_shapes=[[n], [n]], dtype="float32", module="",
                calls=1, time_s=1e-6, flops=n, bytes=ByteSplit(0, 0, 3 * n * 4))
    classified = classify_op(op, ceilings)  # 805 MB in 1 us would be 805 TB/s
    assert classified.efficiency > 1
    assert any(f.kind == FlagKind.ACCOUNTING_ERROR for f in classified.flags)


def test_an_in_place_op_on_a_tensor_the_cache_holds_is_served_from_cache():
    # issue 13: AdamW's denom.add_(eps) on T5's 32128 x 256 embedding (31.4 MiB) was called
    # an accounting error: its 62.8 MiB of bytes count the tensor twice (read, then written)
    from batchscope.hardware.types import Ceilings

    ceilings = Ceilings(device="cpu", name="test", peak_flops_per_s={"float32": 1e11},
                        bandwidth_bytes_per_s=20e9, overhead_s=1e-6, cache_bytes=32 * 2**20)
    shape = [32128, 256]
    moved = 2 * 32128 * 256 * 4
    op = OpStat(op_id="x", name="add_", input_shapes=[shape], dtype="float32", module="",
                calls=1, time_s=moved / 43.5e9, flops=32128 * 256, bytes=ByteSplit(0, 0, moved))
    (flag,) = classify_op(op, ceilings).flags
    assert flag.kind == FlagKind.SERVED_FROM_CACHE
    assert flag_text(flag).startswith("served from cache")
    assert "31.4 MiB a call" in flag_text(flag)
    # the same bytes out of place (two distinct tensors, 62.8 MiB): twice the cache, so
    # only partly served from it
    out_of_place = dataclasses.replace(op, name="add", input_shapes=[shape, shape])
    (flag,) = classify_op(out_of_place, ceilings).flags
    assert flag.kind == FlagKind.PARTLY_FROM_CACHE
    assert flag_text(flag).startswith("partly served from cache")
    assert "62.8 MiB a call" in flag_text(flag)
    # four times the cache and more: no cache explains it, the bytes must be wrong
    big = dataclasses.replace(out_of_place, bytes=ByteSplit(0, 0, 4 * moved),
                              time_s=4 * moved / 43.5e9)
    (flag,) = classify_op(big, ceilings).flags
    assert flag.kind == FlagKind.ACCOUNTING_ERROR
    assert flag_text(flag).startswith("accounting error: measured")


def test_uncounted_ops_stay_uncounted(ceilings):
    op = OpStat(op_id="sort@0", name="sort", input_shapes=[[8]], dtype="float32", module="",
                calls=1, time_s=1e-5, flops=None, bytes=ByteSplit(0, 0, 64))
    assert classify_op(op, ceilings).bound == Bound.UNCOUNTED


def test_time_share_sums_to_one_with_framework_time():
    ops = [OpStat(op_id=f"{name}@0", name=name, input_shapes=[], dtype="float32", module="",
                  calls=1, time_s=t, flops=1, bytes=ByteSplit(), bound=bound)
           for name, t, bound in (("mm", 6e-3, Bound.COMPUTE), ("add", 2e-3, Bound.MEMORY),
                                  ("sort", 1e-3, Bound.UNCOUNTED))]
    result = BatchResult(1, Status.OK, profiled_step_s=10e-3, op_time_s=9.5e-3, ops=ops,
                         unmatched_ops_s={"foo": 0.5e-3})
    share = time_share(result)
    # compute 6/10, memory 2/10, uncounted (1 + 0.5)/10, framework (10 - 9.5)/10
    assert (share.compute, share.memory) == (pytest.approx(0.6), pytest.approx(0.2))
    assert share.uncounted == pytest.approx(0.15) and share.framework == pytest.approx(0.05)
    assert share.compute + share.memory + share.overhead + share.uncounted + share.framework \
        == pytest.approx(1.0)


def test_a_data_parallel_cpu_step_moves_its_all_reduce_wait_from_framework(ceilings):
    # DDP on gloo waits for its all-reduce outside any aten op: the profile shows the wait
    # as time between ops, and the timed steps (the hook's samples) say how long
    ops = [OpStat(op_id="mm@0", name="mm", input_shapes=[], dtype="float32", module="",
                  calls=1, time_s=6e-3, flops=1, bytes=ByteSplit(), bound=Bound.COMPUTE)]
    result = BatchResult(1, Status.OK, profiled_step_s=10e-3, op_time_s=6e-3, ops=ops,
                         communication_exposed_s=3e-3)
    share = time_share(result)
    assert share.communication == pytest.approx(0.3) and share.framework == pytest.approx(0.1)
    # more than the gaps hold: capped at them
    result = dataclasses.replace(result, communication_exposed_s=9e-3)
    share = time_share(result)
    assert share.communication == pytest.approx(0.4) and share.framework == 0
    # With the hook's samples: the share data_parallel reports, its floor and clamp
    # included (3e-7 s is under the stamps' resolution: 0, not 3e-4 of the step)
    result = dataclasses.replace(result, communication_exposed_s=3e-7,
                                 communication_exposed_samples_s=[3e-7, 3e-7, 5e-3],
                                 communication_step_samples_s=[1e-3, 1e-3, 4e-3])
    assert time_share(result).communication == 0.0
    result = dataclasses.replace(result, communication_exposed_s=2e-3,
                                 communication_exposed_samples_s=[2e-3, 3e-3, 1e-3],
                                 communication_step_samples_s=[10e-3, 10e-3, 10e-3])
    share = time_share(result)
    assert share.communication == pytest.approx(communication_share(result)) == 0.2
    collective = OpStat(op_id="allreduce_@0", name="c10d::allreduce_", input_shapes=[[1024]],
                        dtype="float32", module="", calls=1, time_s=0.0, flops=None,
                        bytes=ByteSplit(0, 0, 4096))
    assert classify_op(collective, ceilings).bound == Bound.COMMUNICATION


def test_a_roof_a_dense_op_beat_is_raised_to_what_it_reached():
    # issue 13, finding 3: a cached fp32 peak of 112 GFLOP/s (a slow minute) while the
    # run's own addmm reached 162: every matmul sat at up to 145% of its roof
    from batchscope.classifiers.analyze import ceiling_flags
    from batchscope.classifiers.roofline import achieved_ceilings
    from batchscope.hardware.types import Ceilings

    ceilings = Ceilings(device="cpu", name="test", peak_flops_per_s={"float32": 112e9},
                        bandwidth_bytes_per_s=20e9, overhead_s=1e-6, source="cache")

    def result(name: str, flops: float, time_s: float, dtype: str = "float32") -> BatchResult:
        op = OpStat(op_id=f"0:{name}#0", name=name, input_shapes=[[128, 384], [384, 1152]],
                    dtype=dtype, module="0", calls=1, time_s=time_s, flops=flops,
                    bytes=ByteSplit(0, 0, 1e6))
        return BatchResult(8, Status.OK, ops=[op])

    fast = result("addmm", 162e9 * 2e-3, 2e-3)
    raised = achieved_ceilings(ceilings, [fast, result("add", 1e12, 2e-3)])
    assert raised.peak_flops_per_s["float32"] == pytest.approx(162e9)
    assert raised.details.achieved_by_ops["float32 matmul"].op_id == "0:addmm#0"
    (flag,) = ceiling_flags(raised)
    assert flag.kind == FlagKind.ROOF_RAISED and flag.op_id == "0:addmm#0"
    assert "raised from 112 to 162 GFLOP/s" in flag_text(flag)
    assert "--recalibrate" in flag_text(flag)
    op = classify_op(fast.ops[0], raised)
    assert op.efficiency == pytest.approx(1.0) and not op.flags
    # not raised: an op under the peak, one too short to time well, an elementwise op,
    # a dtype with no measured peak of its own
    for others in ([result("addmm", 100e9 * 2e-3, 2e-3)], [result("mm", 1e9, 5e-4)],
                   [result("add", 1e12, 2e-3)], [result("mm", 1e12, 2e-3, "float16")]):
        assert achieved_ceilings(ceilings, others) is ceilings

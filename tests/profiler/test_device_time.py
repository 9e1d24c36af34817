"""The live GPU breakdown (issue 15, bugs 1, 4, 6, 7), on faithful fakes of its inputs:
there is no GPU here, so the profiler events and the timing result are built by hand the way
torch hands them over on a GPU."""

from __future__ import annotations

from dataclasses import dataclass

from batchscope.classifiers.roofline import classify_batch
from batchscope.hardware.types import Ceilings
from batchscope.profiler.capture import STEP_TAG, parse_events
from batchscope.profiler.device_time import apply_device_time
from batchscope.records import (
    BatchResult,
    ByteSplit,
    FlagKind,
    LatencyStats,
    OpStat,
    Status,
    TimeBasis,
)


@dataclass
class _Range:
    start: float
    end: float


@dataclass
class _Event:
    """The fields of torch.autograd.profiler_util.FunctionEvent that parse_events reads."""

    name: str
    thread: int
    time_range: _Range
    input_shapes: list
    cpu_parent: object = None
    device_time_total: float = 0.0
    cpu_time_total: float = 0.0


def test_backward_ops_on_the_autograd_thread_are_kept() -> None:
    # On a GPU, autograd runs backward on its own thread: the step tag is on thread 1, the
    # backward mm on thread 7, inside the step's time range.
    step = _Event(STEP_TAG, 1, _Range(0, 100), [])
    forward = _Event("aten::addmm", 1, _Range(5, 20), [[4], [2, 3], [3, 4]], device_time_total=8)
    backward = _Event("aten::mm", 7, _Range(40, 60), [[2, 4], [4, 3]], device_time_total=12)
    elsewhere = _Event("aten::mm", 7, _Range(150, 160), [[2, 4], [4, 3]], device_time_total=1)
    steps = parse_events([step, forward, backward, elsewhere], use_device_time=True)
    assert [op.name for op in steps[0].ops] == ["addmm", "mm"]
    assert steps[0].ops[1].duration_s == 12e-6


def _gpu_ceilings() -> Ceilings:
    return Ceilings(device="cuda", name="fake A100", bandwidth_bytes_per_s=1.5e12,
                    overhead_s=2e-6, peak_flops_per_s={"float32": 19.5e12, "tfloat32": 156e12})


def _result() -> BatchResult:
    gemm = OpStat(op_id="fc:addmm#0", name="addmm", input_shapes=[[4096], [4096, 4096],
                  [4096, 4096]], dtype="float32", module="fc", calls=1, time_s=2e-3,
                  flops=2 * 4096**3, bytes=ByteSplit(activations=3 * 4096 * 4096 * 4))
    add = OpStat(op_id="fc:add#0", name="add", input_shapes=[[4096, 4096], [4096, 4096]],
                 dtype="float32", module="fc", calls=1, time_s=1e-3, flops=4096 * 4096,
                 bytes=ByteSplit(activations=3 * 4096 * 4096 * 4))
    return BatchResult(batch_size=8, status=Status.OK, ops=[gemm, add], op_time_s=3e-3,
                       profiled_step_s=10e-3,  # the CPU span, inflated by the profiler
                       latency_s=LatencyStats(median=5e-3, p25=5e-3, p75=5e-3, n=50))


def test_gpu_shares_use_the_unprofiled_step_and_call_gaps_idle() -> None:
    result = apply_device_time(_result(), 5e-3, tf32_matmul=False, tf32_conv=True)
    share = classify_batch(result, _gpu_ceilings()).time_share
    assert result.time_basis == TimeBasis.DEVICE
    assert result.profiled_step_s == 5e-3  # the timed latency, not the 10 ms CPU span
    assert share.framework == 0.0  # launch gaps are not "Python, dispatch"
    assert abs(share.idle - 0.4) < 1e-9  # 2 ms of 5 ms with no kernel running
    total = share.memory + share.compute + share.overhead + share.uncounted + share.idle
    assert abs(total - 1.0) < 1e-9


def test_fp32_matmul_on_tf32_tensor_cores_gets_the_tf32_roof() -> None:
    # 137 GFLOP in 2 ms is 69 TFLOP/s: beyond the fp32 roof (19.5), within TF32's (156).
    without = apply_device_time(_result(), 5e-3, tf32_matmul=False, tf32_conv=False)
    gemm = classify_batch(without, _gpu_ceilings()).ops[0]
    assert [f.kind for f in gemm.flags] == [FlagKind.ACCOUNTING_ERROR]
    with_tf32 = apply_device_time(_result(), 5e-3, tf32_matmul=True, tf32_conv=False)
    gemm, add = classify_batch(with_tf32, _gpu_ceilings()).ops
    assert gemm.roof_dtype == "tfloat32" and not gemm.flags
    assert add.roof_dtype is None  # elementwise ops never run on tensor cores

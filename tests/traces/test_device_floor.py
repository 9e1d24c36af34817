"""Issue 32: on device time, an op is overhead-bound only where the kernel floor is what it
spends its time on, not wherever its roof is under that floor."""

from __future__ import annotations

from batchscope.classifiers.roofline import classify_batch
from batchscope.hardware.types import Ceilings
from batchscope.records import (
    BatchResult,
    Bound,
    ByteSplit,
    KernelStat,
    OpStat,
    Status,
    TimeBasis,
)

# An A100's datasheet roofs (TF32 156 TFLOP/s, 1.555 TB/s) and the ddp trace's kernel floor
FLOOR_S = 3e-6
A100 = Ceilings(device="cuda", name="NVIDIA A100", peak_flops_per_s={"tfloat32": 156e12},
                bandwidth_bytes_per_s=1.555e12, overhead_s=FLOOR_S, source="datasheet")


def _addmm(time_s: float, launches_per_call: int) -> OpStat:
    """The trace's addmm: 13 calls of [1024, 512] @ [512, 96], 100.7 MFLOP and 2.69 MB
    each (2 × 1024 × 512 × 96 = 100,663,296), so a roof of 1.73 µs a call
    (2.69 MB / 1.555 TB/s), under the 3 µs floor."""
    calls = 13
    return OpStat(op_id="addmm#0", name="addmm", input_shapes=[[96], [1024, 512], [512, 96]],
                  dtype="float32", module="", calls=calls, time_s=time_s,
                  flops=calls * 2 * 1024 * 512 * 96,
                  bytes=ByteSplit(unsplit=calls * 2_687_360), roof_dtype="tfloat32",
                  kernels=[KernelStat(f"kernel{i}", calls, time_s / launches_per_call)
                           for i in range(launches_per_call)])


def _bound(op: OpStat, basis: TimeBasis) -> Bound:
    result = BatchResult(1, Status.OK, ops=[op], profiled_step_s=1e-3, time_basis=basis)
    return classify_batch(result, A100).ops[0].bound


def test_a_kernel_far_above_the_floor_is_placed_by_its_intensity() -> None:
    # 507 µs a step: 39 µs a call, two kernels a call (a GEMM and its split-K reduction):
    # their floors, 2 × 3 µs, are 15% of it; intensity 37.5 FLOP/B under the TF32 ridge of
    # 100 FLOP/B
    slow = _addmm(507e-6, launches_per_call=2)
    assert slow.calls * 2 * FLOOR_S < 0.5 * slow.time_s
    assert _bound(slow, TimeBasis.DEVICE) == Bound.MEMORY


def test_a_kernel_at_the_floor_stays_overhead_bound() -> None:
    # 5 µs a call in one kernel: the 3 µs floor is most of it
    assert _bound(_addmm(13 * 5e-6, launches_per_call=1), TimeBasis.DEVICE) == Bound.OVERHEAD
    # two kernels of 4 µs: 6 µs of floors in 8 µs
    assert _bound(_addmm(13 * 8e-6, launches_per_call=2), TimeBasis.DEVICE) == Bound.OVERHEAD


def test_cpu_time_keeps_the_definition() -> None:
    # On the CPU the fixed cost of a call is paid on top of its work: a roof under it is
    # overhead-bound whatever the op measured (DESIGN.md, Definitions)
    assert _bound(_addmm(507e-6, launches_per_call=2), TimeBasis.CPU) == Bound.OVERHEAD

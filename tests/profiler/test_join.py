"""Joining the counting pass to the capture pass, and op identity across batch sizes."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from batchscope.classifiers.roofline import batch_response
from batchscope.profiler.capture import StepCapture, capture_steps
from batchscope.profiler.counting import count_step
from batchscope.profiler.join import fill_breakdown, join_step
from batchscope.records import BatchResult, ByteSplit, CountedOp, FlagKind, Status, TimedOp
from batchscope.reports.flag_text import flag_text

# From this batch size on, the model runs one extra op before its layers.
EXTRA_OP_FROM = 4


class _SometimesScaled(nn.Module):
    """Two linear layers; at larger batch sizes an extra top-level op runs before them."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(16, 32)  # shapes differ, so each layer is a group of its own
        self.second = nn.Linear(32, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] >= EXTRA_OP_FROM:
            x = torch.addmm(x, x, torch.eye(16))  # same name as the layers' own addmm
        return self.second(torch.relu(self.first(x)))


def _measure(model: nn.Module, batch_size: int) -> BatchResult:
    return _measure_on(model, torch.randn(batch_size, 16))


def _measure_on(model: nn.Module, x: torch.Tensor) -> BatchResult:
    result = BatchResult(x.shape[0], Status.OK)
    with torch.inference_mode():
        capture = capture_steps(lambda: model(x), lambda: None, torch.device("cpu"))
        counted = count_step(lambda: model(x), weights=list(model.parameters()), state=[x],
                             root=model)
    return fill_breakdown(result, counted, capture.steps)


def test_an_op_that_runs_only_at_some_batch_sizes_shifts_no_other_op() -> None:
    model = _SometimesScaled().eval()
    small, large = _measure(model, 2), _measure(model, 8)
    layers = {"first", "second"}
    ids_small = {op.op_id for op in small.ops if op.module in layers and op.name == "addmm"}
    ids_large = {op.op_id for op in large.ops if op.module in layers and op.name == "addmm"}
    assert ids_small == ids_large == {"first:addmm#0", "second:addmm#0"}
    extra = [op for op in large.ops if op.module == "(top level)" and op.name == "addmm"]
    assert [op.op_id for op in extra] == ["(top level):addmm#0"]
    assert not any(op.module == "(top level)" and op.name == "addmm" for op in small.ops)
    # Each layer's batch-response curve has a point at both sizes, never another op's.
    curves = batch_response([small, large])
    for op_id in ids_small:
        assert [p.batch_size for p in curves[op_id]] == [2, 8]
    assert [p.batch_size for p in curves["(top level):addmm#0"]] == [8]


@pytest.mark.slow
def test_a_bert_shaped_training_step_joins_at_batch_1() -> None:
    # issue 13, finding 2: HF BERT/T5 training at batch 1 joined 37-51% of its time (AdamW's
    # sqrt/div/addcdiv_ and backward mm "without a FLOP formula"): a view in the counting
    # pass matched a later view of the same shape and the join skipped the attention. This
    # model written as HF writes attention joined 56% before the fix, 97% after.
    from batchscope.api import Options, diagnose_file
    from tests.conftest import MODELS

    report = diagnose_file(MODELS / "bert_like.py", Options(
        out_dir=None, batch_sizes=[1], min_time_s=0.05, device="cpu"))
    batch = report.batches[0]
    assert batch.coverage is not None and batch.coverage >= 0.9
    unmatched = sum(batch.unmatched_ops_s.values())
    assert unmatched < 0.05 * batch.op_time_s


def test_a_compiled_graphs_extern_kernel_joins_and_its_fused_time_is_kept() -> None:
    # torch.compile on the CPU: the graph calls addmm with out= (one shape more than the
    # eager addmm the counting pass saw); its fused GELU kernel has no event of its own
    from batchscope.profiler.capture import StepCapture
    from batchscope.records import FUSED_KERNELS, ByteSplit, CountedOp, TimedOp

    def counted(name: str, shapes: list[list[int]]) -> CountedOp:
        return CountedOp(name, shapes, "float32", 10, ByteSplit(activations=8))

    eager = [counted("addmm", [[8], [2, 4], [4, 8]]), counted("gelu", [[2, 8]])]
    step = StepCapture(step_s=1e-3, fused_s=2e-4, ops=[
        TimedOp("addmm", [[8], [2, 4], [4, 8], [], [], [2, 8]], 0.0, 5e-4, 5e-4, 0)])
    result = fill_breakdown(BatchResult(2, Status.OK), eager, [step])
    addmm, gelu = result.ops
    assert addmm.time_s == 5e-4 and gelu.time_s == 0.0
    assert result.unmatched_ops_s == {FUSED_KERNELS: 2e-4}
    assert result.op_time_s == 7e-4 and abs(result.coverage - 5 / 7) < 1e-9
    # an exact twin further on wins over the out= variant
    step.ops.append(TimedOp("addmm", [[8], [2, 4], [4, 8]], 6e-4, 7e-4, 1e-4, 0))
    result = fill_breakdown(result, eager, [step])
    assert result.ops[0].time_s == 1e-4


def test_fused_kernels_named_by_inductor_are_listed_apart_and_their_ops_say_so() -> None:
    # With inductor's kernel profiling (the worker turns it on for a compiled model) the
    # fused kernel has an event of its own, named after the aten ops it fused.
    from batchscope.profiler.capture import StepCapture
    from batchscope.profiler.join import fused_ops
    from batchscope.records import (
        FUSED_KERNEL_PREFIX,
        FUSED_KERNELS,
        ByteSplit,
        CountedOp,
        TimedOp,
    )

    names = ["addmm", "gelu", "native_layer_norm", "_log_softmax", "add"]
    assert fused_ops("cpp_fused_gelu_native_layer_norm_0", names) == ["gelu", "native_layer_norm"]
    assert fused_ops("cpp_fused__log_softmax_add_12", names) == ["_log_softmax", "add"]
    assert fused_ops("cpp_fused_mystery_3", names) == []  # not in the counted ops' names
    assert fused_ops("triton_poi_fused_add_0", names) == []  # a GPU kernel: not read here

    eager = [CountedOp("addmm", [[8], [2, 4], [4, 8]], "float32", 10, ByteSplit(activations=8)),
             CountedOp("gelu", [[2, 8]], "float32", 10, ByteSplit(activations=8)),
             CountedOp("native_layer_norm", [[2, 8]], "float32", 10, ByteSplit(activations=8))]
    step = StepCapture(step_s=1e-3, fused_s=3e-4, fused_kernels_s={
        "cpp_fused_gelu_native_layer_norm_0": 2.5e-4}, ops=[
        TimedOp("addmm", [[8], [2, 4], [4, 8], [], [], [2, 8]], 0.0, 5e-4, 5e-4, 0)])
    result = fill_breakdown(BatchResult(2, Status.OK), eager, [step])
    assert result.unmatched_ops_s[FUSED_KERNEL_PREFIX + "cpp_fused_gelu_native_layer_norm_0"] \
        == 2.5e-4
    assert abs(result.unmatched_ops_s[FUSED_KERNELS] - 5e-5) < 1e-12  # the graph's own rest
    _, gelu, norm = result.ops
    for op in (gelu, norm):
        assert op.time_s == 0.0
        (flag,) = [f for f in op.flags if f.kind == FlagKind.FUSED_BY_INDUCTOR]
        assert flag.op_id == op.op_id and flag.batch_size == 2
        assert flag.values["kernels"] == ["cpp_fused_gelu_native_layer_norm_0"]
        assert flag_text(flag).startswith(
            "fused by inductor into cpp_fused_gelu_native_layer_norm_0: its time is the kernel's")
    assert not any(f.kind == FlagKind.FUSED_BY_INDUCTOR for f in result.ops[0].flags)


class _TwoStrides(nn.Module):
    """Two convolutions of the same shapes but strides 1 and 2, each called twice."""

    def __init__(self) -> None:
        super().__init__()
        self.same = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.halving = nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.same(x).sum() + self.same(x).sum() + self.halving(x).sum()
                + self.halving(x).sum())


def test_convolutions_with_other_strides_are_other_ops_and_keep_their_args() -> None:
    from batchscope.op_families import REPLAYED_OPS
    from batchscope.records.codec import decode, to_builtins

    result = _measure_on(_TwoStrides().eval(), torch.randn(2, 3, 16, 16))
    convs = [op for op in result.ops if op.name == "convolution"]
    assert sorted((op.call_args[0], op.calls) for op in convs) == [([1, 1], 2), ([2, 2], 2)]
    assert {op.module for op in convs} == {"same", "halving"}
    # the ops no probe replays have none; an addition's is its alpha (op_families.REPLAYED_OPS)
    assert all(op.call_args is None for op in result.ops
               if op.name not in {"convolution", *REPLAYED_OPS})
    assert {str(op.call_args) for op in result.ops if op.name == "add"} == {"[1]"}
    # report.json: the args come back as they went.
    back = decode(to_builtins(result), BatchResult)
    assert [op.call_args for op in back.ops] == [op.call_args for op in result.ops]


def _timed(name: str, start_s: float, end_s: float, depth: int,
           shapes: list[list[int]] | None = None) -> TimedOp:
    return TimedOp(name, shapes or [[4, 4]], start_s, end_s, end_s - start_s, depth)


def _counted(name: str) -> CountedOp:
    return CountedOp(name, [[4, 4]], "float32", 1, ByteSplit(activations=64))


def test_an_op_after_a_fused_op_of_many_children_is_joined() -> None:
    # issue 48: the encoder layer's fast path runs ~70 ops inside it on the CPU; the next
    # layer was looked for among them only, and the classifier joined 1.4% of its step
    children = [_timed("addmm", 1.0 + i * 0.01, 1.005 + i * 0.01, 1) for i in range(80)]
    step = StepCapture(step_s=4.0, ops=[
        _timed("_transformer_encoder_layer_fwd", 1.0, 2.0, 0), *children,
        _timed("_transformer_encoder_layer_fwd", 2.0, 3.0, 0), _timed("mean", 3.0, 3.5, 0)])
    joined = join_step([_counted("_transformer_encoder_layer_fwd")] * 2 + [_counted("mean")],
                       step)
    assert joined.matched == [True, True, True] and not joined.unmatched_s
    assert joined.attributed_s == [1.0, 1.0, 0.5]


def test_a_gradient_accumulated_in_place_joins_the_add_the_counting_saw() -> None:
    # autograd adds a gradient in place (add_) where no dispatch mode runs, out of place
    # (add) under the counting mode: one op, the same shapes and work
    step = StepCapture(step_s=1.0, ops=[_timed("add_", 0.0, 0.5, 0)])
    joined = join_step([_counted("add")], step)
    assert joined.matched == [True] and not joined.unmatched_s
    # not the other way round: an in-place op counted is not an out-of-place one profiled
    assert join_step([_counted("add_")], StepCapture(1.0, [_timed("add", 0.0, 0.5, 0)])
                     ).matched == [False]

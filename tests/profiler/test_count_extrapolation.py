"""Counting at three batch sizes and carrying the counts to larger ones: checked against the
counting pass itself on real models, and refused where the counts are not linear."""

from __future__ import annotations

import pytest
import torch

from batchscope.contract import load_model_file
from batchscope.profiler.count_extrapolation import CountPlan, agrees, extrapolate
from batchscope.profiler.counting import count_step
from batchscope.records import ByteSplit, CountedOp
from batchscope.tensors import iter_tensors
from tests.conftest import MODELS, ROOT


def counts_of(path: str, batch_size: int) -> list[CountedOp]:
    spec = load_model_file(str(path))
    torch.manual_seed(0)
    model = spec.build_model()
    inputs = spec.make_inputs(batch_size)
    with torch.inference_mode():
        return count_step(lambda: spec.step_fn(model, inputs)(),
                          weights=list(model.parameters()) + list(model.buffers()),
                          state=iter_tensors(inputs), root=model)


@pytest.mark.slow
def test_counts_carried_to_a_larger_batch_are_the_counted_ones():
    # The decode sample (a KV cache that grows with the batch, weights that do not) at
    # 1, 2, 4 fixes the line; at 16 the carried counts match the counting pass op by op.
    sample = ROOT / "samples" / "llm_decode.py"
    plan = CountPlan()
    ran = []
    for b in (1, 2, 4, 16):
        ops, carried_from = plan.counts(b, lambda b=b: ran.append(b) or counts_of(sample, b))
        if b < 16:
            assert carried_from == []
    assert ran == [1, 2, 4] and plan.linear is True and carried_from == [2, 4]
    assert agrees(ops, counts_of(sample, 16))
    assert any(op.bytes.state for op in ops) and any(op.bytes.weights for op in ops)


def test_an_early_exit_model_is_counted_at_every_size():
    # Which layers run depends on the inputs: the op sequence differs between sizes.
    plan = CountPlan()
    ran = []
    for b in (1, 2, 4, 8):
        plan.counts(b, lambda b=b: ran.append(b) or counts_of(MODELS / "early_exit.py", b))
    assert ran == [1, 2, 4, 8] and plan.linear is False


def op(name: str, rows: int, flops: int | None, weights: int, acts: int) -> CountedOp:
    return CountedOp(name, [[rows, 8]], "float32", flops, ByteSplit(weights, 0, acts))


def test_extrapolation_refuses_what_is_not_a_line_in_the_batch():
    a = [op("addmm", 2, 32, 256, 64), op("relu", 2, None, 0, 64)]
    b = [op("addmm", 4, 64, 256, 128), op("relu", 4, None, 0, 128)]
    carried = extrapolate(a, 2, b, 4, 64)
    assert carried == [op("addmm", 64, 1024, 256, 2048), op("relu", 64, None, 0, 2048)]
    assert extrapolate(a, 2, b[:1], 4, 64) is None  # different sequences
    assert extrapolate(a, 2, [op("mm", 4, 64, 256, 128), b[1]], 4, 64) is None
    assert extrapolate([op("addmm", 3, 32, 256, 64)], 2, b[:1], 4, 64) is None  # 3 rows, then 4
    assert extrapolate([op("addmm", 2, 64, 256, 64)], 2, [op("addmm", 4, 32, 256, 128)], 4,
                       64) is None  # FLOPs would go negative
    plan = CountPlan()
    plan.counts(2, lambda: a)
    plan.counts(4, lambda: b)
    plan.counts(8, lambda: [op("addmm", 8, 128, 256, 256), op("relu", 8, None, 0, 999)])
    assert plan.linear is False  # relu's activations broke the line
    plan.reject()
    assert plan.counts(16, lambda: b)[1] == []


def test_a_convolutions_args_are_carried_and_must_agree():
    def conv(rows: int, stride: int) -> CountedOp:
        return CountedOp("convolution", [[rows, 3, 16, 16], [8, 3, 3, 3]], "float32",
                         rows * 100, ByteSplit(864, 0, rows * 50), "stem",
                         [[stride, stride], [1, 1], [1, 1], False, [0, 0], 1])

    carried = extrapolate([conv(2, 2)], 2, [conv(4, 2)], 4, 64)
    assert carried == [conv(64, 2)]  # with its stride, for the probes at 64
    assert extrapolate([conv(2, 1)], 2, [conv(4, 2)], 4, 64) is None
    assert not agrees([conv(4, 1)], [conv(4, 2)])


def test_a_batch_one_that_runs_fewer_ops_is_judged_again_on_the_next_sizes():
    # Batch 1 ran a few ops fewer than the larger sizes (a dimension of 1 needs no copy: a
    # GPT-2 training step counted 702 ops at batch 1, 708 from batch 2 on), so the check at
    # 4 against 1 and 2 failed and every later size was counted, each count about a step.
    # Judged again at 8 against 2 and 4, the line holds, and 16 and 32 are carried.
    def step(rows: int) -> list[CountedOp]:
        ops = [op("addmm", rows, 4 * rows, 256, 16 * rows)]
        return ops if rows == 1 else [op("clone", rows, None, 0, 8 * rows), *ops]

    plan = CountPlan()
    ran = []
    carried = {}
    for b in (1, 2, 4, 8, 16, 32):
        ops, carried[b] = plan.counts(b, lambda b=b: ran.append(b) or step(b))
        assert agrees(ops, step(b))
    assert ran == [1, 2, 4, 8] and plan.linear is True
    assert carried[16] == [4, 8] and carried[32] == [4, 8]

"""Holes in the counts (classifiers/coverage.py) and the flags that read counted work
(issue 48): typed records only, nothing runs."""

from __future__ import annotations

from batchscope.classifiers.analyze import work_varies_with_inputs
from batchscope.classifiers.coverage import HOLE_SHARE, has_hole, uncounted_share, uncounted_work
from batchscope.classifiers.early_stop import EarlyStop
from batchscope.plan import Limits
from batchscope.records import FUSED_KERNEL_PREFIX, BatchResult, ByteSplit, OpStat, Status


def op(name: str, time_s: float, flops: int | None, weights: int = 0, calls: int = 1,
       op_id: str | None = None) -> OpStat:
    return OpStat(op_id or f":{name}#0", name, [], "float32", "", calls, time_s, flops,
                  ByteSplit(weights=weights))


def batch(b: int, ops: list[OpStat], step_s: float = 1.0, weights: int | None = None,
          unmatched: dict[str, float] | None = None) -> BatchResult:
    return BatchResult(b, Status.OK, ops=ops, profiled_step_s=step_s,
                       bytes=ByteSplit(weights=weights if weights is not None
                                       else sum(o.bytes.weights for o in ops)),
                       unmatched_ops_s=unmatched or {})


def test_the_share_of_a_step_in_uncounted_ops() -> None:
    # issue 48: the encoder's fused layers took 96% of the step and nothing said so
    r = batch(1, [op("_transformer_encoder_layer_fwd", 0.90, None), op("addmm", 0.04, 10)],
              unmatched={"mean": 0.03})
    assert uncounted_share(r) == 0.93  # the fused layers and the op the counting never saw
    hole = uncounted_work([r])
    assert hole is not None and hole.batch_size == 1 and hole.share == 0.93
    assert hole.ops == ["_transformer_encoder_layer_fwd", "mean"]
    assert hole.op_shares == [0.90, 0.03]


def test_no_hole_under_the_threshold_nor_in_inductors_fused_kernels() -> None:
    small = batch(1, [op("sort", HOLE_SHARE / 2, None), op("addmm", 0.5, 10)])
    assert uncounted_work([small]) is None and not has_hole(small)
    # a compiled graph's kernels hold the time of ops counted on the eager module
    compiled = batch(1, [op("addmm", 0.0, 10)],
                     unmatched={FUSED_KERNEL_PREFIX + "cpp_fused_gelu_0": 0.8})
    assert uncounted_share(compiled) == 0.0
    # nothing profiled: nothing to judge
    assert uncounted_share(BatchResult(1, Status.OK)) is None


def test_an_embedding_reading_more_rows_is_not_work_that_changed() -> None:
    # issue 48's false flag (12.9 MB of weights at batch 1, 79.9 MB at 512): the same ops
    # at every size, the embedding picking more rows (the counts now cap them at its table)
    def at(b: int) -> BatchResult:
        return batch(b, [op("embedding", 0.1, 0, weights=1024 * 128 * b),
                         op("_transformer_encoder_layer_fwd", 0.8, 10, weights=12_000_000,
                            calls=4)])
    sizes = [at(b) for b in (1, 512)]
    assert sizes[1].bytes.weights > 1.25 * sizes[0].bytes.weights
    assert not work_varies_with_inputs(sizes)


def test_other_layers_reading_the_weights_is_work_that_changed() -> None:
    # an early exit: one block at batch 1, four at batch 2 (the same op group, more calls)
    one = batch(1, [op("addmm", 0.1, 10, weights=100, calls=1)])
    four = batch(2, [op("addmm", 0.4, 40, weights=400, calls=4)])
    assert work_varies_with_inputs([one, four])
    # without an op breakdown the weights alone decide, as before
    bare = [BatchResult(b, Status.OK, bytes=ByteSplit(weights=w)) for b, w in ((1, 1), (2, 4))]
    assert work_varies_with_inputs(bare)


def test_the_predicted_stop_does_not_judge_a_step_with_a_hole() -> None:
    counted = [batch(b, [op("addmm", 0.5, 10)]) for b in (1, 2, 4)]
    holed = [batch(b, [op("_native_multi_head_attention", 0.5, None)]) for b in (1, 2, 4)]
    assert EarlyStop(Limits()).applies(counted)
    assert not EarlyStop(Limits()).applies(holed)

"""Issue acceptance on the real samples: each sample's sweep, classified on this machine."""

from __future__ import annotations

import pytest

from batchscope.api import Options, diagnose_file
from batchscope.records import Bound, Status
from tests.conftest import SAMPLES

MATMULS = {"addmm", "mm", "linear", "bmm"}
COVERAGE_MIN = 0.95


def sweep(tmp_path_factory, sample: str, batch_sizes: list[int], min_time_s: float):
    out = tmp_path_factory.mktemp(sample.replace(".py", ""))
    report = diagnose_file(SAMPLES / sample, Options(out_dir=str(out), batch_sizes=batch_sizes,
                                                     min_time_s=min_time_s, device="cpu"))
    assert all(b.status == Status.OK for b in report.batches), report.batches
    return report


@pytest.fixture(scope="module")
def decode(tmp_path_factory):
    return sweep(tmp_path_factory, "llm_decode.py", [1, 4, 16, 64, 128], 0.3)


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    return sweep(tmp_path_factory, "cnn.py", [1, 2], 0.2)


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    return sweep(tmp_path_factory, "mlp.py", [1, 8], 0.2)


@pytest.mark.slow
def test_decode_batch_one_is_memory_bound(decode):
    first = decode.batches[0]
    matmuls = [op for op in first.ops if op.name in MATMULS]
    assert matmuls and all(op.bound == Bound.MEMORY for op in matmuls)
    assert first.time_share.memory >= 0.5  # 0.78-0.88 on the machines seen so far


def test_decode_attention_never_amortizes(decode):
    attention = {}
    for b in decode.batches:
        ops = [op for op in b.ops if "scaled_dot_product" in op.name]
        assert ops and all(op.bound == Bound.MEMORY for op in ops), b.batch_size
        attention[b.batch_size] = ops[0]
    one = attention[1]
    assert one.bytes.weights == 0 and one.bytes.state > 0
    for b, op in attention.items():
        assert op.bytes.state == b * one.bytes.state  # the KV cache grows linearly with b


def test_decode_weight_bytes_stay_constant(decode):
    # The embedding reads only the gathered rows (one per token), so it is left out.
    weights = {b.batch_size: sum(op.bytes.weights for op in b.ops if op.name != "embedding")
               for b in decode.batches}
    assert len(set(weights.values())) == 1, weights


def test_decode_has_a_predicted_and_a_measured_critical_batch(decode):
    # What holds on any machine: decode shares its weight read, so the roofline predicts a
    # B* above 1, and the measured latency has a knee above batch 1 (where it lies, and
    # whether inside this short sweep, moves with the CPU and its load). How close the two
    # come depends on the CPU (0.80 on a Xeon, 0.24-0.38 on an EPYC):
    # benchmarks/critical_batch.py.
    rec = decode.recommendation
    assert rec.predicted_critical_batch is not None and rec.predicted_critical_batch > 1
    assert rec.measured_knee_batch is not None and rec.measured_knee_batch > 1
    terms = rec.prediction
    assert terms.shared_s / terms.per_row_s == pytest.approx(rec.predicted_critical_batch)


@pytest.mark.slow
def test_cnn_convolutions_are_compute_bound_at_batch_one(cnn):
    first = cnn.batches[0]
    convs = [op for op in first.ops if op.name == "convolution"]
    conv_time = sum(op.time_s for op in convs)
    compute_time = sum(op.time_s for op in convs if op.bound == Bound.COMPUTE)
    assert compute_time >= 0.9 * conv_time  # a 1x1 downsample conv may sit below the ridge
    # Compute-bound ops hold more of the step than memory-bound ones (the share itself moves
    # with the CPU's ridge point: 0.58-0.74 on the machines seen so far).
    assert first.time_share.compute > first.time_share.memory
    assert cnn.recommendation.predicted_compute_bound_batch == 1.0


@pytest.mark.slow
def test_mlp_batch_one_is_mostly_overhead(mlp):
    share = mlp.batches[0].time_share
    assert share.overhead + share.framework >= 0.5
    assert share.overhead + share.framework > share.memory + share.compute


def test_coverage_on_every_sample(decode, cnn, mlp):
    for report in (decode, cnn, mlp):
        for b in report.batches:
            assert b.coverage >= COVERAGE_MIN, (report.model.target, b.batch_size, b.coverage)

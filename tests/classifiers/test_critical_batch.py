from __future__ import annotations

import dataclasses

import pytest

from batchscope.classifiers.critical_batch import (
    measured_knee,
    predict_compute_bound_batch,
    predict_critical_batch,
)
from batchscope.hardware.figures import FamilyPeak
from batchscope.hardware.types import Ceilings
from batchscope.records import BatchResult, ByteSplit, LatencyStats, OpStat, Status

CEIL = Ceilings(device="cpu", name="test", peak_flops_per_s={"float32": 200e9},
                bandwidth_bytes_per_s=40e9, overhead_s=3e-6)  # ridge 5 FLOP/byte


def op(name: str, flops: int, split: ByteSplit) -> OpStat:
    return OpStat(op_id=f"{name}@0", name=name, input_shapes=[], dtype="float32", module="",
                  calls=1, time_s=1e-3, flops=flops, bytes=split)


def counted(b: int, flops: int, weights: int, state: int, acts: int,
            elementwise_bytes: int = 0) -> BatchResult:
    ops = [op("layer", flops, ByteSplit(weights, state, acts))]
    if elementwise_bytes:
        ops.append(op("gelu", elementwise_bytes // 8, ByteSplit(0, 0, elementwise_bytes)))
    return BatchResult(b, Status.OK, ops=ops,
                       latency_s=LatencyStats(0.01, 0.01, 0.01, 5), throughput_per_s=b / 0.01)


def test_weight_only_layer_gives_textbook_b_star():
    # A 1000x1000 fp32 linear: F = 2*b*1e6, weights 4e6 bytes, activations ~0.
    # B* = R * bytes_per_element / 2 = 5 * 4 / 2 = 10, by both definitions:
    # shared t0 = 4e6 / 40e9 = 1e-4 s, per row c = 2e6 / 200e9 = 1e-5 s, t0 / c = 10.
    results = [counted(b, 2 * b * 10**6, 4 * 10**6, 0, 0) for b in (1, 2, 4, 8)]
    knee = predict_critical_batch(results, CEIL)
    assert knee.batch == pytest.approx(10.0)
    assert knee.shared_s == pytest.approx(1e-4) and knee.per_row_s == pytest.approx(1e-5)
    assert predict_compute_bound_batch(results, CEIL, "float32").batch == pytest.approx(10.0)


def test_state_in_its_own_op_lowers_the_knee():
    # The linear above plus attention reading 0.2e6 state bytes per row in a separate op:
    # c = 1e-5 + 0.2e6 / 40e9 = 1.5e-5 s; the attention's shared part is its per-op floor,
    # so t0 = 1e-4 + 3e-6 and B* = 1.03e-4 / 1.5e-5 = 6.87 (ops run one after another);
    # throughput levels off sooner, at 1 / 1.5e-5 instead of 1 / 1e-5 rows/s.
    results = []
    for b in (1, 2, 4, 8):
        r = counted(b, 2 * b * 10**6, 4 * 10**6, 0, 0)
        r.ops.append(op("attention", 10**5 * b, ByteSplit(0, 200_000 * b, 0)))
        results.append(r)
    assert predict_critical_batch(results, CEIL).batch == pytest.approx(103 / 15)


def test_state_that_grows_as_fast_as_flops_makes_b_star_infinite():
    # Attention over a KV cache: per row 2e6 FLOP and 1e6 state bytes; intensity 2 < ridge 5.
    results = [counted(b, 2 * 10**6 * b, 0, 10**6 * b, 0) for b in (1, 2, 4)]
    p = predict_compute_bound_batch(results, CEIL, "float32")
    assert p.batch is None
    assert p.state_bytes_per_row == pytest.approx(1e6)


def test_state_pushes_the_compute_bound_batch_up():
    # Weights 4e6 B and 2e6 FLOP per row as before, plus 0.2e6 state bytes per row:
    # B* = (4e6/40e9) / (2e6/200e9 - 0.2e6/40e9) = 1e-4 / (1e-5 - 5e-6) = 20.
    results = [counted(b, 2 * 10**6 * b, 4 * 10**6, 200_000 * b, 0) for b in (1, 2, 4)]
    assert predict_compute_bound_batch(results, CEIL, "float32").batch == pytest.approx(20.0)


def test_elementwise_ops_on_activations_are_left_out():
    # The same weight-only layer plus a gelu moving 8e6 bytes per row at 0.125 FLOP/byte:
    # the gelu never crosses the ridge whatever b, and must not make B* infinite.
    results = [counted(b, 2 * b * 10**6, 4 * 10**6, 0, 0, elementwise_bytes=8 * 10**6 * b)
               for b in (1, 2, 4, 8)]
    assert predict_compute_bound_batch(results, CEIL, "float32").batch == pytest.approx(10.0)


def test_compute_bound_at_batch_one_gives_one():
    results = [counted(b, 10**12 * b, 10**6, 0, 10**6 * b) for b in (1, 2)]
    assert predict_compute_bound_batch(results, CEIL, "float32").batch == 1.0


def lat(b: int, t: float) -> BatchResult:
    return BatchResult(b, Status.OK, latency_s=LatencyStats(t, t, t, 5), throughput_per_s=b / t)


def test_knee_of_a_flat_then_linear_latency():
    # t(b) = 10 ms * max(1, b / 16)
    results = [lat(b, 0.010 * max(1.0, b / 16)) for b in (1, 2, 4, 8, 16, 32, 64, 128)]
    knee, inside = measured_knee(results)
    assert knee == pytest.approx(16, rel=0.05)
    assert inside


def test_knee_beyond_the_sweep_when_latency_stays_flat():
    _, inside = measured_knee([lat(b, 0.010) for b in (1, 2, 4, 8)])
    assert not inside


# -- the matmul family's roof (issue 32) ------------------------------------------------------
# A machine whose 3x3 convolution outran its matmuls (issue 32's EPYC: 380 against 173
# GFLOP/s): the dtype's peak is the convolution's 400, the matmul roof 100; ridges 10 and
# 2.5 FLOP/byte at 40 GB/s.
FAMILIES = Ceilings(device="cpu", name="test", peak_flops_per_s={"float32": 400e9},
                    bandwidth_bytes_per_s=40e9, overhead_s=3e-6,
                    family_peaks={"matmul": {"float32": FamilyPeak(100e9, "mm")},
                                  "conv": {"float32": FamilyPeak(400e9, "conv2d")}})


def test_a_decoders_matmuls_cross_the_matmul_ridge_not_the_dtypes_peak():
    # The 1000x1000 fp32 linear of the first test as an addmm: B* = R × 4 / 2 with R the
    # matmul ridge, 100e9 / 40e9 = 2.5, so B* = 5 (the dtype's 10 FLOP/byte would say 20).
    # Shared t0 = 4e6 / 40e9 = 1e-4 s, per row 2e6 / 100e9 = 2e-5 s: 1e-4 / 2e-5 = 5.
    results = []
    for b in (1, 2, 4, 8):
        r = counted(b, 2 * b * 10**6, 4 * 10**6, 0, 0)
        results.append(dataclasses.replace(
            r, ops=[dataclasses.replace(o, name="addmm") for o in r.ops]))
    assert predict_critical_batch(results, FAMILIES).batch == pytest.approx(5.0)
    layers = predict_compute_bound_batch(results, FAMILIES, "float32")
    assert layers.batch == pytest.approx(5.0)
    # the roof the crossing used, for the sentence that quotes its ridge
    assert layers.peak_flops_per_s == pytest.approx(100e9)


def test_each_family_computes_at_its_own_roof():
    # An addmm (2e6 FLOP a row, 4e6 weight bytes) beside a convolution (8e6 FLOP a row, 1e6
    # weight bytes): per row 2e6 / 100e9 + 8e6 / 400e9 = 4e-5 s of compute; the weights,
    # 5e6 / 40e9 = 1.25e-4 s: they cross at 1.25e-4 / 4e-5 = 3.125 rows. The per-row FLOPs,
    # 1e7, run at 1e7 / 4e-5 = 250 GFLOP/s between the two roofs.
    results = []
    for b in (1, 2, 4):
        mm = op("addmm", 2 * 10**6 * b, ByteSplit(4 * 10**6, 0, 0))
        conv = op("convolution", 8 * 10**6 * b, ByteSplit(10**6, 0, 0))
        results.append(BatchResult(b, Status.OK, ops=[mm, conv]))
    layers = predict_compute_bound_batch(results, FAMILIES, "float32")
    assert layers.batch == pytest.approx(3.125)
    assert layers.peak_flops_per_s == pytest.approx(250e9)
    # ceilings without family roofs (a report of an older version): the dtype's peak for
    # both, 1e7 / 400e9 = 2.5e-5 s a row: 1.25e-4 / 2.5e-5 = 5 rows, as before
    old = dataclasses.replace(FAMILIES, family_peaks={})
    assert predict_compute_bound_batch(results, old, "float32").batch == pytest.approx(5.0)

"""Which ops are matmuls, convolutions or probed has one home (op_families): the probes, the
TF32 roofs and the formula registry read it."""

from __future__ import annotations

from batchscope.op_families import FAMILIES, PROBES, Family, ProbeKind, family, ops_of, probed
from batchscope.profiler import device_time, formulas, probe


def test_the_probed_ops_are_op_families_own() -> None:
    assert probe.MATMUL_PROBES == probed(ProbeKind.SHAPES) == {"addmm", "mm", "bmm", "baddbmm"}
    assert probed(ProbeKind.REPLAYED) == probe.REPLAYED_OPS
    assert set(PROBES) == probe.PROBED_OPS
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

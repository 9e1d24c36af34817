"""--target-gpu: the performance model on hand-checkable ops, the calibration recomputed
from the recorded traces, and the prediction of small models counted on meta tensors.
Nothing here times anything: every figure follows from shapes and recorded data."""

from __future__ import annotations

import pytest
import torch
from typer.testing import CliRunner

from batchscope.cli import diagnose_app, tools_app
from batchscope.contract import load_model_file
from batchscope.errors import ExitCode, UsageError
from batchscope.hardware.gpu_specs import lookup
from batchscope.records import ByteSplit, CountedOp
from batchscope.records.target import PickRule
from batchscope.target.calibrated import TERMS
from batchscope.target.kernel_time import band, kernel_time, step_time
from batchscope.target.memory import step_peak_bytes
from batchscope.target.predict import critical_batch, diagnose_target, gpu_spec, predict
from tests.conftest import MODELS

GPU_TRACES = MODELS.parent / "data" / "gpu-traces"
runner = CliRunner()


def op(name: str, flops: int, nbytes: int, dtype: str = "float16") -> CountedOp:
    return CountedOp(name=name, input_shapes=[], dtype=dtype, flops=flops,
                     bytes=ByteSplit(activations=nbytes))


def test_a_kernel_is_its_fixed_cost_plus_its_roof_over_its_familys_efficiency():
    t4 = lookup("T4")
    # an fp16 matmul on the tensor cores: 2 TFLOP over 65 TFLOP/s at the GEMMs' efficiency
    k = kernel_time(op("mm", 2 * 10**12, 10**6), t4, TERMS)
    compute = 2e12 / 65e12 / TERMS.gemm.efficiency
    assert k.time_s == pytest.approx(TERMS.gemm.fixed_s + compute)
    assert k.bound == "compute"
    # the same in fp32 on a T4 (no TF32): the plain FP32 units and their own term
    k32 = kernel_time(op("mm", 2 * 10**12, 10**6, "float32"), t4, TERMS)
    assert k32.time_s == pytest.approx(TERMS.gemm_fp32.fixed_s
                                       + 2e12 / 8.1e12 / TERMS.gemm_fp32.efficiency)
    # an elementwise add: bytes over 320 GB/s at the other ops' efficiency
    add = kernel_time(op("add", 10**6, 3 * 10**8), t4, TERMS)
    assert add.time_s == pytest.approx(TERMS.other.fixed_s + 3e8 / 320e9 / TERMS.other.efficiency)
    assert add.bound == "memory"
    # a tiny op is its fixed cost: latency-bound
    assert kernel_time(op("add", 4, 16), t4, TERMS).bound == "latency"


def test_an_fp32_convolution_runs_on_tf32_tensor_cores_where_the_gpu_has_them():
    a100 = lookup("A100 SXM4 80GB")
    conv = op("convolution", 10**12, 10**6, "float32")
    assert kernel_time(conv, a100, TERMS).compute_s == pytest.approx(
        1e12 / a100.peak_flops_per_s["tfloat32"] / TERMS.gemm.efficiency)
    matmul = op("mm", 10**12, 10**6, "float32")  # torch's default: no TF32 for matmuls
    assert kernel_time(matmul, a100, TERMS).compute_s == pytest.approx(
        1e12 / a100.peak_flops_per_s["float32"] / TERMS.gemm_fp32.efficiency)


def test_the_step_waits_for_the_host_when_its_kernels_are_short_and_not_when_long():
    h100 = lookup("H100 SXM5 80GB")
    views = [op("view", 0, 0)] * 5  # no kernel: no host cost charged either
    tiny = [op("add", 4, 16)] * 100
    t = step_time(views + tiny, h100, TERMS)
    assert t.launched_ops == 100
    # launch-bound: the last issue, then its (tiny) kernel
    assert t.step_s == pytest.approx(100 * TERMS.host_s_per_op
                                     + kernel_time(tiny[0], h100, TERMS).time_s)
    long = [op("mm", 10**14, 10**6)] * 3
    t = step_time(long, h100, TERMS)
    kernel = kernel_time(long[0], h100, TERMS).time_s
    assert t.step_s == pytest.approx(TERMS.host_s_per_op + 3 * kernel)  # device-bound
    low, high = band(long, h100, TERMS)
    assert low < t.step_s < high


def test_the_critical_batch_is_where_the_counted_flops_meet_the_bytes():
    from batchscope.records.target import TargetBatch

    def batch(b: int) -> TargetBatch:  # weights 1e9 bytes read once; 1e9 FLOPs a row
        return TargetBatch(b, 1.0, 1.0, 1.0, 1.0, 0, True, 0, 0, 0, 0, 0, 1, 10**9 * b,
                           ByteSplit(weights=10**9, activations=10**6 * b))

    # FLOPs b·1e9 / 1e14 = bytes (1e9 + 1e6·b) / 1e12  ->  b = 1e9 / (1e-2·1e12 - 1e6)... :
    # b·1e-5 = 1e-3 + 1e-6·b  ->  b = 1e-3 / 9e-6 = 111.1
    assert critical_batch([batch(1), batch(64)], 1e14, 1e12) == pytest.approx(1e-3 / 9e-6)
    # bytes growing faster than the FLOPs can catch up: never compute-bound
    assert critical_batch([batch(1), batch(64)], 1e17, 1e12) is None


def test_peak_memory_counts_what_the_step_holds_at_once():
    x = torch.empty(1024, device="meta")  # 4 KiB, resident

    def step() -> torch.Tensor:
        a = x * 2  # 4 KiB
        b = a + 1  # 8 KiB held
        del a
        c = b.sum()  # 4 bytes
        return c

    assert step_peak_bytes(step, [x]) == 2 * 4096


def test_the_calibration_recomputes_from_the_recorded_traces():
    from batchscope.traces.calibrate import calibrate

    terms = calibrate(sorted(GPU_TRACES.glob("*.json.gz")))
    for got, kept in ((terms.gemm, TERMS.gemm), (terms.gemm_fp32, TERMS.gemm_fp32),
                      (terms.other, TERMS.other)):
        assert (got.fixed_s, got.efficiency, got.ops) == pytest.approx(
            (kept.fixed_s, kept.efficiency, kept.ops))
        assert got.median_abs_log_error == pytest.approx(kept.median_abs_log_error, abs=1e-3)
    assert terms.host_s_per_op == pytest.approx(TERMS.host_s_per_op, rel=1e-3)
    assert terms.host_low_s_per_op <= terms.host_s_per_op <= terms.host_high_s_per_op
    assert terms.traces == TERMS.traces


def test_the_gemms_memory_side_recomputes_from_the_ncu_exports():
    """The one GEMM of the exports clearly on the memory side is the 17.6 MB GEMV: its
    10 us DRAM roof against 18.3 us measured, 5.25 us of them the fixed cost."""
    from batchscope.traces.calibrate import calibrate, memory_side_points

    exports = sorted((MODELS.parent / "data" / "ncu").glob("deepseek-ocr-rtx5090/kernel_*/*.csv"))
    points = memory_side_points(exports, "RTX 5090", TERMS.gemm.fixed_s)
    assert [p.name.count("cublasGemv") > 0 for p in points] == [True]
    (gemv,) = points
    assert gemv.roof_s == pytest.approx(17.57e6 / 1.76256e12, rel=1e-3)
    terms = calibrate(sorted(GPU_TRACES.glob("*.json.gz")), exports, "RTX 5090")
    assert terms.gemm_memory is not None and TERMS.gemm_memory is not None
    assert terms.gemm_memory.efficiency == pytest.approx(TERMS.gemm_memory.efficiency)
    assert terms.gemm_memory.efficiency == pytest.approx(
        gemv.roof_s / (gemv.time_s - TERMS.gemm.fixed_s), abs=0.01)
    assert terms.ncu_exports == TERMS.ncu_exports == ["deepseek-ocr-rtx5090"]


def test_a_memory_bound_gemm_runs_at_the_memory_sides_efficiency():
    """A GEMV of 100 MB of fp16 weights on an H100: bytes over 3.35 TB/s at the memory
    side's efficiency, not the GEMM family's; a compute-bound GEMM is unchanged."""
    import dataclasses

    spec = lookup("H100 SXM5 80GB")
    assert spec is not None and TERMS.gemm_memory is not None
    gemv = CountedOp(name="mm", input_shapes=[], dtype="float16", flops=100_000_000,
                     bytes=ByteSplit(weights=100_000_000))
    k = kernel_time(gemv, spec, TERMS)
    assert k.memory_s == pytest.approx(1e8 / 3.35e12 / TERMS.gemm_memory.efficiency)
    alone = dataclasses.replace(TERMS, gemm_memory=None)
    assert kernel_time(gemv, spec, alone).memory_s == pytest.approx(
        1e8 / 3.35e12 / TERMS.gemm.efficiency)
    big = CountedOp(name="mm", input_shapes=[], dtype="float16", flops=10**13,
                    bytes=ByteSplit(activations=10**8))
    assert kernel_time(big, spec, TERMS).time_s == kernel_time(big, spec, alone).time_s


def test_a_fusing_engine_runs_each_stretch_between_gemms_as_one_kernel():
    """mm, add, mul, mm, silu, mm: five kernels fused (the add and mul one), six not; the
    fused one pays one fixed cost and both ops' bytes."""
    from batchscope.target.kernel_time import group_time, kernel_groups

    spec = lookup("H100 SXM5 80GB")
    assert spec is not None

    def op(name: str, nbytes: int) -> CountedOp:
        return CountedOp(name=name, input_shapes=[], dtype="float16", flops=nbytes,
                         bytes=ByteSplit(activations=nbytes))

    ops = [op("mm", 10**6), op("add", 10**6), op("mul", 2 * 10**6), op("mm", 10**6),
           op("silu", 10**6), op("mm", 10**6)]
    groups = kernel_groups(ops, fused=True)
    assert [[o.name for o in g] for g in groups] == [["mm"], ["add", "mul"], ["mm"], ["silu"],
                                                       ["mm"]]
    assert len(kernel_groups(ops)) == 6
    fused = group_time(groups[1], spec, TERMS)
    alone = [kernel_time(o, spec, TERMS) for o in groups[1]]
    assert fused.fixed_s == TERMS.other.fixed_s
    assert fused.time_s == pytest.approx(TERMS.other.fixed_s + sum(
        k.time_s - k.fixed_s for k in alone))
    assert step_time(ops, spec, TERMS, 0.0, fused=True).launched_ops == 5
    assert step_time(ops, spec, TERMS, 0.0, fused=True).step_s == pytest.approx(
        step_time(ops, spec, TERMS, 0.0).step_s - TERMS.other.fixed_s)


def test_the_64gb_h100_has_its_own_bandwidth():
    sheet = lookup("NVIDIA H100 SXM5 64GB")
    assert sheet is not None and sheet.product == "H100 SXM5 64GB"
    assert sheet.bandwidth_bytes_per_s == 1631e9 and sheet.memory_bytes == 64 * 2**30
    assert lookup("NVIDIA H100 80GB HBM3").product == "H100 SXM5 80GB"
    # "NVIDIA H100" alone (as the 64 GB part names itself): told apart by memory
    assert lookup("NVIDIA H100", memory_bytes=65247 * 2**20).product == "H100 SXM5 64GB"
    assert lookup("NVIDIA H100", memory_bytes=81559 * 2**20).product == "H100 SXM5 80GB"
    assert lookup("NVIDIA H100") is None
    with pytest.raises(UsageError, match="names more than one GPU"):
        predict(load_model_file(MODELS / "tiny.py"), "H100")


def test_a_gpu_named_by_words_of_one_product_is_taken_and_several_are_listed():
    # "A100" was refused as unknown; it names four rows: each listed, in table order.
    with pytest.raises(UsageError) as err:
        gpu_spec("A100")
    assert ("(A100 SXM4 80GB, A100 SXM4 40GB, A100 PCIe 80GB, A100 PCIe 40GB)"
            in str(err.value))
    with pytest.raises(UsageError, match=r"\(A100 SXM4 80GB, A100 PCIe 80GB\)"):
        gpu_spec("A100 80GB")
    # Words in any order and spacing, as long as they name one row.
    assert gpu_spec("A100 PCIe 80 GB").product == "A100 PCIe 80GB"
    assert gpu_spec("L40S").product == "L40S 48GB"
    assert gpu_spec("4090").product == "GeForce RTX 4090"
    # A word with digits is whole: "A10" is the A10, never an A100.
    assert gpu_spec("A10").product == "A10 24GB"
    with pytest.raises(UsageError, match="not a GPU in batchscope's datasheet table"):
        gpu_spec("A200")


def test_a_model_is_predicted_from_its_exact_counted_work():
    spec = load_model_file(MODELS / "tiny.py")
    section = predict(spec, "A100 SXM4 80GB", "fp32", [1, 8, 64])
    assert [b.batch_size for b in section.batches] == [1, 8, 64]
    for b in section.batches:  # two linears (2 FLOPs a multiply-add) and the ReLU's 32 a row
        assert b.flops == 2 * b.batch_size * (16 * 32 + 32 * 4) + 32 * b.batch_size
        assert b.bytes.weights > 0 and b.bytes.state == b.batch_size * 16 * 4
        assert b.low_s <= b.predicted_step_s <= b.high_s
        assert b.fits and b.host_s >= b.device_s  # a tiny MLP: launch-bound on any GPU
    assert section.pick == 64 and section.pick_rule == PickRule.NEAR_BEST


def test_a_size_that_does_not_fit_says_so_and_is_never_picked(tmp_path):
    wide = tmp_path / "wide.py"
    wide.write_text(
        "import torch\n"
        "def build_model():\n"
        "    return torch.nn.Linear(8192, 8192)\n"
        "def make_inputs(batch_size):\n"
        "    return torch.randn(batch_size, 8192)\n")
    # batch 2^19 of 8192 fp32 inputs is 16 GiB of input alone: more than a T4 holds
    section = predict(load_model_file(wide), "T4", "fp32", [256, 2**19])
    small, big = section.batches
    assert small.fits and not big.fits
    assert big.predicted_peak_memory_bytes > 16 * 2**30
    assert section.pick == 256


def test_a_model_that_needs_real_data_gets_one_sentence(tmp_path):
    item = tmp_path / "item.py"
    item.write_text(
        "import torch\n"
        "class M(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return x * float(x.sum().item())\n"
        "def build_model():\n"
        "    return M()\n"
        "def make_inputs(batch_size):\n"
        "    return torch.randn(batch_size, 4)\n")
    with pytest.raises(UsageError, match="cannot run on meta tensors at batch 1"):
        predict(load_model_file(item), "T4", "fp32", [1])
    identity = tmp_path / "identity.py"
    identity.write_text("import torch\n"
                        "def build_model():\n    return torch.nn.Identity()\n"
                        "def make_inputs(batch_size):\n    return torch.randn(batch_size, 4)\n")
    with pytest.raises(UsageError, match="no kernel to predict"):
        predict(load_model_file(identity), "T4", "fp32", [1])
    with pytest.raises(UsageError, match="has no bfloat16 peak"):
        predict(load_model_file(MODELS / "tiny.py"), "T4", "bf16", [1])
    with pytest.raises(UsageError, match="not a GPU in batchscope's datasheet table"):
        predict(load_model_file(MODELS / "tiny.py"), "Voodoo 2", "fp32", [1])


def test_the_cli_predicts_and_writes_the_report(tmp_path):
    result = runner.invoke(diagnose_app, [str(MODELS / "tiny.py"), "--target-gpu", "T4",
                                          "--batch-sizes", "1,4", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    report = diagnose_target(MODELS / "tiny.py", "T4", batch_sizes=[1, 4])
    assert report.batches == [] and report.target is not None
    assert report.target.gpu == "T4 16GB"
    import json

    doc = json.loads((tmp_path / "report.json").read_text())
    batch = doc["target"]["batches"][0]
    assert {"batch_size", "predicted_step_s", "low_s", "high_s",
            "predicted_peak_memory_bytes", "fits"} <= set(batch)
    bad = runner.invoke(diagnose_app, [str(MODELS / "tiny.py"), "--target-gpu", "nope"])
    assert bad.exit_code == ExitCode.USAGE
    assert "hardware --list-gpus" in bad.output
    amp = runner.invoke(diagnose_app, [str(MODELS / "tiny.py"), "--target-gpu", "T4",
                                       "--amp", "fp16"])
    assert amp.exit_code == ExitCode.USAGE and "does not take --amp" in amp.output
    listed = runner.invoke(tools_app, ["hardware", "--list-gpus"])
    assert listed.exit_code == 0 and "V100 SXM2 16GB" in listed.output


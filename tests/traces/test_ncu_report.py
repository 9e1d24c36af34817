"""``diagnose ncu``, ``diagnose trace --ncu`` and ``diagnose model.py --ncu`` end to end.

The recorded exports are 20 decode kernels of DeepSeek-OCR on an RTX 5090
(tests/data/ncu/deepseek-ocr-rtx5090, MIT). No GPU ran here: the join to a trace is tested on
an export written from a recorded H100 trace's own kernels, and the live path with a
stand-in for ncu (tests/tools/fake_ncu.py) that runs the step for real on the CPU and writes
a recorded export, as ncu would after profiling it.
"""

from __future__ import annotations

import csv
import io
import json
import stat
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from batchscope.classifiers.kernel_roofline import classify_kernel, counter_roofs
from batchscope.cli import tools_app
from batchscope.errors import ExitCode
from batchscope.records import Bound, FlagKind
from batchscope.records.counter_report import ComputeRoof, CounterRoofs, RoofSource
from batchscope.records.counters import FlopSource, FlopTerm, KernelCounters, NcuExport
from batchscope.reports.flag_text import flag_text
from batchscope.reports.json_report import load_report
from batchscope.traces.analysis import kernel_launches, trace_result
from batchscope.traces.diagnose import diagnose_traces
from batchscope.traces.kineto import load_trace
from batchscope.traces.ncu_diagnose import diagnose_ncu
from batchscope.traces.timeline import build_timeline

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "tests" / "data" / "ncu" / "deepseek-ocr-rtx5090"
EXPORTS = sorted(RECORDED.glob("kernel_*/ncu.*.csv"))
H100_VIT = ROOT / "tests" / "data" / "gpu-traces" / "h100-vit-nsfw-inference.json.gz"


def _labels() -> dict[str, str]:
    """That project's own labels (SM% against DRAM%, not a roofline), by kernel folder."""
    with open(RECORDED / "analysis" / "classification_summary.csv") as f:
        return {row["kernel_id"]: row["classification"] for row in csv.DictReader(f)}


@pytest.fixture(scope="module")
def rtx5090(tmp_path_factory):
    out = tmp_path_factory.mktemp("ncu")
    return diagnose_ncu(EXPORTS, gpu="NVIDIA GeForce RTX 5090", out_dir=str(out)), out


def test_every_recorded_kernel_is_placed_under_the_datasheets_roofs(rtx5090):
    report, out = rtx5090
    counters = report.counters
    assert counters is not None and len(counters.kernels) == 20 == len(_labels())
    roofs = counters.roofs
    assert roofs.source == RoofSource.DATASHEET and roofs.product == "GeForce RTX 5090"
    assert roofs.tensor_dtype == "bfloat16" and roofs.tensor_flops_per_s == 209.5e12
    assert roofs.floor_s == min(k.duration_s for k in counters.kernels)
    by_folder = {Path(k.files[0]).parent.name: k for k in counters.kernels}
    # The big bf16 GEMMs: 12.5 and 45.9 GFLOP on the tensor pipe at ~113 TFLOP/s, 717 FLOP
    # per DRAM byte, far past the bf16 ridge (117): compute-bound at 54% of the roof.
    gemm = by_folder["kernel_0016_d5dc19ab8d6c32669179c164a1a4c9a5"]
    assert gemm.compute_roof == ComputeRoof.TENSOR and gemm.bound == Bound.COMPUTE
    assert gemm.tensor_flops == pytest.approx(45_902_462_976)
    assert gemm.intensity == pytest.approx(45_902_462_976 / (63.77e6 + 197.38e3), rel=1e-3)
    assert 0.5 < gemm.efficiency < 0.6
    # A 32 kB copy in 4.7 µs: its DRAM roof's time is 18 ns, under the 2.88 µs floor.
    copy = by_folder["kernel_0004_16864015d8ec27ba6cf878e5c5ff03d9"]
    assert copy.bound == Bound.OVERHEAD and copy.flops == 0
    # A bf16 GEMV reads every weight once: one FLOP per byte, memory-bound.
    gemv = by_folder["kernel_0002_1faa81623a925a9e2084e148672df203"]
    assert gemv.bound == Bound.MEMORY and gemv.intensity == pytest.approx(1.0, rel=0.01)
    # Every kernel that project calls compute-bound and that does floating-point work is
    # compute-bound here too (its copy with no FLOP is not; docs/method.md has the table).
    labels = _labels()
    for folder, kernel in by_folder.items():
        if labels[folder] == "compute_bound" and kernel.flops:
            assert kernel.bound == Bound.COMPUTE
    assert load_report(str(out / "report.json")).counters == counters


def test_without_a_gpu_named_the_exports_own_roofs_are_used_and_the_page_says_what_they_miss(
        tmp_path):
    report = diagnose_ncu(EXPORTS, out_dir=str(tmp_path))
    roofs = report.counters.roofs
    assert roofs.source == RoofSource.NCU_ROOFLINE and roofs.tensor_flops_per_s is None
    # ncu's own DRAM roof for this GPU at the clock it measured, within 10% of the datasheet
    assert roofs.dram_bytes_per_s == pytest.approx(1.792e12, rel=0.1)
    page = (tmp_path / "report.html").read_text()
    assert "no tensor-core roof" in page and "--gpu" in page
    assert "&lt;" in page and "enable_if<!T7" not in page  # kernel names are escaped
    summary = (tmp_path / "summary.md").read_text()
    assert summary.startswith("### batchscope · deepseek-ocr-rtx5090 (140 ncu exports)")
    assert "| memory |" in summary and "| compute |" in summary


def test_bad_input_gets_one_sentence_and_exit_4(tmp_path):
    not_csv = tmp_path / "trace.json"
    not_csv.write_text('{"traceEvents": []}')
    result = CliRunner().invoke(tools_app, ["ncu", str(not_csv), "--out", str(tmp_path / "o")])
    assert result.exit_code == ExitCode.USAGE
    assert "is not a Nsight Compute CSV export" in result.output
    assert not (tmp_path / "o" / "report.json").exists()
    result = CliRunner().invoke(tools_app, ["ncu", str(EXPORTS[0]), "--gpu", "Voodoo 5",
                                            "--out", str(tmp_path / "o")])
    assert result.exit_code == ExitCode.USAGE and "not a GPU in batchscope's" in result.output


def _kernel(flops: float, dram_bytes: float, duration_s: float, tensor: bool = False
            ) -> KernelCounters:
    terms = [FlopTerm(FlopSource.TENSOR_OPS if tensor else FlopSource.SASS_FP32,
                      ["sm__ops_path_tensor_src_fp16_dst_fp32.sum" if tensor else "x"], flops)]
    return KernelCounters("0", "1", "k", "k", duration_s=duration_s, dram_bytes=dram_bytes,
                          flops=flops, flops_by_source=terms, flops_complete=True)


def test_the_bound_follows_the_roofs_of_the_pipe_the_flops_ran_on():
    roofs = CounterRoofs(RoofSource.DATASHEET, dram_bytes_per_s=1e12, fp32_flops_per_s=50e12,
                         tensor_flops_per_s=400e12, tensor_dtype="float16", floor_s=3e-6)
    # 200 FLOP/byte: past the FP32 ridge (50) but under the tensor ridge (400)
    fp32 = classify_kernel(_kernel(2e11, 1e9, 5e-3), roofs)
    tensor = classify_kernel(_kernel(2e11, 1e9, 5e-3, tensor=True), roofs)
    assert fp32.bound == Bound.COMPUTE and tensor.bound == Bound.MEMORY
    assert tensor.roof_time_s == pytest.approx(1e-3) and tensor.efficiency == pytest.approx(0.2)
    # a launch whose roofs need 1 µs, under a 3 µs floor that is most of its 4 µs
    assert classify_kernel(_kernel(1e6, 1e6, 4e-6), roofs).bound == Bound.OVERHEAD
    # the same work in 100 µs is not held by the floor: a slow memory-bound kernel
    slow = classify_kernel(_kernel(1e6, 1e6, 100e-6), roofs)
    assert slow.bound == Bound.MEMORY and slow.efficiency == pytest.approx(0.01)
    # nothing measured of its bytes: not placed
    unknown = KernelCounters("0", "1", "k", "k", duration_s=1e-3)
    assert classify_kernel(unknown, roofs).bound == Bound.UNCOUNTED
    # the floor is the shortest launch only with enough launches to measure it
    few = NcuExport([_kernel(1.0, 1.0, 9e-6)], [])
    assert counter_roofs(few, None) is None  # no roofline section, no datasheet


# -- diagnose trace --ncu ----------------------------------------------------------------
RAW_HEADER = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context",
              "Stream", "Block Size", "Grid Size", "Device", "CC", "dram__bytes_read.sum",
              "dram__bytes_write.sum", "gpu__time_duration.sum",
              "sm__ops_path_tensor_src_bf16_dst_fp32.sum",
              "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum")
RAW_UNITS = ("",) * 11 + ("byte", "byte", "nsecond", "", "inst")


def _ncu_style(name: str) -> str:
    """A Kineto kernel name as ncu demangles it."""
    return name.replace("(anonymous namespace)", "<unnamed>")


def _export_of_trace(path: Path, bytes_scale: dict[str, float], keep: float = 1.0) -> str:
    """A --page raw export of every kernel launch of the trace's step, in launch order:
    each launch's DRAM bytes and FLOPs its op's modelled ones shared over its launches,
    the bytes of the ops in ``bytes_scale`` scaled; only the first ``keep`` of the launches
    (ncu's --launch-count)."""
    trace = load_trace(path)
    timeline = build_timeline(trace)
    ops = {o.op_id: o for o in trace_result(trace, timeline, 1, True).ops}
    launches = kernel_launches(trace, timeline)
    per_op = {op_id: sum(1 for o, _ in launches if o == op_id) for op_id in ops}
    rows = []
    for i, (op_id, event) in enumerate(launches[: int(len(launches) * keep)]):
        op = ops[op_id]
        share = 1 / per_op[op_id]
        dram = op.bytes.total * share * bytes_scale.get(op_id, 1.0)
        flops = (op.flops or 0) * share
        tensor = "gemm" in event["name"] or "flash" in event["name"]
        rows.append((str(i), "4242", "python", "h100", _ncu_style(event["name"]), "1", "7",
                     "(128, 1, 1)", "(132, 1, 1)", "0", "9.0", f"{dram * 0.75:,.0f}",
                     f"{dram * 0.25:,.0f}", f"{float(event['dur']) * 1e3:,.0f}",
                     f"{flops:,.0f}" if tensor else "0",
                     "0" if tensor else f"{flops / 2:,.0f}"))
    text = io.StringIO()
    writer = csv.writer(text, quoting=csv.QUOTE_ALL)
    writer.writerows([RAW_HEADER, RAW_UNITS, *rows])
    return text.getvalue()


def test_a_traces_ops_are_joined_to_their_kernels_counters_by_name_and_order(tmp_path):
    # addmm#0's kernels measured at a quarter of the modelled bytes (as if its weights came
    # from L2): 4x the modelled intensity puts it past the H100's bf16 ridge.
    gemm_op = "(top level):addmm#0"
    export = tmp_path / "ncu.csv"
    export.write_text(_export_of_trace(H100_VIT, {gemm_op: 0.25}))
    report = diagnose_traces([H100_VIT], [16], str(tmp_path / "out"), [export])
    counters = report.counters
    assert counters.batch_size == 16 and len(counters.kernels) == 154
    ops = {o.op_id: o for o in counters.ops}
    assert len(ops) == 13 and all(o.matched == o.launches for o in ops.values())
    gemm = ops[gemm_op]
    assert gemm.matched == 48 and gemm.dram_bytes == pytest.approx(gemm.modelled_bytes / 4,
                                                                   rel=1e-3)
    assert gemm.flops == pytest.approx(gemm.modelled_flops, rel=1e-3)
    assert (gemm.modelled_bound, gemm.bound) == (Bound.MEMORY, Bound.COMPUTE)
    assert [o.op_id for o in ops.values() if o.disagrees] == [gemm_op]
    for o in ops.values():
        if o.op_id != gemm_op and o.modelled_bytes:
            assert o.dram_bytes == pytest.approx(o.modelled_bytes, rel=1e-3)
    (flag,) = [f for f in report.flags if f.kind == FlagKind.COUNTERS_DISAGREE]
    assert flag.op_id == gemm_op and "compute-bound by its kernels' measured counters" in \
        flag_text(flag)
    page = (tmp_path / "out" / "report.html").read_text()
    assert "Measured counters (Nsight Compute)" in page and "48 of 48" in page


def test_a_partial_profile_is_scaled_to_the_ops_launches_and_says_how_many_it_rests_on(
        tmp_path):
    export = tmp_path / "ncu.csv"
    export.write_text(_export_of_trace(H100_VIT, {}, keep=0.5))
    report = diagnose_traces([H100_VIT], [16], None, [export])
    ops = {o.op_id: o for o in report.counters.ops}
    assert sum(o.matched for o in ops.values()) == 77
    gemm = ops["(top level):addmm#0"]
    assert 0 < gemm.matched < gemm.launches == 48
    # its launches share the op's bytes equally: scaled up, the measured equals the model
    assert gemm.dram_bytes == pytest.approx(gemm.modelled_bytes, rel=1e-3)
    assert not any(o.disagrees for o in ops.values())


# -- diagnose model.py --ncu -------------------------------------------------------------
@pytest.fixture
def fake_ncu(tmp_path, monkeypatch):
    """tests/tools/fake_ncu.py as an executable, named by $BATCHSCOPE_NCU; its log."""
    (tmp_path / "bin").mkdir()
    script = tmp_path / "bin" / "ncu"
    script.write_text(f"#!/bin/sh\nexec {sys.executable} "
                      f"{ROOT / 'tests' / 'tools' / 'fake_ncu.py'} \"$@\"\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    log = tmp_path / "ncu-calls.log"
    monkeypatch.setenv("BATCHSCOPE_NCU", str(script))
    monkeypatch.setenv("FAKE_NCU_LOG", str(log))
    monkeypatch.setenv("FAKE_NCU_CSV", str(
        RECORDED / "kernel_0005_e67789a8b6cb9adf2cb8d4d3745a9a79" / "ncu.metrics.csv"))
    return log


def _diagnose(tmp_path: Path, batch_sizes: str) -> tuple[int, dict]:
    from batchscope.cli import diagnose_app

    out = tmp_path / "out"
    result = CliRunner().invoke(diagnose_app, [str(ROOT / "tests" / "models" / "tiny.py"),
                                               "--device", "cpu", "--batch-sizes", batch_sizes,
                                               "--no-ops", "--min-time", "0.05", "--ncu",
                                               "--out", str(out)])
    return result.exit_code, json.loads((out / "report.json").read_text())


@pytest.mark.slow
def test_ncu_profiles_one_step_at_each_batch_size_and_the_report_holds_its_kernels(
        tmp_path, fake_ncu):
    code, doc = _diagnose(tmp_path, "1,2")
    assert code == 0
    calls = fake_ncu.read_text().splitlines()
    assert len(calls) == 2  # one step under ncu per measured batch size
    for call, batch in zip(calls, (1, 2)):
        assert "--profile-from-start off" in call and "--cache-control all" in call
        assert "--clock-control base" in call and call.endswith(f"ncu_step {batch}")
    counters = doc["counters"]
    assert [k["batch_size"] for k in counters["kernels"]] == [1, 2]
    assert counters["cache_control"] == "all" and counters["clock_control"] == "base"
    assert all(k["tensor_flops"] == pytest.approx(12_532_580_352) for k in counters["kernels"])
    assert (tmp_path / "out" / "ncu" / "ncu-batch-2.csv").exists()
    page = (tmp_path / "out" / "report.html").read_text()
    assert "Measured counters (Nsight Compute)" in page


def test_counters_refused_by_the_driver_cost_one_sentence_and_no_second_try(
        tmp_path, fake_ncu, monkeypatch):
    from batchscope.api import NcuPhase, Options, ncu_counters
    from batchscope.profiler.worker_config import WorkerConfig
    from batchscope.records import BatchResult, Status

    monkeypatch.setenv("FAKE_NCU_MODE", "permission")
    measured = [BatchResult(b, Status.OK) for b in (1, 2)]
    phase = NcuPhase()
    ncu_counters(WorkerConfig(str(ROOT / "tests" / "models" / "tiny.py")), measured,
                 Options(out_dir=str(tmp_path)), phase)
    assert phase.section(None) is None
    (flag,) = phase.flags
    assert flag.kind == FlagKind.NCU_FAILED and flag.batch_size == 1
    assert "ERR_NVGPUCTRPERM" in flag_text(flag) and "the sweep went on" in flag_text(flag)
    assert len(fake_ncu.read_text().splitlines()) == 1  # not asked again at batch 2


def test_ncu_missing_is_refused_before_the_sweep(tmp_path, monkeypatch):
    monkeypatch.setenv("BATCHSCOPE_NCU", str(tmp_path / "no-such-ncu"))
    from batchscope.cli import diagnose_app

    result = CliRunner().invoke(diagnose_app, [str(ROOT / "tests" / "models" / "tiny.py"),
                                               "--ncu", "--out", str(tmp_path / "out")])
    assert result.exit_code == ExitCode.USAGE and "--ncu needs Nsight Compute" in result.output
    assert not (tmp_path / "out" / "report.json").exists()

"""Nsight Compute CSV exports into typed per-launch counters (batchscope/profiler/ncu_export.py).

The recorded exports in tests/data/ncu/deepseek-ocr-rtx5090 (see its PROVENANCE.md) are
checked against sums computed here from the files by a separate csv loop with its own unit
table; the other layouts ncu writes are small fixtures written by hand below.
"""

from __future__ import annotations

import csv
import dataclasses
import gzip
import json
import math
from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from batchscope.errors import ExitCode
from batchscope.profiler.ncu_export import (
    NcuUnreadable,
    normalise_kernel_name,
    parse_unit,
    parse_value,
    read_ncu_exports,
)
from batchscope.records.counters import (
    FlopSource,
    KernelCounters,
    NcuExport,
    NcuLayout,
    NcuNoteKind,
)
from batchscope.reports.flag_text import ncu_note_text

DATA = Path(__file__).parent.parent / "data" / "ncu" / "deepseek-ocr-rtx5090"
TRACES = Path(__file__).parent.parent / "data" / "gpu-traces"
FOLDERS = sorted(DATA.glob("kernel_*"))
# A custom --metrics list without gpu__time_duration, built from FOLDERS[0] (PROVENANCE.md).
CUSTOM = Path(__file__).parent.parent / "data" / "ncu" / "custom-metrics"
# The independent unit table of the totals check (every unit these files use for them).
SCALE = {"byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "us": 1e-6, "ns": 1e-9,
         "ms": 1e-3, "": 1.0, "Ghz": 1e9, "%": 1.0}
# RTX 5090 datasheet: 21,760 CUDA cores, 2.407 GHz boost, fp32 104.8 TFLOP/s; 512-bit GDDR7
# at 28 Gbit/s per pin: 512 / 8 x 28e9 = 1,792 GB/s.
RTX5090_CORES = 21_760
RTX5090_BOOST_HZ = 2.407e9
RTX5090_FP32_FLOPS_PER_S = 104.8e12
RTX5090_DRAM_BYTES_PER_S = 1792e9


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


def figures_are_sane(export: NcuExport) -> None:
    """No figure of a read kernel is negative, NaN or infinite."""
    for kernel in export.kernels:
        for f in dataclasses.fields(kernel):
            value = getattr(kernel, f.name)
            if isinstance(value, float):
                assert math.isfinite(value) and value >= 0, (f.name, value)
        for term in kernel.flops_by_source:
            assert math.isfinite(term.flops) and term.flops >= 0
        intensity = kernel.intensity_flops_per_byte
        assert intensity is None or (math.isfinite(intensity) and intensity >= 0)


# What the FLOP counters miss, noted for each kernel whatever else is wrong with it.
FLOP_JUDGEMENTS = frozenset({NcuNoteKind.NO_TENSOR_COUNTER, NcuNoteKind.NO_CUDA_CORE_COUNTER,
                             NcuNoteKind.NO_FLOP_COUNTER})


def value_notes(export: NcuExport) -> list[tuple[NcuNoteKind, str | None]]:
    """The notes other than the FLOP judgements, as (kind, metric or text)."""
    return [(n.kind, n.metric or n.text) for n in export.notes
            if n.kind not in FLOP_JUDGEMENTS]


# ---------------------------------------------------------------------------- recorded data


@pytest.fixture(scope="module")
def recorded() -> NcuExport:
    return read_ncu_exports(sorted(DATA.glob("kernel_*/*.csv")))


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def _file_totals() -> dict[str, float]:
    """The --metrics values of every ncu.metrics.csv, summed per metric in SI units."""
    totals: dict[str, float] = defaultdict(float)
    for folder in FOLDERS:
        for row in _rows(folder / "ncu.metrics.csv"):
            if row["Section Name"] != "Command line profiler metrics":
                continue
            if row["Metric Value"] in ("n/a", ""):
                continue
            value = float(row["Metric Value"].replace(",", ""))
            totals[row["Metric Name"]] += value * SCALE[row["Metric Unit"]]
    return totals


def _roofline(folder: Path) -> dict[tuple[str, str], float]:
    """A folder's RooflineChart values by (body item, metric), in SI units."""
    return {(r["Body Item Label"], r["Metric Name"]):
            float(r["Metric Value"].replace(",", "")) * SCALE.get(r["Metric Unit"], 1.0)
            for r in _rows(folder / "ncu.section_SpeedOfLight_RooflineChart.csv")
            if r["Metric Name"]}


def _duration_s(folder: Path) -> float:
    row = next(r for r in _rows(folder / "ncu.metrics.csv")
               if r["Metric Name"] == "gpu__time_duration.sum")
    return float(row["Metric Value"]) * SCALE[row["Metric Unit"]]


def test_the_recorded_data_is_the_twenty_kernels_of_its_provenance() -> None:
    assert len(FOLDERS) == 20
    assert all(len(list(f.glob("*.csv"))) == 7 for f in FOLDERS)
    assert (DATA / "LICENSE").read_text().startswith("MIT License")
    assert "CodeGandee/llm-perf-opt" in (DATA / "PROVENANCE.md").read_text()


def test_each_folder_is_one_launch_merged_from_its_seven_files(recorded: NcuExport) -> None:
    assert len(recorded.files) == 140 and len(recorded.kernels) == 20
    assert recorded.notes == []
    folders = [{Path(p).parent for p in k.files} for k in recorded.kernels]
    assert all(len(k.files) == 7 for k in recorded.kernels)
    assert sorted(f.pop() for f in folders) == FOLDERS
    assert all(f.layout is NcuLayout.DETAILS and f.header_line == 1 for f in recorded.files)
    assert all(k.compute_capability == "12.0" and k.device == "0" for k in recorded.kernels)
    assert all(k.process_name == "python3.12" for k in recorded.kernels)


def test_every_kernel_has_duration_bytes_and_flops(recorded: NcuExport) -> None:
    for kernel in recorded.kernels:
        assert kernel.duration_s and kernel.dram_bytes and kernel.flops is not None
        assert kernel.flops_complete
        assert kernel.sm_frequency_hz and kernel.dram_frequency_hz
        assert kernel.l2_bytes is None and kernel.tensor_instructions is None  # not collected
    figures_are_sane(recorded)


def _by_folder(export: NcuExport) -> dict[Path, KernelCounters]:
    return {Path(k.files[0]).parent: k for k in export.kernels}


def test_tensor_kernels_count_their_tensor_ops(recorded: NcuExport) -> None:
    """Each kernel's tensor FLOPs are its file's own tensor-op count; five are nonzero: the
    cutlass GEMMs, the fused attention and flash decode."""
    kernels = _by_folder(recorded)
    nonzero = []
    for folder in FOLDERS:
        row = next(r for r in _rows(folder / "ncu.metrics.csv")
                   if r["Metric Name"] == "sm__ops_path_tensor_src_bf16_dst_fp32.sum")
        ops = float(row["Metric Value"].replace(",", ""))
        (term,) = [t for t in kernels[folder].flops_by_source
                   if t.source is FlopSource.TENSOR_OPS]
        assert term.flops == ops
        assert term.metrics == ["sm__ops_path_tensor_src_bf16_dst_fp32.sum"]
        assert (kernels[folder].flops or 0) >= ops
        if ops:
            nonzero.append(kernels[folder].kernel_name)
    assert len(nonzero) == 5
    assert all(any(word in name for word in ("gemm", "fmha", "flash")) for name in nonzero)


def test_totals_equal_the_files_own_values(recorded: NcuExport) -> None:
    totals = _file_totals()
    kernels = recorded.kernels
    assert sum(k.dram_read_bytes or 0 for k in kernels) == pytest.approx(
        totals["dram__bytes_read.sum"], rel=1e-3)
    assert sum(k.dram_bytes or 0 for k in kernels) == pytest.approx(
        totals["dram__bytes_read.sum"] + totals["dram__bytes_write.sum"], rel=1e-3)
    assert sum(k.duration_s or 0 for k in kernels) == pytest.approx(
        totals["gpu__time_duration.sum"], rel=1e-3)
    tensor = sum(t.flops for k in kernels for t in k.flops_by_source
                 if t.source is FlopSource.TENSOR_OPS)
    assert tensor == pytest.approx(totals["sm__ops_path_tensor_src_bf16_dst_fp32.sum"],
                                   rel=1e-3)


def test_flops_are_tensor_ops_plus_the_rooflines_cuda_core_rate(recorded: NcuExport) -> None:
    """The CUDA-core FLOPs: (FFMA operations, already two per FFMA, + FADD + FMUL per cycle)
    x the achieved body item's SM clock x the duration, from each precision's achieved item."""
    expected = _file_totals()["sm__ops_path_tensor_src_bf16_dst_fp32.sum"]
    for folder in FOLDERS:
        roof, duration_s = _roofline(folder), _duration_s(folder)
        for word, letter in (("Single", "F"), ("Double", "D")):
            item = f"{word} Precision Achieved Value"
            per_cycle = (roof[(item, f"Predicated-On {letter}FMA Operations Per Cycle")]
                         + roof[(item, f"Predicated-On {letter}ADD Thread Instructions "
                                       "Executed Per Cycle")]
                         + roof[(item, f"Predicated-On {letter}MUL Thread Instructions "
                                       "Executed Per Cycle")])
            expected += per_cycle * roof[(item, "SM Frequency")] * duration_s
    assert sum(k.flops or 0 for k in recorded.kernels) == pytest.approx(expected, rel=1e-3)
    first = next(k for k in recorded.kernels if k.process_id == "1740670")
    fp32 = next(t for t in first.flops_by_source if t.source is FlopSource.ROOFLINE_FP32)
    # (158.12 FFMA ops + 1.97 FADD + 0 FMUL) per cycle x 2.15 GHz x 6.75 us = 2,323,306.1
    assert fp32.flops == pytest.approx(2_323_306.125)


def test_bf16_gemv_does_one_flop_per_dram_byte(recorded: NcuExport) -> None:
    """A physical check of the FLOP count: cuBLAS's bf16 GEMV (kernels 0001 and 0002) reads
    each 2-byte weight once and does one multiply-add with it, 2 FLOPs: 1 FLOP per byte.
    Doubling the roofline's FFMA operations again would make it 2."""
    gemv = [k for k in recorded.kernels if "cublasGemvParamsEx" in k.kernel_name]
    assert len(gemv) == 2
    for kernel in gemv:
        assert kernel.intensity_flops_per_byte == pytest.approx(1.0, rel=0.02)


def test_ffma_operations_are_already_two_per_instruction() -> None:
    """Why the roofline's "FFMA Operations" are not doubled again: in every file they are
    exactly twice the FFMA thread instructions, achieved and theoretical."""
    for folder in FOLDERS:
        roof = _roofline(folder)
        achieved = roof[("Single Precision Achieved Value",
                         "Predicated-On FFMA Operations Per Cycle")]
        instructions = roof[("", "Predicated-On FFMA Thread Instructions Executed Per Cycle")]
        assert achieved == pytest.approx(2 * instructions, abs=0.011)  # printed to 0.01
        assert roof[("Single Precision Roofline", "Theoretical Predicated-On FFMA Operations")
                    ] == 2 * RTX5090_CORES


def test_roofs_match_the_rtx5090_datasheet(recorded: NcuExport) -> None:
    for folder, kernel in _by_folder(recorded).items():
        clock_hz = _roofline(folder)[("Single Precision Roofline", "SM Frequency")]
        assert kernel.peak_fp32_flops_per_s is not None
        at_boost = kernel.peak_fp32_flops_per_s / clock_hz * RTX5090_BOOST_HZ
        assert at_boost == pytest.approx(RTX5090_FP32_FLOPS_PER_S, rel=0.005)
        # The rule rows say it: "The ratio of peak float (fp32) to double (fp64) ... 64:1".
        assert kernel.peak_fp32_flops_per_s == pytest.approx(
            64 * (kernel.peak_fp64_flops_per_s or 0))
        assert kernel.peak_dram_bytes_per_s == pytest.approx(RTX5090_DRAM_BYTES_PER_S,
                                                             rel=0.04)


# ---------------------------------------------------------------------------- layouts


def quoted(*cells: str) -> str:
    """A row as ncu writes it: every cell quoted, commas between."""
    return ",".join(f'"{cell}"' for cell in cells)


def csv_text(*rows: str) -> str:
    """Rows as one file's text, each line ended."""
    return "\n".join(rows) + "\n"


# ncu 2025: rule columns after the metric, left empty but for one trailing comma in a
# metric's row, filled in a rule's row.
RULES = ("Rule Name", "Rule Type", "Rule Description", "Estimated Speedup Type",
         "Estimated Speedup")
IDENTITY = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context",
            "Stream", "Block Size", "Grid Size", "Device", "CC", "Section Name")
HEADER_2025 = quoted(*IDENTITY, "Metric Name", "Metric Unit", "Metric Value", *RULES)
LAUNCH = ("0", "77", "python3.12", "127.0.0.1",
          "void add_kernel<float>(float *, const float *, int)", "1", "7", "(128, 1, 1)",
          "(64, 1, 1)", "0", "12.0")
CLI, SOL = "Command line profiler metrics", "GPU Speed Of Light Throughput"


def metric(*cells: str) -> str:
    """A metric's row of the 2025 layout, trailing comma and all."""
    return quoted(*LAUNCH, *cells) + ","


NCU_2025 = csv_text(
    HEADER_2025,
    metric(CLI, "dram__bytes_read.sum", "Mbyte", "2.33"),
    metric(CLI, "dram__bytes_write.sum", "byte", "0"),
    metric(CLI, "flop_count_sp.sum", "", "n/a"),
    metric(CLI, "gpu__time_duration.sum", "us", "6.75"),
    metric(CLI, "sm__ops_path_tensor_src_bf16_dst_fp32.sum", "", "1,275,068,416"),
    metric(SOL, "DRAM Frequency", "Ghz", "13.72"),
    metric(SOL, "SM Frequency", "Ghz", "1.99"),
    metric(SOL, "Duration", "us", "6.75"),
    metric(SOL, "Compute (SM) Throughput", "%", "0.02"),
    quoted(*LAUNCH, "SpeedOfLight", "", "", "", "SOLBottleneck", "OPT",
           "This kernel grid is too small to fill the available resources on this device, "
           "resulting in only 0.7 full waves across all SMs.", "", ""),
)
CHART = "GPU Speed Of Light Roofline Chart"
ROOF, ACHIEVED = "Single Precision Roofline", "Single Precision Achieved Value"
ROOFLINE_2025 = csv_text(
    quoted(*IDENTITY, "Body Item Label", "Metric Name", "Metric Unit", "Metric Value", *RULES),
    metric(CHART, "", "Predicated-On FFMA Thread Instructions Executed Per Cycle",
           "inst/cycle", "79.06"),
    metric(CHART, ROOF, "Theoretical Predicated-On FFMA Operations", "inst", "43,520"),
    metric(CHART, ROOF, "SM Frequency", "Ghz", "2.15"),
    metric(CHART, ROOF, "Theoretical DRAM Bytes Accessible", "byte/cycle", "128"),
    metric(CHART, ROOF, "DRAM Frequency", "Ghz", "13.72"),
    metric(CHART, ACHIEVED, "Predicated-On FFMA Operations Per Cycle", "inst", "158.12"),
    metric(CHART, ACHIEVED, "SM Frequency", "Ghz", "2.00"),
    metric(CHART, ACHIEVED, "Predicated-On FADD Thread Instructions Executed Per Cycle",
           "inst/cycle", "1.97"),
    metric(CHART, ACHIEVED, "Predicated-On FMUL Thread Instructions Executed Per Cycle",
           "inst/cycle", "0"),
    quoted(*LAUNCH, "SpeedOfLight_RooflineChart", "", "", "", "", "SOLFPRoofline", "INF",
           "The ratio of peak float (fp32) to double (fp64) performance on this device is "
           "64:1.", "", ""),
)
# ncu 2019-2020: "Kernel Time" (the launch's date), no Block Size, Grid Size, Device, CC
# nor rule columns; SpeedOfLight's older names; clocks in cycle/nsecond.
OLD = ("0", "4242", "python3.8", "127.0.0.1", "volta_sgemm_128x64_nn", "2020-Jun-03 14:12:45",
       "1", "7")
OLD_SOL = "GPU Speed Of Light"
SASS = "smsp__sass_thread_inst_executed_op_"
OLD_LAYOUT = csv_text(
    quoted("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Kernel Time",
           "Context", "Stream", "Section Name", "Metric Name", "Metric Unit", "Metric Value"),
    quoted(*OLD, OLD_SOL, "SOL SM", "%", "71.38"),
    quoted(*OLD, OLD_SOL, "SOL DRAM", "%", "12.50"),
    quoted(*OLD, OLD_SOL, "Duration", "usecond", "1,203.52"),
    quoted(*OLD, OLD_SOL, "SM Frequency", "cycle/nsecond", "1.25"),
    quoted(*OLD, OLD_SOL, "DRAM Frequency", "cycle/usecond", "877.00"),
    quoted(*OLD, CLI, "dram__bytes_read.sum", "Kbyte", "1,024.50"),
    quoted(*OLD, CLI, "dram__bytes_write.sum", "Mbyte", "2.00"),
    quoted(*OLD, CLI, "flop_count_sp.sum", "", "2,005,000"),
    quoted(*OLD, CLI, "sm__inst_executed_pipe_tensor.sum", "inst", "0"),
    quoted(*OLD, CLI, f"{SASS}fadd_pred_on.sum", "inst", "2,000"),
    quoted(*OLD, CLI, f"{SASS}ffma_pred_on.sum", "inst", "1,000,000"),
    quoted(*OLD, CLI, f"{SASS}fmul_pred_on.sum", "inst", "3,000"),
)
# ncu's own lines and the program's output before the header, and ncu's after it.
PROF_PREAMBLE = csv_text(
    "==PROF== Connected to process 77 (/usr/bin/python3.12)",
    'step 0: loss=2.31, "ok", 4 tokens',
    "ID,looks,like,a header,but names no kernel",
    '==PROF== Profiling "add_kernel" - 0: 0%....50%....100% - 9 passes',
    "==PROF== Disconnected from process 77",
    HEADER_2025,
    metric(CLI, "gpu__time_duration.sum", "usecond", "6.75"),
    "==WARNING== Found outstanding GPU clock reset, trying to revert...Success.",
    metric(CLI, "dram__bytes_read.sum", "Kbyte", "2,330.00"),
    "==PROF== Report: /tmp/report.ncu-rep",
)
# --page raw: a launch a row, a metric a column, the units in the second row.
RAW_IDENTITY = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context",
                "Stream", "Block Size", "Grid Size", "Device", "CC")
NO_UNIT = ("",) * len(RAW_IDENTITY)
A100 = ("1", "7", "(256, 1, 1)", "(108, 2, 1)", "0", "8.0", "NVIDIA A100-SXM4-80GB")
RAW_PAGE = csv_text(
    quoted(*RAW_IDENTITY, "device__attribute_display_name", "dram__bytes_read.sum",
           "dram__bytes_write.sum", "gpu__time_duration.sum", "l1tex__t_bytes.sum",
           "lts__t_bytes.sum", "sm__cycles_elapsed.avg.per_second",
           "sm__inst_executed_pipe_tensor.sum", "sm__inst_executed_pipe_tensor_op_hmma.sum",
           f"{SASS}fadd_pred_on.sum", f"{SASS}ffma_pred_on.sum", f"{SASS}fmul_pred_on.sum"),
    quoted(*NO_UNIT, "", "Mbyte", "Kbyte", "msecond", "Gbyte", "MiB", "Ghz", "inst", "inst",
           "inst", "inst", "inst"),
    quoted("0", "900", "python", "host",
           "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_tn", *A100, "12.50",
           "250.00", "0.20", "1.50", "64.00", "1.41", "4,096", "4,096", "1,000", "10,000",
           "500"),
    quoted("1", "900", "python", "host", "void elementwise<float>(float *, int)", *A100,
           "0.50", "500.00", "0.01", "n/a", "n/a", "1.41", "0", "0", "2,000", "0", "0"),
)
# --page raw with the RooflineChart section: its rates and roofs by their own names.
RAW_ROOFLINE = csv_text(
    quoted(*RAW_IDENTITY, "dram__bytes.sum.peak_sustained",
           "dram__cycles_elapsed.avg.per_second", f"derived__{SASS}ffma_pred_on_x2",
           "gpu__time_duration.sum", "sm__cycles_elapsed.avg.per_second",
           "sm__sass_thread_inst_executed_op_dfma_pred_on.sum.peak_sustained",
           "sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained",
           "smsp__cycles_elapsed.avg.per_second", f"{SASS}fadd_pred_on.sum.per_cycle_elapsed",
           f"{SASS}fmul_pred_on.sum.per_cycle_elapsed",
           "sm__ops_path_tensor_src_fp16_dst_fp32.sum"),
    quoted(*NO_UNIT, "byte/cycle", "cycle/nsecond", "inst", "usecond", "cycle/nsecond",
           "inst/cycle", "inst/cycle", "cycle/nsecond", "inst/cycle", "inst/cycle", ""),
    quoted("0", "5", "python", "host", "void k<float>(float *)", "1", "7", "(128, 1, 1)",
           "(1, 1, 1)", "0", "9.0", "2,048", "1.60", "100.00", "10.00", "1.98", "8,448",
           "16,896", "1.90", "20.00", "30.00", "0"),
)


@pytest.fixture
def two_files(tmp_path: Path) -> list[Path]:
    return [write(tmp_path, "details.csv", NCU_2025),
            write(tmp_path, "roofline.csv", ROOFLINE_2025)]


def test_2025_layout_with_trailing_rule_fields_and_a_roofline_export(two_files) -> None:
    export = read_ncu_exports(two_files)
    assert [f.metric_rows for f in export.files] == [9, 9]  # the rule rows hold no metric
    (kernel,) = export.kernels
    assert kernel.files == [str(p) for p in two_files]
    assert kernel.block_size == (128, 1, 1) and kernel.grid_size == (64, 1, 1)
    assert kernel.duration_s == pytest.approx(6.75e-6)
    assert kernel.dram_bytes == pytest.approx(2.33e6)  # 2.33 Mbyte + 0 byte
    # Roofline CUDA-core share: (158.12 + 1.97 + 0) x 2.00 GHz (the achieved item's clock,
    # not the roof's 2.15 nor SpeedOfLight's 1.99) x 6.75 us = 2,161,215.
    sources = {t.source: t.flops for t in kernel.flops_by_source}
    assert sources == {FlopSource.ROOFLINE_FP32: pytest.approx(2_161_215.0),
                       FlopSource.TENSOR_OPS: 1_275_068_416.0}
    assert kernel.flops == pytest.approx(1_275_068_416 + 2_161_215)
    assert kernel.flops_complete and export.notes == []
    assert kernel.peak_fp32_flops_per_s == pytest.approx(43_520 * 2.15e9)  # 93.6 TFLOP/s
    assert kernel.peak_dram_bytes_per_s == pytest.approx(128 * 13.72e9)  # 1.756 TB/s
    assert kernel.peak_fp64_flops_per_s is None  # no DFMA rows in this export
    assert kernel.sm_frequency_hz == pytest.approx(1.99e9)
    assert kernel.sm_throughput_pct == pytest.approx(0.02)


def test_old_layout_with_kernel_time_and_cycle_per_nsecond_clocks(tmp_path: Path) -> None:
    export = read_ncu_exports([write(tmp_path, "old.csv", OLD_LAYOUT)])
    (kernel,) = export.kernels
    assert kernel.block_size is None and kernel.device is None and kernel.context == "1"
    assert kernel.duration_s == pytest.approx(1203.52e-6)
    assert kernel.sm_frequency_hz == pytest.approx(1.25e9)
    assert kernel.dram_frequency_hz == pytest.approx(877e6)
    assert kernel.dram_bytes == pytest.approx(1_024_500 + 2_000_000)
    assert kernel.sm_throughput_pct == 71.38 and kernel.dram_throughput_pct == 12.5
    # SASS first, counted once: 2,000 FADD + 3,000 FMUL + 2 x 1,000,000 FFMA, and
    # flop_count_sp (the same FLOPs) is not added.
    assert kernel.flops == 2_005_000
    assert [t.source for t in kernel.flops_by_source] == [FlopSource.SASS_FP32]
    assert kernel.tensor_instructions == 0 and kernel.flops_complete


def test_prof_lines_and_program_output_around_the_header(tmp_path: Path) -> None:
    export = read_ncu_exports([write(tmp_path, "stdout.csv", PROF_PREAMBLE)])
    assert export.files[0].header_line == 6 and export.files[0].metric_rows == 2
    (kernel,) = export.kernels
    assert kernel.duration_s == pytest.approx(6.75e-6)
    assert kernel.dram_read_bytes == pytest.approx(2.33e6)  # 2,330.00 Kbyte
    assert kernel.dram_bytes is None  # no write counter, no dram__bytes.sum
    assert kernel.flops is None and not kernel.flops_complete
    assert [n.kind for n in export.notes] == [NcuNoteKind.NO_FLOP_COUNTER]


def test_raw_page_reads_units_from_its_second_row(tmp_path: Path) -> None:
    export = read_ncu_exports([write(tmp_path, "raw.csv", RAW_PAGE)])
    assert export.files[0].layout is NcuLayout.RAW and export.files[0].metric_rows == 2
    gemm, elementwise = export.kernels
    assert gemm.device_name == "NVIDIA A100-SXM4-80GB" and gemm.compute_capability == "8.0"
    assert gemm.dram_bytes == pytest.approx(12.5e6 + 250e3)
    assert gemm.duration_s == pytest.approx(0.2e-3)
    assert gemm.l1_bytes == pytest.approx(1.5e9)
    assert gemm.l2_bytes == 64 * 1024**2  # MiB is binary
    assert gemm.sm_frequency_hz == pytest.approx(1.41e9)
    # The total tensor counter contains its hmma part: 4,096, not 8,192.
    assert gemm.tensor_instructions == 4096
    assert gemm.flops == 1_000 + 500 + 2 * 10_000  # SASS only: instructions never FLOPs
    assert not gemm.flops_complete
    assert [(n.kind, n.text) for n in export.notes] == [
        (NcuNoteKind.TENSOR_INSTRUCTIONS_ONLY, "4096")]
    assert elementwise.flops == 2_000 and elementwise.flops_complete
    assert elementwise.l1_bytes is None and elementwise.dram_bytes == pytest.approx(1e6)


def test_raw_page_with_the_roofline_by_metric_names(tmp_path: Path) -> None:
    (kernel,) = read_ncu_exports([write(tmp_path, "raw.csv", RAW_ROOFLINE)]).kernels
    # 2 x 16,896 FFMA per cycle x 1.98 GHz (sm__cycles_elapsed) = 66.9 TFLOP/s; DFMA: 8,448.
    assert kernel.peak_fp32_flops_per_s == pytest.approx(2 * 16_896 * 1.98e9)
    assert kernel.peak_fp64_flops_per_s == pytest.approx(2 * 8_448 * 1.98e9)
    assert kernel.peak_dram_bytes_per_s == pytest.approx(2_048 * 1.6e9)
    # (100 FFMA FLOPs + 20 FADD + 30 FMUL) per cycle x 1.90 GHz (smsp) x 10 us = 2,850,000.
    fp32 = next(t for t in kernel.flops_by_source if t.source is FlopSource.ROOFLINE_FP32)
    assert fp32.flops == pytest.approx(2_850_000)
    assert kernel.flops == pytest.approx(2_850_000) and kernel.flops_complete


def test_half_precision_sass_counts_are_a_lower_bound(tmp_path: Path) -> None:
    """HFMA alone: its add and mul counters not collected, and a packed HFMA2 does twice."""
    text = csv_text(
        quoted(*RAW_IDENTITY, f"{SASS}hfma_pred_on.sum", f"{SASS}fadd_pred_on.sum",
               f"{SASS}ffma_pred_on.sum", f"{SASS}fmul_pred_on.sum",
               "sm__inst_executed_pipe_tensor.sum"),
        quoted(*NO_UNIT, "inst", "inst", "inst", "inst", "inst"),
        quoted("0", "1", "python", "host", "void h<__half>(__half *)", "1", "7", "(1, 1, 1)",
               "(1, 1, 1)", "0", "8.0", "500", "0", "0", "0", "0"))
    export = read_ncu_exports([write(tmp_path, "half.csv", text)])
    (kernel,) = export.kernels
    assert {t.source: t.flops for t in kernel.flops_by_source} == {
        FlopSource.SASS_FP32: 0.0, FlopSource.SASS_FP16: 1_000.0}  # 2 x 500 HFMA
    assert kernel.flops == 1_000 and not kernel.flops_complete
    assert [n.kind for n in export.notes] == [NcuNoteKind.PARTIAL_SASS,
                                              NcuNoteKind.PACKED_HALF]


def test_raw_page_without_its_units_row_guesses_no_scale(tmp_path: Path) -> None:
    lines = RAW_PAGE.splitlines()
    export = read_ncu_exports([write(tmp_path, "raw.csv", "\n".join(lines[:1] + lines[2:]))])
    assert [n.kind for n in export.notes][:1] == [NcuNoteKind.NO_UNITS]
    assert all(k.duration_s is None and k.dram_bytes is None for k in export.kernels)


@pytest.mark.parametrize(("unit", "dim", "scale"), [
    ("byte", "bytes", 1.0), ("Kbyte", "bytes", 1e3), ("Mbyte", "bytes", 1e6),
    ("Gbyte", "bytes", 1e9), ("Tbyte", "bytes", 1e12), ("KiB", "bytes", 1024.0),
    ("MiB", "bytes", 1024.0**2), ("GiB", "bytes", 1024.0**3),
    ("nsecond", "seconds", 1e-9), ("usecond", "seconds", 1e-6), ("msecond", "seconds", 1e-3),
    ("second", "seconds", 1.0), ("ns", "seconds", 1e-9), ("us", "seconds", 1e-6),
    ("ms", "seconds", 1e-3), ("s", "seconds", 1.0),
    ("hz", "hertz", 1.0), ("khz", "hertz", 1e3), ("Mhz", "hertz", 1e6), ("Ghz", "hertz", 1e9),
    ("GHz", "hertz", 1e9), ("cycle/nsecond", "hertz", 1e9), ("cycle/usecond", "hertz", 1e6),
    ("byte/second", "bytes_per_s", 1.0), ("Kbyte/s", "bytes_per_s", 1e3),
    ("Gbyte/s", "bytes_per_s", 1e9), ("Mbyte/usecond", "bytes_per_s", 1e12),
    ("inst", "count", 1.0), ("cycle", "count", 1.0), ("", "count", 1.0),
    ("inst/cycle", "per_cycle", 1.0), ("byte/cycle", "bytes_per_cycle", 1.0),
    ("%", "percent", 1.0),
])
def test_units_scale_to_si(unit: str, dim: str, scale: float) -> None:
    parsed = parse_unit(unit)
    assert parsed is not None and parsed[0].value == dim
    assert parsed[1] == pytest.approx(scale)


@pytest.mark.parametrize("unit", ["furlong", "Kfoo", "byte/fortnight", "/", "Mbit", "Kbyte/s/s"])
def test_unknown_units_have_no_scale(unit: str) -> None:
    assert parse_unit(unit) is None


def test_values_read_thousands_separators_and_not_collected() -> None:
    assert parse_value("1,275,068,416") == 1_275_068_416
    assert parse_value("9,495.42") == 9495.42 and parse_value("0") == 0
    assert parse_value("n/a") is None and parse_value("") is None
    assert math.isnan(parse_value("nan") or 0.0) and parse_value("-inf") == -math.inf
    with pytest.raises(ValueError):
        parse_value("12 apples")


def test_a_kbyte_usecond_ghz_export_is_scaled(tmp_path: Path) -> None:
    text = (NCU_2025.replace('"Mbyte","2.33"', '"Kbyte","2,330.00"')
            .replace('"us","6.75"', '"usecond","6.75"'))
    (kernel,) = read_ncu_exports([write(tmp_path, "k.csv", text)]).kernels
    assert kernel.dram_bytes == pytest.approx(2.33e6) and kernel.duration_s == 6.75e-6
    assert kernel.dram_frequency_hz == pytest.approx(13.72e9)


# ---------------------------------------------------------------------------- merging


def test_files_that_agree_merge_across_units_and_printed_rounding(tmp_path: Path) -> None:
    """2.33 Mbyte is 2,330.00 Kbyte; 0.02% and 0.03% differ by one printed digit."""
    other = (NCU_2025.replace('"Mbyte","2.33"', '"Kbyte","2,330.00"')
             .replace('"%","0.02"', '"%","0.03"'))
    export = read_ncu_exports([write(tmp_path, "a.csv", NCU_2025),
                               write(tmp_path, "b.csv", other)])
    assert len(export.kernels) == 1 and len(export.kernels[0].files) == 2
    assert export.kernels[0].sm_throughput_pct == 0.02  # the first file's value is kept


def test_files_that_disagree_by_more_than_one_percent_stay_separate(tmp_path: Path) -> None:
    other = NCU_2025.replace('"Mbyte","2.33"', '"Mbyte","2.50"')
    export = read_ncu_exports([write(tmp_path, "a.csv", NCU_2025),
                               write(tmp_path, "b.csv", other)])
    first, second = export.kernels
    assert (first.dram_bytes, second.dram_bytes) == (pytest.approx(2.33e6),
                                                     pytest.approx(2.5e6))
    assert first.files != second.files
    assert value_notes(export) == [(NcuNoteKind.SEPARATE_RUNS, "dram__bytes_read.sum")]


def test_a_second_export_appended_to_the_first_is_read(tmp_path: Path) -> None:
    second = NCU_2025.replace('"0","77"', '"1","77"')
    export = read_ncu_exports([write(tmp_path, "both.csv", NCU_2025 + second)])
    assert [k.launch_id for k in export.kernels] == ["0", "1"]


def test_a_utf16_export_as_powershell_writes_it(tmp_path: Path) -> None:
    path = tmp_path / "ps.csv"
    path.write_bytes(NCU_2025.encode("utf-16"))
    (kernel,) = read_ncu_exports([path]).kernels
    assert kernel.duration_s == pytest.approx(6.75e-6)


# ---------------------------------------------------------------------------- refused values


@pytest.mark.parametrize(("value", "kind"), [
    ("nan", NcuNoteKind.NOT_FINITE), ("inf", NcuNoteKind.NOT_FINITE),
    ("-5", NcuNoteKind.NEGATIVE), ("lots", NcuNoteKind.NOT_A_NUMBER),
    ("1e308", NcuNoteKind.NOT_FINITE),  # 1e308 Mbyte is past a float
])
def test_bad_values_are_not_recorded_and_say_why(tmp_path: Path, value: str,
                                                 kind: NcuNoteKind) -> None:
    text = NCU_2025.replace('"Mbyte","2.33"', f'"Mbyte","{value}"')
    export = read_ncu_exports([write(tmp_path, "k.csv", text)])
    (kernel,) = export.kernels
    assert kernel.dram_read_bytes is None and kernel.dram_bytes is None
    assert value_notes(export) == [(kind, "dram__bytes_read.sum")]
    assert ncu_note_text(export.notes[0]).endswith(": left out.")


def test_an_unknown_unit_leaves_its_figure_out(tmp_path: Path) -> None:
    text = (NCU_2025.replace('"gpu__time_duration.sum","us"', '"gpu__time_duration.sum","jiffy"')
            .replace('"Duration","us","6.75"', '"Duration","%","6.75"'))
    export = read_ncu_exports([write(tmp_path, "k.csv", text)])
    assert export.kernels[0].duration_s is None
    assert [(n.kind, n.text) for n in export.notes if n.metric] == [
        (NcuNoteKind.UNKNOWN_UNIT, "jiffy"), (NcuNoteKind.UNEXPECTED_UNIT, "%")]


def test_a_truncated_file_is_read_up_to_its_last_whole_row(tmp_path: Path) -> None:
    cut = NCU_2025[:NCU_2025.index('"gpu__time_duration.sum"') + 30]
    export = read_ncu_exports([write(tmp_path, "cut.csv", cut)])
    assert export.files[0].truncated and export.files[0].metric_rows == 3
    assert export.notes[0].kind is NcuNoteKind.TRUNCATED
    assert export.kernels[0].dram_bytes == pytest.approx(2.33e6)


def test_a_last_row_without_its_newline_is_whole(tmp_path: Path) -> None:
    export = read_ncu_exports([write(tmp_path, "k.csv", OLD_LAYOUT.rstrip("\n"))])
    assert not export.files[0].truncated and export.files[0].metric_rows == 12


@pytest.mark.parametrize(("content", "why"), [
    (b"", "it is empty"),
    (b"  \n\n", "it is empty"),
    (b"NCU\x00\x01\x02binary report", "it is binary"),
    (b'{"traceEvents": []}', "no row names the columns ID, Kernel Name and Metric Value"),
    (b"ID,Name,Value\n0,x,1\n", "no row names the columns ID, Kernel Name and Metric Value"),
    (HEADER_2025.encode() + b"\n", "it has no whole metric row"),
    (NCU_2025.encode()[:len(HEADER_2025) + 60],
     "it has no whole metric row under its header (it is cut short)"),
    (HEADER_2025.encode() + b'\n"0","77","p","h","k","1","7","(1, 1, 1)","(1, 1, 1)","0",'
     b'"12.0","SpeedOfLight","","","","SOLBottleneck","OPT","advice","",""\n',
     "it has no whole metric row"),
])
def test_what_is_not_an_export_is_refused_in_one_sentence(tmp_path: Path, content: bytes,
                                                          why: str) -> None:
    path = tmp_path / "x.csv"
    path.write_bytes(content)
    with pytest.raises(NcuUnreadable) as raised:
        read_ncu_exports([path])
    message = str(raised.value)
    assert message.startswith(f"{path} is not a Nsight Compute CSV export: {why}")
    assert message.endswith("(export with `ncu --csv --page details` or `--page raw`).")
    assert ". " not in message and raised.value.exit_code is ExitCode.USAGE


def test_a_binary_report_and_a_missing_file_are_refused(tmp_path: Path) -> None:
    report = tmp_path / "profile.ncu-rep"
    report.write_bytes(b"\x00NVIDIA\x00" * 8)
    with pytest.raises(NcuUnreadable, match="it is a binary report"):
        read_ncu_exports([report])
    with pytest.raises(NcuUnreadable, match=r"^cannot read .*gone\.csv: "):
        read_ncu_exports([tmp_path / "gone.csv"])


# ---------------------------------------------------------------------------- hostile input

UNITS = st.sampled_from(["", "byte", "Kbyte", "Mbyte", "KiB", "us", "usecond", "Ghz", "%",
                         "inst", "inst/cycle", "byte/cycle", "Gbyte/s", "furlong"])
VALUES = (st.sampled_from(["nan", "inf", "-inf", "-3", "1,2,3", "n/a", "", "0", "1e400"])
          | st.floats(allow_nan=True, allow_infinity=True).map(repr)
          | st.text(st.characters(blacklist_categories=("Cc", "Cs")), max_size=8))
COLUMNS = ["ID", "Process ID", "Kernel Name", "Section Name", "Body Item Label",
           "Metric Name", "Metric Unit", "Metric Value", "Block Size", "Kernel Time",
           "dram__bytes_read.sum", "gpu__time_duration.sum"]
CELLS = st.sampled_from([*COLUMNS, "0", "n/a", "nan", "-1", "1,000", "(1, 2, 3)", "Mbyte",
                         "GPU Speed Of Light Roofline Chart", "SM Frequency", ""]) | st.text(
    max_size=12)
HOSTILE = settings(max_examples=60, deadline=None,
                   suppress_health_check=[HealthCheck.function_scoped_fixture])


def _read_or_refuse(path: Path) -> NcuExport | None:
    try:
        export = read_ncu_exports([path])
    except NcuUnreadable as exc:
        assert str(exc).endswith(".")
        return None
    figures_are_sane(export)
    return export


@HOSTILE
@given(content=st.binary(max_size=3000))
def test_random_bytes_read_or_refuse(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "random.csv"
    path.write_bytes(content)
    _read_or_refuse(path)


@HOSTILE
@given(rows=st.lists(st.lists(CELLS, max_size=14), max_size=12),
       header=st.lists(st.sampled_from(COLUMNS[1:]), max_size=10, unique=True))
def test_wrong_columns_read_or_refuse(tmp_path: Path, rows: list[list[str]],
                                      header: list[str]) -> None:
    path = tmp_path / "columns.csv"
    with path.open("w", newline="") as handle:
        csv.writer(handle, quoting=csv.QUOTE_ALL).writerows([["ID", *header], *rows])
    _read_or_refuse(path)


@HOSTILE
@given(cells=st.lists(st.tuples(UNITS, VALUES), min_size=18, max_size=18))
def test_random_units_and_values_never_give_a_bad_figure(tmp_path: Path,
                                                         cells: list[tuple[str, str]]) -> None:
    """The fixture's metric rows with units and values drawn at random: still an export."""
    lines, draws = [], iter(cells)
    for text in (NCU_2025, ROOFLINE_2025):
        header, *rows = csv.reader(text.splitlines())
        at = header.index("Metric Unit")
        lines.append(header)
        for row in rows:
            if row[at - 1]:  # a metric row, not a rule's
                row[at:at + 2] = next(draws)
            lines.append(row)
    path = tmp_path / "units.csv"
    with path.open("w", newline="") as handle:
        csv.writer(handle, quoting=csv.QUOTE_ALL).writerows(lines)
    export = _read_or_refuse(path)
    assert export is not None and len(export.kernels) == 1


@HOSTILE
@given(cut=st.floats(0.0, 1.0))
def test_a_recorded_export_cut_anywhere_reads_or_refuses(tmp_path: Path, cut: float) -> None:
    text = (FOLDERS[2] / "ncu.details.csv").read_text()
    full = read_ncu_exports([FOLDERS[2] / "ncu.details.csv"])
    path = tmp_path / "cut.csv"
    path.write_text(text[:int(len(text) * cut)])
    export = _read_or_refuse(path)
    if export is None:
        return
    assert export.files[0].metric_rows <= full.files[0].metric_rows
    assert not export.files[0].truncated or not path.read_text().endswith("\n")
    (kernel,) = export.kernels
    for f in dataclasses.fields(kernel):  # no figure from a value cut short
        value = getattr(kernel, f.name)
        if isinstance(value, float):
            assert value == getattr(full.kernels[0], f.name), f.name


# ---------------------------------------------------------------------------- kernel names

# (ncu's spelling, Kineto's) of one kernel, from the forms each tool writes; the Kineto
# spellings of the softmax and exp kernels are the A100 traces' own.
SAME_KERNEL = [
    ("void at::native::<unnamed>::softmax_warp_forward<float, float, float, (int)10, 1, 0>"
     "(T1 *, const T2 *, int, int, int, const bool *, int, bool)",
     "void at::native::(anonymous namespace)::softmax_warp_forward<float, float, float, 10, "
     "true, false>(float*, float const*, int, int, int, bool const*, int, bool)"),
    ("void (anonymous namespace)::softmax_warp_backward<float, float, float, (int)10, 1, 0>"
     "(T1 *, const T1 *, const T1 *, int, int, int, const bool *)",
     "void (anonymous namespace)::softmax_warp_backward<float, float, float, 10, true, false>"
     "(float*, float const*, float const*, int, int, int, bool const*)"),
    ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::exp_kernel_cuda("
     "at::TensorIteratorBase &)::[lambda() (instance 2)]::operator ()() const::[lambda() "
     "(instance 4)]::operator ()() const::[lambda(float) (instance 1)], "
     "at::detail::Array<char *, (int)2>>(int, T2, T3)",
     "void at::native::vectorized_elementwise_kernel<4, at::native::exp_kernel_cuda("
     "at::TensorIteratorBase&)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() "
     "const::{lambda(float)#1}, at::detail::Array<char*, 2> >(int, at::native::exp_kernel_cuda("
     "at::TensorIteratorBase&)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() "
     "const::{lambda(float)#1}, at::detail::Array<char*, 2>)"),
    ("void   cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_16x6_tn_align4>(\n Params)",
     "cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_16x6_tn_align4>("
     "cutlass_80_tensorop_s1688gemm_64x64_16x6_tn_align4::Params)"),
]
DIFFERENT_KERNELS = [
    ("k<4, f{lambda()#1}>(int)", "k<4, f{lambda()#2}>(int)"),
    ("void k<(int)4>(float *)", "void k<(int)8>(float *)"),
    ("void at::native::A<float>(int)", "void at::native::A<double>(int)"),
]


@pytest.mark.parametrize(("ncu", "kineto"), SAME_KERNEL)
def test_ncu_and_kineto_spellings_normalise_alike(ncu: str, kineto: str) -> None:
    assert normalise_kernel_name(ncu) == normalise_kernel_name(kineto)
    assert "::" not in normalise_kernel_name(kineto).replace("::operator", "")


@pytest.mark.parametrize(("one", "other"), DIFFERENT_KERNELS)
def test_different_kernels_stay_apart(one: str, other: str) -> None:
    assert normalise_kernel_name(one) != normalise_kernel_name(other)


@pytest.fixture(scope="module")
def kineto_names() -> set[str]:
    names = set()
    for path in TRACES.glob("*.json.gz"):
        with gzip.open(path) as handle:
            events = json.load(handle)["traceEvents"]
        names |= {e["name"] for e in events if e.get("cat") == "kernel"}
    return names


def test_the_traces_kernel_names_normalise_to_one_stable_form(kineto_names: set[str]) -> None:
    by_form: dict[str, set[str]] = defaultdict(set)
    for name in kineto_names:
        form = normalise_kernel_name(name)
        assert normalise_kernel_name(form) == form
        assert "(anonymous namespace)" not in form and not form.startswith("void ")
        by_form[form].add(name)
    # Kernels that share a form differ only in their parameter lists (NCCL 2.17 and older).
    for names in by_form.values():
        assert len({n.split("(")[0] for n in names}) == 1


@pytest.mark.parametrize(("folder", "kineto_part"), [
    ("kernel_0001", "std::enable_if<!(false), void>::type internal::gemvx::kernel<int, int, "
                    "__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, float, false, true, true, "
                    "false, 7, false"),
    ("kernel_0010", "elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<"
                    "at::native::CUDAFunctor_add<c10::BFloat16> >"),
    ("kernel_0014", "vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<"
                    "c10::BFloat16>, std::array<char*, 3ul> >"),
    ("kernel_0015", "elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<"
                    "at::native::BinaryFunctor<float, float, float, "
                    "at::native::binary_internal::MulFunctor<float> > >"),
])
def test_recorded_ncu_kernels_join_the_same_kernels_in_kineto_traces(
        recorded: NcuExport, kineto_names: set[str], folder: str, kineto_part: str) -> None:
    """The same PyTorch and cuBLAS kernels, profiled by ncu on an RTX 5090 and by Kineto on an
    H100 or A100, join by their normalised names."""
    (kineto,) = [n for n in kineto_names if kineto_part in n]
    kernel = next(k for k in recorded.kernels if Path(k.files[0]).parent.name.startswith(folder))
    assert kernel.normalised_name == normalise_kernel_name(kineto)
    others = [k for k in recorded.kernels if k is not kernel]
    assert all(k.normalised_name != kernel.normalised_name for k in others)


@settings(max_examples=200, deadline=None)
@given(name=st.text(max_size=200))
def test_normalising_any_text_gives_text(name: str) -> None:
    assert isinstance(normalise_kernel_name(name), str)


def test_a_custom_metric_list_without_gpu_time_duration_gets_a_derived_duration():
    # issue 50: exports made with a custom --metrics list carry sm__cycles_elapsed.avg and
    # its .per_second but no gpu__time_duration: the duration was left blank.
    export = read_ncu_exports([CUSTOM / "ncu.metrics.csv"])
    (kernel,) = export.kernels
    # 13,485 cycles / 1.99 GHz = 6.776 us; the original export's gpu__time_duration.sum of
    # the same launch: 6.75 us (the clock printed to three figures).
    assert kernel.duration_s == pytest.approx(13_485 / 1.99e9)
    assert kernel.duration_s == pytest.approx(6.75e-6, rel=0.011)
    (note,) = [n for n in export.notes if n.kind == NcuNoteKind.DURATION_FROM_CYCLES]
    assert "records no gpu__time_duration: its duration is sm__cycles_elapsed.avg over " \
           "sm__cycles_elapsed.avg.per_second" in ncu_note_text(note)
    # An export with the duration keeps it, with no note (the original of the fixture).
    original = read_ncu_exports([FOLDERS[0] / "ncu.metrics.csv"])
    assert original.kernels[0].duration_s == pytest.approx(6.75e-6)
    assert not [n for n in original.notes if n.kind == NcuNoteKind.DURATION_FROM_CYCLES]

"""A roof per kernel family, the theoretical peak every measured rate is set against, and
the flags that judge the roofs (issue 32).

Every figure here is recorded or synthetic, never this machine's speed: issue 32's AMD
EPYC (Zen 5, AVX-512, 2 vCPUs), whose oneDNN 3x3 convolution reached 380 GFLOP/s while
``torch.mm`` reached 173, and this project's 2-vCPU EPYC (AVX2, no native bf16).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from batchscope.classifiers.analyze import ceiling_flags, dtype_hints
from batchscope.classifiers.roofline import (
    ABOVE_THEORETICAL,
    CEILING_SPREAD_FLAG,
    FAR_BELOW_THEORETICAL,
    achieved_ceilings,
    classify_op,
    families_run,
    roof_flags,
)
from batchscope.hardware.figures import (
    CeilingDetails,
    FamilyPeak,
    HostInfo,
    MatmulFigures,
    MatmulSize,
    PathFigures,
    PathSize,
)
from batchscope.hardware.microbench import family_roofs
from batchscope.hardware.theoretical import cpu_theoretical
from batchscope.hardware.types import Ceilings
from batchscope.records import (
    BatchResult,
    Bound,
    ByteSplit,
    Flag,
    FlagKind,
    ModelInfo,
    OpStat,
    Status,
    TimeShare,
)
from batchscope.reports.flag_text import flag_text

GFLOP = 1e9
NOWHERE = Path("/nonexistent")  # no sysfs cpufreq: the clock comes from /proc/cpuinfo
# /proc/cpuinfo of issue 32's VM, cut to what is read (2 vCPUs; "cpu MHz" as a VM reports it).
ZEN5_CPUINFO = """\
processor\t: 0
model name\t: AMD EPYC 9R45
cpu MHz\t\t: 2400.000
flags\t\t: fpu sse sse2 avx fma avx2 avx512f avx512dq avx512bw avx512vl avx512_bf16
processor\t: 1
model name\t: AMD EPYC 9R45
cpu MHz\t\t: 2400.000
flags\t\t: fpu sse sse2 avx fma avx2 avx512f avx512dq avx512bw avx512vl avx512_bf16
"""
# This project's VM: AVX2 and FMA, no AVX-512, no native bf16.
AVX2_CPUINFO = """\
processor\t: 0
model name\t: AMD EPYC
cpu MHz\t\t: 1996.250
flags\t\t: fpu sse sse2 avx fma avx2
"""


def mm_row(n: int, best: float, median: float, fast: float | None = None,
           slow: float | None = None, spread: float = 0.1) -> MatmulSize:
    """One torch.mm size whose repeats ran at these rates (GFLOP/s)."""
    flops = 2 * n**3
    return MatmulSize(n=n, flops_per_call=flops, repeats=9, median_s=flops / (median * GFLOP),
                      best_s=flops / (best * GFLOP), worst_s=flops / (0.8 * median * GFLOP),
                      spread=spread, inner=1, warmup_s=0.01, best_flops_per_s=best * GFLOP,
                      median_flops_per_s=median * GFLOP,
                      p25_s=flops / (fast * GFLOP) if fast else None,
                      p75_s=flops / (slow * GFLOP) if slow else None)


def conv_row(batch: int, best: float) -> PathSize:
    flops = 2.0 * 64 * 56**2 * 64 * 9 * batch
    return PathSize(size=batch, flops_per_call=flops, repeats=9, median_s=flops / (0.95 * best
                    * GFLOP), best_s=flops / (best * GFLOP), worst_s=flops / (0.9 * best * GFLOP),
                    spread=0.05, inner=1, warmup_s=0.01, best_flops_per_s=best * GFLOP,
                    median_flops_per_s=0.95 * best * GFLOP, p25_s=flops / (0.97 * best * GFLOP),
                    p75_s=flops / (0.93 * best * GFLOP))


def zen5(mm: MatmulSize | None = None, bf16: MatmulFigures | None = None,
         theoretical: bool = False) -> Ceilings:
    """Issue 32's ceilings: fp32 torch.mm 173, F.linear 160, 3x3 conv2d 380 GFLOP/s."""
    mm = mm or mm_row(2048, best=173, median=162, fast=170, slow=158)
    fp32 = MatmulFigures(sizes=[mm], peak_flops_per_s=mm.best_flops_per_s, peak_size=mm.n,
                         paths={"linear": PathFigures(peak_flops_per_s=160 * GFLOP),
                                "conv2d": PathFigures(sizes=[conv_row(16, 380)],
                                                      peak_flops_per_s=380 * GFLOP)},
                         peak_path="conv2d")
    matmul = {"float32": fp32, **({"bfloat16": bf16} if bf16 else {})}
    peaks = {dtype: max(x for x in [f.peak_flops_per_s,
                                    *(p.peak_flops_per_s for p in f.paths.values())] if x)
             for dtype, f in matmul.items()}
    host = HostInfo(cpu="AMD EPYC 9R45", cpu_capability="AVX512", native_bf16=True,
                    interop_threads=2)
    return Ceilings(device="cpu", name="AMD EPYC 9R45", peak_flops_per_s=peaks,
                    bandwidth_bytes_per_s=40e9, overhead_s=2e-6, source="cache",
                    details=CeilingDetails(matmul=matmul, host=host),
                    family_peaks=family_roofs(matmul),
                    theoretical=cpu_theoretical(2, ZEN5_CPUINFO, NOWHERE, cpu_count=2)
                    if theoretical else None)


def op(name: str, flops: float, time_s: float, moved: float = 1e6,
       dtype: str = "float32") -> OpStat:
    return OpStat(op_id=f"0:{name}#0", name=name, input_shapes=[[256, 2048], [2048, 2048]],
                  dtype=dtype, module="0", calls=1, time_s=time_s, flops=int(flops),
                  bytes=ByteSplit(0, 0, int(moved)))


# -------------------------------------------------------------------- a roof per family
def test_each_family_roof_is_its_own_probes_best_and_names_it() -> None:
    c = zen5()
    assert c.family_peaks["matmul"]["float32"] == FamilyPeak(173 * GFLOP, "mm")
    assert c.family_peaks["conv"]["float32"] == FamilyPeak(380 * GFLOP, "conv2d")
    assert c.peak_flops_per_s["float32"] == 380 * GFLOP  # the dtype's peak: every other op's
    # F.linear faster than torch.mm: the matmul roof is F.linear's, and says so
    linear = MatmulFigures(peak_flops_per_s=150 * GFLOP,
                           paths={"linear": PathFigures(peak_flops_per_s=190 * GFLOP)})
    assert family_roofs({"float32": linear})["matmul"]["float32"].path == "linear"
    # a path that failed (no rate) sets no roof
    assert "conv" not in family_roofs({"float32": linear})


def test_a_matmul_is_placed_against_the_matmul_roof_and_a_conv_against_the_conv_roof() -> None:
    c = zen5()
    # addmm: 160 MFLOP in 1 ms is 160 GFLOP/s, 92% of the matmul roof (173); against the
    # convolution's 380 it would read 42%
    addmm = classify_op(op("addmm", 160e6, 1e-3), c)
    assert addmm.efficiency == pytest.approx(160 / 173)
    # a convolution at 300 GFLOP/s: 79% of its own roof
    conv = classify_op(op("convolution", 300e6, 1e-3), c)
    assert conv.efficiency == pytest.approx(300 / 380)
    # an op of no family with a probe of its own: the dtype's peak, as before
    gelu = classify_op(op("gelu", 38e6, 1e-3), c)
    assert gelu.efficiency == pytest.approx(38 / 380)
    # 6 FLOP a byte: above the matmul ridge (173 / 40 = 4.3), below the convolution's
    # (380 / 40 = 9.5): a matmul there is compute-bound, a convolution memory-bound
    assert classify_op(op("mm", 6e9, 0.1, moved=1e9), c).bound == Bound.COMPUTE
    assert classify_op(op("convolution", 6e9, 0.1, moved=1e9), c).bound == Bound.MEMORY


def test_without_a_family_roof_the_dtypes_peak_is_the_roof() -> None:
    # ceilings from before family roofs (a report of an older version), a dtype whose
    # family was not probed, and a dtype not measured at all (fp32's roofs)
    old = Ceilings(device="cpu", name="t", peak_flops_per_s={"float32": 380 * GFLOP,
                                                             "bfloat16": 50 * GFLOP},
                   bandwidth_bytes_per_s=40e9, overhead_s=2e-6)
    assert classify_op(op("addmm", 190e6, 1e-3), old).efficiency == pytest.approx(0.5)
    c = zen5()
    c.peak_flops_per_s["bfloat16"] = 50 * GFLOP
    assert c.peak_for("bfloat16", "matmul") == 50 * GFLOP
    assert c.peak_for("float64", "matmul") == 173 * GFLOP
    # an older report's hardware (no family_peaks, no theoretical) still loads
    data = old.to_dict()
    del data["family_peaks"], data["theoretical"]
    assert Ceilings.from_dict(data) == old


def test_a_matmul_that_beats_the_matmul_roof_raises_that_roof_only() -> None:
    c = zen5()
    # addmm at 200 GFLOP/s: past the matmul roof (173), under the convolution's (380)
    fast = BatchResult(8, Status.OK, ops=[op("addmm", 200e6 * 2, 2e-3)])
    raised = achieved_ceilings(c, [fast])
    assert raised.family_peaks["matmul"]["float32"] == FamilyPeak(200 * GFLOP, "addmm",
                                                                  "0:addmm#0")
    assert raised.family_peaks["conv"]["float32"].flops_per_s == 380 * GFLOP
    assert raised.peak_flops_per_s["float32"] == 380 * GFLOP
    (flag,) = [f for f in ceiling_flags(raised) if f.kind == FlagKind.ROOF_RAISED]
    assert "the float32 matmul roof was raised from 173 to 200 GFLOP/s" in flag_text(flag)
    # past the convolution's too: the dtype's peak follows
    faster = BatchResult(8, Status.OK, ops=[op("addmm", 400e6 * 2, 2e-3)])
    assert achieved_ceilings(c, [faster]).peak_flops_per_s["float32"] == 400 * GFLOP


# -------------------------------------------------------------------- the spread flag
def _percent(text: str) -> tuple[float, float, float, int]:
    """(slow, fast, median, percent) as the sentence prints them."""
    m = re.search(r"ran at ([\d,]+)-([\d,]+) GFLOP/s, a span of (\d+)% of their median "
                  r"([\d,]+) GFLOP/s", text)
    assert m, text
    slow, fast, pct, median = (float(g.replace(",", "")) for g in m.groups())
    return slow, fast, median, int(pct)


def test_the_spread_flag_quotes_the_numbers_its_percentage_is_made_of() -> None:
    # the middle half of the repeats ran at 150-192 GFLOP/s around a median of 162:
    # (192 - 150) / 162 = 26%
    wide = zen5(mm_row(2048, best=200, median=162, fast=192, slow=150, spread=0.26))
    (flag,) = ceiling_flags(wide, "float32")
    assert flag.kind == FlagKind.CEILING_SPREAD
    v = flag.values
    assert v["spread"] == pytest.approx((v["fast"] - v["slow"]) / v["median"])
    text = flag_text(flag)
    slow, fast, median, pct = _percent(text)
    assert (slow, fast, median, pct) == (150, 192, 162, 26)
    assert pct == round(100 * (fast - slow) / median)
    # it names the roof it is about, and quotes that roof
    assert text.startswith("the float32 matmul roof (torch.mm at n=2048)")
    assert "the roof is their best, 200 GFLOP/s" in text


def test_a_steady_roof_is_not_flagged_whatever_the_times_spread_said() -> None:
    # issue 32: "varied by 26% between repeats (best 173, median 162 GFLOP/s)": 7%, and
    # neither number was the roof (the convolution's 380). The rates' middle half,
    # 158-170 around 162, spans 7%: under the bar, no flag.
    steady = zen5(mm_row(2048, best=173, median=162, fast=170, slow=158, spread=0.26))
    assert CEILING_SPREAD_FLAG > (170 - 158) / 162
    assert not [f for f in ceiling_flags(steady, "float32") if f.kind == FlagKind.CEILING_SPREAD]


def test_figures_without_quartiles_say_which_spread_they_quote() -> None:
    # a cache or report written before the quartiles were kept: issue 14's 0.63
    old = zen5(mm_row(1024, best=215, median=114, spread=0.63))
    (flag,) = roof_flags(old, "float32")
    assert "fast" not in flag.values and flag.values["spread"] == 0.63
    assert ("their times' interquartile range is 63% of their median (median 114 GFLOP/s)"
            in flag_text(flag))
    # a flag of an older report (dtype, spread, best, median only) still reads
    legacy = Flag(FlagKind.CEILING_SPREAD, values={"dtype": "float32", "spread": 0.63,
                                                   "best": 215e9, "median": 114e9})
    assert flag_text(legacy).startswith("the repeats of the float32 peak (torch.mm) spread")


# -------------------------------------------------------------------- the theoretical peak
def test_the_theoretical_peak_is_cores_times_clock_times_flop_a_cycle() -> None:
    zen = cpu_theoretical(2, ZEN5_CPUINFO, NOWHERE, cpu_count=2)
    assert zen is not None and (zen.isa, zen.fma_units, zen.clock_source) == (
        "avx512f", 2, "cpu MHz")
    # AVX-512: 16 fp32 lanes x 2 (an FMA) x 2 FMA units = 64 FLOP a cycle a core;
    # 2 cores x 2.4 GHz x 64 = 307.2 GFLOP/s. AVX512-BF16 holds two bf16 a lane: 614.4.
    assert zen.flops_per_cycle_per_core == {"float32": 64, "bfloat16": 128, "float16": 64}
    assert zen.flops_per_s["float32"] == pytest.approx(307.2 * GFLOP)
    assert zen.flops_per_s["bfloat16"] == pytest.approx(614.4 * GFLOP)
    # AVX2: 8 lanes x 2 x 2 = 32; no native bf16: fp32's bound. 2 x 1.99625 GHz x 32.
    avx2 = cpu_theoretical(2, AVX2_CPUINFO, NOWHERE, cpu_count=2)
    assert avx2 is not None and avx2.flops_per_cycle_per_core["bfloat16"] == 32
    assert avx2.flops_per_s["float32"] == pytest.approx(2 * 1.99625e9 * 32)
    # threads beyond the logical CPUs share them
    assert cpu_theoretical(8, AVX2_CPUINFO, NOWHERE, cpu_count=2).cores == 2


def test_the_clock_is_the_highest_the_machine_reports(tmp_path: Path) -> None:
    # sysfs' maximum frequency (kHz, turbo included) wins over /proc/cpuinfo's current one
    for cpu, khz in (("cpu0", "3700000"), ("cpu1", "3500000")):
        (tmp_path / cpu / "cpufreq").mkdir(parents=True)
        (tmp_path / cpu / "cpufreq" / "cpuinfo_max_freq").write_text(khz + "\n")
    zen = cpu_theoretical(2, ZEN5_CPUINFO, tmp_path, cpu_count=2)
    assert (zen.clock_hz, zen.clock_source) == (3.7e9, "cpuinfo_max_freq")
    # an Intel model name's clock where nothing else says; AMX's 1024 bf16 FLOP a cycle
    spr = ("model name\t: Intel(R) Xeon(R) Platinum 8480+ @ 2.00GHz\n"
           "flags\t\t: fma avx2 avx512f avx512_bf16 amx_tile amx_bf16 avx512_fp16\n")
    xeon = cpu_theoretical(4, spr, NOWHERE, cpu_count=8)
    assert (xeon.clock_hz, xeon.clock_source, xeon.matrix_unit) == (2e9, "model name", "amx")
    assert xeon.flops_per_cycle_per_core == {"float32": 64, "bfloat16": 1024, "float16": 128}
    # Arm: NEON's 4 lanes x 2 x 4 pipes; BF16's matrix multiply at four times that
    arm = "Features\t: fp asimd evtstrm bf16 asimdhp\n"
    graviton = cpu_theoretical(2, arm, _freq(tmp_path / "arm", "2600000"), cpu_count=2)
    assert graviton.flops_per_cycle_per_core == {"float32": 32, "bfloat16": 128, "float16": 64}
    # no clock, or no vector ISA it knows: no bound rather than a wrong one
    assert cpu_theoretical(2, arm, NOWHERE) is None
    assert cpu_theoretical(2, "cpu MHz : 2000\nflags : fpu\n", NOWHERE) is None


def _freq(root: Path, khz: str) -> Path:
    (root / "cpu0" / "cpufreq").mkdir(parents=True)
    (root / "cpu0" / "cpufreq" / "cpuinfo_max_freq").write_text(khz)
    return root


def test_a_rate_above_the_theoretical_peak_is_flagged() -> None:
    # issue 32: the convolution's 380 GFLOP/s on 2 vCPUs the VM says run at 2.4 GHz:
    # 380 / 307.2 = 124% of the bound
    c = zen5(theoretical=True)
    (above,) = [f for f in roof_flags(c, "float32")
                if f.kind == FlagKind.ABOVE_THEORETICAL_PEAK]
    assert above.values["path"] == "conv2d" and above.values["family"] == "conv"
    assert above.values["share"] == pytest.approx(380 / 307.2)
    text = flag_text(above)
    assert text.startswith("a 3x3 conv2d, a probe of the float32 conv roof, reached 380 GFLOP/s")
    assert "124% of this machine's theoretical peak of 307 GFLOP/s" in text
    assert "(2 cores × 2.40 GHz × 64 FLOP a cycle: avx512f, 2 FMA units a core assumed" in text
    assert "Winograd" in text and "faster than the 2.40 GHz /proc/cpuinfo reports (turbo)" in text
    # torch.mm's 173 and F.linear's 160 are under the bound: nothing said of them
    assert 307.2 * ABOVE_THEORETICAL > 173 and FAR_BELOW_THEORETICAL * 307.2 < 160
    # a run's op that beat its roof is set against the bound too, and named
    raised = achieved_ceilings(c, [BatchResult(16, Status.OK,
                                               ops=[op("convolution", 400e6 * 2, 2e-3)])])
    (by_op,) = [f for f in roof_flags(raised, "float32")
                if f.kind == FlagKind.ABOVE_THEORETICAL_PEAK and f.op_id]
    assert by_op.op_id == "0:convolution#0" and by_op.batch_size == 16
    assert flag_text(by_op).startswith("convolution (0:convolution#0) ran at batch 16 at 400")


def test_a_roof_far_below_the_theoretical_peak_is_flagged() -> None:
    # this project's VM (recorded ceilings): bf16 without native arithmetic, F.linear 10.0
    # and a 3x3 conv2d 1.5 GFLOP/s against fp32's bound of 2 x 1.99625 GHz x 32 = 127.8
    bf16 = MatmulFigures(peak_flops_per_s=0.63 * GFLOP, peak_path="linear", paths={
        "linear": PathFigures(peak_flops_per_s=9.96 * GFLOP),
        "conv2d": PathFigures(peak_flops_per_s=1.50 * GFLOP)})
    fp32 = MatmulFigures(peak_flops_per_s=42.1 * GFLOP, peak_path="conv2d", paths={
        "linear": PathFigures(peak_flops_per_s=35.4 * GFLOP),
        "conv2d": PathFigures(peak_flops_per_s=43.4 * GFLOP)})
    matmul = {"float32": fp32, "bfloat16": bf16}
    c = Ceilings(device="cpu", name="AMD EPYC", bandwidth_bytes_per_s=20e9, overhead_s=2e-6,
                 peak_flops_per_s={"float32": 43.4 * GFLOP, "bfloat16": 9.96 * GFLOP},
                 details=CeilingDetails(matmul=matmul, host=HostInfo(
                     cpu="AMD EPYC", cpu_capability="AVX2", native_bf16=False,
                     interop_threads=2)),
                 family_peaks=family_roofs(matmul),
                 theoretical=cpu_theoretical(2, AVX2_CPUINFO, NOWHERE, cpu_count=2))
    below = [f for f in roof_flags(c, "bfloat16") if f.kind == FlagKind.BELOW_THEORETICAL_PEAK]
    assert [(f.values["family"], f.values["path"]) for f in below] == [
        ("conv", "conv2d"), ("matmul", "linear")]
    matmul_flag = below[1]
    assert matmul_flag.values["share"] == pytest.approx(9.96 / 127.76)
    text = flag_text(matmul_flag)
    assert text.startswith("the bfloat16 matmul roof, 9.96 GFLOP/s (F.linear), is 8% of this "
                           "machine's theoretical peak of 128 GFLOP/s")
    assert "no native bfloat16 arithmetic" in text and "AVX512-BF16" in text
    # fp32's roofs, 34% of its bound, are what the silicon gives: nothing said
    assert roof_flags(c, "float32") == []
    # a run with no convolution (an MLP) hears nothing of the convolution's roof
    mlp = BatchResult(256, Status.OK, ops=[op("addmm", 1e6, 1e-4), op("relu", 1e3, 1e-5)])
    assert families_run([mlp]) == {"matmul"}
    (only,) = roof_flags(c, "bfloat16", families_run([mlp]))
    assert only.values["family"] == "matmul"
    assert families_run([BatchResult(256, Status.OK)]) is None  # timing only: every roof


def test_amp_slower_compares_the_matmul_roofs() -> None:
    # bf16 matmuls at 120 GFLOP/s against fp32's 173, while a bf16 convolution reached 600:
    # the dtypes' peaks (600 against 380) said bf16 was faster, and --amp said nothing
    bf16 = MatmulFigures(peak_flops_per_s=120 * GFLOP, peak_size=2048, paths={
        "conv2d": PathFigures(peak_flops_per_s=600 * GFLOP)})
    c = zen5(bf16=bf16)
    assert c.peak_flops_per_s["bfloat16"] > c.peak_flops_per_s["float32"]
    amp = ModelInfo(target="m", dtype="float32", amp="bfloat16")
    batch = BatchResult(256, Status.OK, time_share=TimeShare(compute=0.6, memory=0.4))
    (slower,) = dtype_hints(amp, c, [batch])
    assert slower.kind == FlagKind.AMP_SLOWER
    assert (slower.values["peak"], slower.values["fp32_peak"]) == (120 * GFLOP, 173 * GFLOP)
    assert "matmul roof here is 120 GFLOP/s against fp32's 173 (1.4x slower)" in flag_text(
        slower)
    assert "run without --amp" in flag_text(slower)


def test_what_amps_casts_cost_the_step_is_said_where_the_roofs_say_nothing() -> None:
    # issue 32: samples/mlp.py under --amp bf16 ran 42% slower than in fp32 on a CPU with
    # native bf16 (1.09 M against 1.88 M rows/s at batch 256), and nothing said so: bf16
    # matmuls there peak above fp32's, and a 64-wide MLP's step is no matmul roof's. Its
    # own profile holds the evidence: autocast's casts, 9 calls, 41 us of a 235 us step.
    bf16 = MatmulFigures(peak_flops_per_s=350 * GFLOP, peak_size=2048)
    c = zen5(bf16=bf16)
    amp = ModelInfo(target="mlp", dtype="float32", amp="bfloat16")
    casts = [op("_to_copy", 0, 33e-6, dtype="float32"), op("_to_copy", 0, 8e-6)]
    casts[0].calls, casts[1].calls = 8, 1
    step = BatchResult(256, Status.OK, profiled_step_s=235e-6,
                       ops=[*casts, op("addmm", 8.4e6, 120e-6, dtype="bfloat16")],
                       time_share=TimeShare(compute=0.1, overhead=0.6))
    (flag,) = dtype_hints(amp, c, [step])
    assert flag.kind == FlagKind.AMP_CASTS and flag.batch_size == 256
    assert flag.values["share"] == pytest.approx(41 / 235)
    assert flag_text(flag).startswith("--amp bf16 spent 41 µs of the profiled step at batch "
                                      "256 (17%, 9 calls) casting tensors")
    # not under --amp, or casts a sliver of the step: nothing
    assert dtype_hints(ModelInfo(target="mlp", dtype="float32"), c, [step]) == []
    cheap = BatchResult(256, Status.OK, profiled_step_s=2e-3, ops=casts,
                        time_share=TimeShare(compute=0.1, overhead=0.6))
    assert dtype_hints(amp, c, [cheap]) == []

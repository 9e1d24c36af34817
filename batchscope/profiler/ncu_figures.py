"""One merged Nsight Compute launch's metric values as a typed per-kernel record.

:mod:`batchscope.profiler.ncu_export` reads the files and merges the rows of each launch; this
turns a launch's values into its :class:`~batchscope.records.counters.KernelCounters`: the
duration, DRAM/L2/L1 bytes, FLOPs by source, clocks, throughputs and roofs, each in SI units
(:mod:`batchscope.profiler.ncu_units`), with a note for every value refused and for every
reason the FLOPs are only a lower bound. Nothing here reads a file or classifies.

**FLOPs.** Two pipes, each counted once, added:

- CUDA cores, per precision, from the first source present: the SASS counters
  ``smsp__sass_thread_inst_executed_op_{f,h,d}{add,mul,fma}_pred_on.sum`` (add + mul +
  2 x fma), else ``flop_count_{sp,hp,dp}.sum``, else (fp32, fp64) the RooflineChart
  section's achieved rates x its SM clock x the duration. The roofline's "Predicated-On FFMA
  Operations Per Cycle" is already two per FFMA (ncu's section defines it as the FFMA thread
  instructions per cycle x 2, and in every recorded launch it is exactly twice "Predicated-On
  FFMA Thread Instructions Executed Per Cycle"); FADD and FMUL rates are thread instructions,
  one FLOP each. fp16 CUDA-core work is counted only from SASS counters, and as scalar: a
  packed HFMA2 does twice that, so such counts make the FLOPs a lower bound.
- Tensor cores: ``sm__ops_path_tensor_*.sum``, which NVIDIA documents as the math operations
  on the tensor path; they are taken as FLOPs (a multiply-add counts two). Tensor
  *instructions* (``sm__inst_executed_pipe_tensor*.sum``) are kept as ``tensor_instructions``
  but never converted: the FLOPs per instruction differ by GPU and kernel (512 on V100, 2048
  or 4096 on A100). Where they are the only tensor evidence, the FLOPs are a lower bound.

**Roofs.** From the RooflineChart section, each with the clock of its own body item:
``peak_fp32_flops_per_s`` = "Theoretical Predicated-On FFMA Operations" (per cycle, already
two per FFMA) x SM Frequency; fp64 likewise from DFMA; ``peak_dram_bytes_per_s`` =
"Theoretical DRAM Bytes Accessible" (byte/cycle) x DRAM Frequency. A ``--page raw`` export
names the same by the section's metrics (``sm__sass_thread_inst_executed_op_ffma_pred_on.sum
.peak_sustained`` x 2 x ``sm__cycles_elapsed.avg.per_second``, ``dram__bytes.sum
.peak_sustained`` x ``dram__cycles_elapsed.avg.per_second``, and the achieved rates'
``...pred_on.sum.per_cycle_elapsed`` x ``smsp__cycles_elapsed.avg.per_second``). On the
recorded RTX 5090, 43,520 FFMA operations per cycle x 2.41 GHz is 104.9 TFLOP/s, the
datasheet's fp32 peak at its boost clock; doubling again would claim 210. The roofline's
clocks are measured per launch and are not SpeedOfLight's (``sm_frequency_hz``): 1.98-2.41
against 1.97-2.01 GHz in the recorded launches, so the roofs move with them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from batchscope.profiler.ncu_names import normalise_kernel_name
from batchscope.profiler.ncu_units import Dim, parse_unit, parse_value
from batchscope.records.counters import (
    FlopSource,
    FlopTerm,
    KernelCounters,
    NcuNote,
    NcuNoteKind,
)

# ---------------------------------------------------------------------------- launches

MetricId = tuple[str, str, str]  # (section, body item label, metric name)
# A launch's duration where its export records neither gpu__time_duration nor SpeedOfLight's
# Duration (a custom --metrics list): the SM cycles elapsed over the SM clock. On the
# recorded RTX 5090 launches, whose exports hold both, cycles over clock (SpeedOfLight's
# Elapsed Cycles and SM Frequency) came within 1.1% of gpu__time_duration.sum, the clock
# printed to three figures.
DERIVED_DURATION = "sm__cycles_elapsed.avg / sm__cycles_elapsed.avg.per_second"
LaunchKey = tuple[str, str, str]  # (Process ID, ID, Kernel Name)


@dataclass(frozen=True)
class _Value:
    text: str
    unit: str | None  # None: a raw export without its units row
    path: str


@dataclass
class _Launch:
    key: LaunchKey
    columns: dict[str, str]  # the identity columns of its first row
    values: dict[MetricId, _Value] = field(default_factory=dict)
    paths: list[str] = field(default_factory=list)


def _launch_label(key: LaunchKey) -> str:
    process, launch_id, _ = key
    return f"ID {launch_id} in process {process}" if process else f"ID {launch_id}"


# ---------------------------------------------------------------------------- figures

_COUNTABLE = (Dim.COUNT,)
_RATES = (Dim.COUNT, Dim.PER_CYCLE)  # ncu labels per-cycle rates "inst" or "inst/cycle"
_TENSOR_OPS = re.compile(r"sm__ops_path_tensor_[a-z0-9_]+\.sum")
_TENSOR_INSTRUCTIONS = re.compile(r"(sm|smsp)__inst_executed_pipe_tensor[a-z0-9_]*\.sum")
_SIZE = re.compile(r"\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)")


def _is_sol(section: str) -> bool:
    return section == "SpeedOfLight" or ("Speed Of Light" in section
                                         and "Roofline" not in section)


def _is_roofline(section: str) -> bool:
    return "Roofline" in section


def _top_level(names: list[str]) -> list[str]:
    """The counters no other one contains: ``x_op_hmma.sum`` is part of ``x.sum``."""
    stems = [n.removesuffix(".sum") for n in names]
    return [n for n, s in zip(names, stems)
            if not any(o != s and s.startswith(o + "_") for o in stems)]


@dataclass(frozen=True)
class _Precision:
    letter: str  # the SASS op prefix: f, h, d
    word: str  # the roofline's body item word: Single, Half, Double
    sass: FlopSource
    flop_count: str
    flop_count_source: FlopSource
    roofline: FlopSource | None


_PRECISIONS = (
    _Precision("f", "Single", FlopSource.SASS_FP32, "flop_count_sp.sum",
               FlopSource.FLOP_COUNT_SP, FlopSource.ROOFLINE_FP32),
    _Precision("d", "Double", FlopSource.SASS_FP64, "flop_count_dp.sum",
               FlopSource.FLOP_COUNT_DP, FlopSource.ROOFLINE_FP64),
    _Precision("h", "Half", FlopSource.SASS_FP16, "flop_count_hp.sum",
               FlopSource.FLOP_COUNT_HP, None),
)
_FP32_SOURCES = frozenset({FlopSource.SASS_FP32, FlopSource.FLOP_COUNT_SP,
                           FlopSource.ROOFLINE_FP32})


class _Figures:
    """One merged launch's figures in SI units, and a note for every value it refused."""

    def __init__(self, launch: _Launch, notes: list[NcuNote]) -> None:
        self.launch = launch
        self.notes = notes
        self.label = _launch_label(launch.key)
        self.complete = True
        self.noted: set[NcuNote] = set()  # a value looked up twice is noted once

    def _add(self, note: NcuNote) -> None:
        if note not in self.noted:
            self.noted.add(note)
            self.notes.append(note)

    def _note(self, kind: NcuNoteKind, value: _Value, metric: str, text: str) -> None:
        self._add(NcuNote(kind, value.path, self.label, metric, text))

    def _flag(self, kind: NcuNoteKind, text: str | None = None) -> None:
        """Mark the FLOPs a lower bound, and say why."""
        self.complete = False
        self._add(NcuNote(kind, self.launch.paths[0], self.label, text=text))

    def value(self, mid: MetricId, dims: tuple[Dim, ...]) -> float | None:
        """The metric in SI units; None if not recorded, or (with a note) not usable."""
        value = self.launch.values.get(mid)
        if value is None:
            return None
        try:
            number = parse_value(value.text)
        except ValueError:
            self._note(NcuNoteKind.NOT_A_NUMBER, value, mid[2], value.text.strip()[:80])
            return None
        if number is None or value.unit is None:  # not collected; no units row (noted)
            return None
        if not math.isfinite(number):
            self._note(NcuNoteKind.NOT_FINITE, value, mid[2], value.text.strip())
            return None
        if number < 0:
            self._note(NcuNoteKind.NEGATIVE, value, mid[2], value.text.strip())
            return None
        parsed = parse_unit(value.unit)
        if parsed is None or parsed[0] not in dims:
            kind = NcuNoteKind.UNKNOWN_UNIT if parsed is None else NcuNoteKind.UNEXPECTED_UNIT
            self._note(kind, value, mid[2], value.unit[:40])
            return None
        scaled = _finite(number * parsed[1])
        if scaled is None:  # past a float once scaled
            self._note(NcuNoteKind.NOT_FINITE, value, mid[2], value.text.strip())
        return scaled

    def raw(self, name: str, dims: tuple[Dim, ...]) -> float | None:
        return self.value(("", "", name), dims)

    def first_raw(self, names: Sequence[str], dims: tuple[Dim, ...]) -> float | None:
        return next((v for n in names if (v := self.raw(n, dims)) is not None), None)

    def shown(self, section: str, name: str, dims: tuple[Dim, ...],
              label: str | None = None) -> tuple[float, MetricId] | None:
        """The first usable value of a display metric in a SpeedOfLight (``section`` "sol")
        or roofline section, in the body item ``label`` where given."""
        matches = _is_sol if section == "sol" else _is_roofline
        for mid in self.launch.values:
            if mid[2] == name and matches(mid[0]) and label in (None, mid[1]):
                number = self.value(mid, dims)
                if number is not None:
                    return number, mid
        return None

    def sol(self, name: str, dims: tuple[Dim, ...]) -> float | None:
        found = self.shown("sol", name, dims)
        return found[0] if found else None

    # -- durations, bytes, clocks ---------------------------------------------------

    def duration(self) -> tuple[float | None, str]:
        """The launch's duration and the metric it is read from: ``gpu__time_duration.sum``,
        SpeedOfLight's Duration, else (an export of a custom metric list without either)
        the SM cycles elapsed over the SM clock, with a note that it is derived."""
        raw = self.raw("gpu__time_duration.sum", (Dim.SECONDS,))
        if raw is not None:
            return raw, "gpu__time_duration.sum"
        shown = self.sol("Duration", (Dim.SECONDS,))
        if shown is not None:
            return shown, "Duration"
        cycles = self.raw("sm__cycles_elapsed.avg", (Dim.COUNT,))
        clock = self.raw("sm__cycles_elapsed.avg.per_second", (Dim.HERTZ,))
        if cycles is None or not clock:
            return None, "Duration"
        derived = _finite(cycles / clock)
        if derived is not None:
            self._add(NcuNote(NcuNoteKind.DURATION_FROM_CYCLES, self.launch.paths[0],
                              self.label))
        return derived, DERIVED_DURATION

    def dram(self) -> tuple[float | None, float | None, float | None]:
        read = self.raw("dram__bytes_read.sum", (Dim.BYTES,))
        write = self.raw("dram__bytes_write.sum", (Dim.BYTES,))
        total = read + write if read is not None and write is not None else None
        if total is None:
            total = self.raw("dram__bytes.sum", (Dim.BYTES,))
        return read, write, total

    def sm_clock(self) -> float | None:
        shown = self.sol("SM Frequency", (Dim.HERTZ,))
        if shown is not None:
            return shown
        return self.first_raw(("sm__cycles_elapsed.avg.per_second",
                               "gpc__cycles_elapsed.avg.per_second",
                               "smsp__cycles_elapsed.avg.per_second"), (Dim.HERTZ,))

    def dram_clock(self) -> float | None:
        shown = self.sol("DRAM Frequency", (Dim.HERTZ,))
        if shown is not None:
            return shown
        return self.raw("dram__cycles_elapsed.avg.per_second", (Dim.HERTZ,))

    def roof_clock(self, name: str, label: str, achieved: bool) -> float | None:
        """A roofline clock: in ``label``'s body item, else any achieved (or peak) body item's
        of the roofline section, else SpeedOfLight's."""
        found = self.shown("roofline", name, (Dim.HERTZ,), label) if label else None
        if found is None:
            for mid in self.launch.values:
                if (mid[2] == name and _is_roofline(mid[0])
                        and ("Achieved" in mid[1]) == achieved):
                    found = self.shown("roofline", name, (Dim.HERTZ,), mid[1])
                    if found is not None:
                        break
        if found is None:
            found = self.shown("roofline", name, (Dim.HERTZ,))
        return found[0] if found else self.sol(name, (Dim.HERTZ,))

    def percent(self, shown: Sequence[str], raws: Sequence[str]) -> float | None:
        """A SpeedOfLight percentage under any of its names across ncu versions, else the
        metric it shows."""
        value = next((v for n in shown if (v := self.sol(n, (Dim.PERCENT,))) is not None),
                     None)
        return value if value is not None else self.first_raw(raws, (Dim.PERCENT,))

    # -- FLOPs ---------------------------------------------------------------------

    def _sass(self, p: _Precision) -> FlopTerm | None:
        counts: dict[str, float] = {}
        used: list[str] = []
        for op in ("add", "mul", "fma"):
            for unit in ("sm", "smsp"):
                name = f"{unit}__sass_thread_inst_executed_op_{p.letter}{op}_pred_on.sum"
                count = self.raw(name, _COUNTABLE)
                if count is not None:
                    counts[op] = count
                    used.append(name)
                    break
        if not counts:
            return None
        if len(counts) < 3:
            self._flag(NcuNoteKind.PARTIAL_SASS, p.sass.value.removeprefix("sass_"))
        flops = counts.get("add", 0.0) + counts.get("mul", 0.0) + 2 * counts.get("fma", 0.0)
        if p.letter == "h" and flops > 0:
            self._flag(NcuNoteKind.PACKED_HALF, f"{flops:.0f} FLOPs counted")
        return _term(p.sass, used, flops)

    def _shown_rates(self, p: _Precision) -> tuple[dict[str, float | None], float | None]:
        """One precision's achieved FMA (as FLOPs), ADD and MUL rates per cycle as the
        roofline section shows them, and the SM clock of their body item."""
        letter = p.letter.upper()
        fma = f"Predicated-On {letter}FMA Operations Per Cycle"
        found = self.shown("roofline", fma, _RATES)
        if found is None:  # only the instructions: two FLOPs each
            fma = f"Predicated-On {letter}FMA Thread Instructions Executed Per Cycle"
            instructions = self.shown("roofline", fma, _RATES)
            found = (2 * instructions[0], instructions[1]) if instructions else None
        rates = {fma: found[0] if found else None}
        for op in ("ADD", "MUL"):
            name = f"Predicated-On {letter}{op} Thread Instructions Executed Per Cycle"
            shown = self.shown("roofline", name, _RATES)
            rates[name] = shown[0] if shown else None
            found = found or shown
        if found is None:
            return rates, None
        return rates, self.roof_clock("SM Frequency", found[1][1], achieved=True)

    def _raw_rates(self, p: _Precision) -> tuple[dict[str, float | None], float | None]:
        """The same rates by the metrics' own names, as a --page raw export has them."""
        stem = "smsp__sass_thread_inst_executed_op_"
        fma = f"derived__{stem}{p.letter}fma_pred_on_x2"
        rates = {fma: self.raw(fma, _RATES)}
        if rates[fma] is None:
            fma = f"{stem}{p.letter}fma_pred_on.sum.per_cycle_elapsed"
            instructions = self.raw(fma, _RATES)
            rates = {fma: 2 * instructions if instructions is not None else None}
        for op in ("add", "mul"):
            name = f"{stem}{p.letter}{op}_pred_on.sum.per_cycle_elapsed"
            rates[name] = self.raw(name, _RATES)
        return rates, self.raw("smsp__cycles_elapsed.avg.per_second", (Dim.HERTZ,))

    def _roofline(self, p: _Precision, duration_s: float | None,
                  duration_name: str) -> FlopTerm | None:
        """FLOPs from the achieved rates: FLOPs per cycle x the SM clock x the duration."""
        if p.roofline is None or duration_s is None:
            return None
        rates, clock = self._shown_rates(p)
        if all(r is None for r in rates.values()):
            rates, clock = self._raw_rates(p)
        present = {name: rate for name, rate in rates.items() if rate is not None}
        if not present or clock is None:
            return None
        if len(present) < len(rates):
            self._flag(NcuNoteKind.PARTIAL_SASS, f"{p.word.lower()}-precision roofline rate")
        metrics = [*present, "SM Frequency", duration_name]
        return _term(p.roofline, metrics, sum(present.values()) * clock * duration_s)

    def flops(self, duration_s: float | None,
              duration_name: str) -> tuple[list[FlopTerm], float | None]:
        terms: list[FlopTerm] = []
        for p in _PRECISIONS:
            term = self._sass(p)
            if term is None:
                count = self.raw(p.flop_count, _COUNTABLE)
                term = _term(p.flop_count_source, [p.flop_count], count)
            term = term or self._roofline(p, duration_s, duration_name)
            if term is not None:
                terms.append(term)
        names = [mid[2] for mid in self.launch.values if mid[0] == ""]
        for name in _top_level([n for n in names if _TENSOR_OPS.fullmatch(n)]):
            term = _term(FlopSource.TENSOR_OPS, [name], self.raw(name, _COUNTABLE))
            if term is not None:
                terms.append(term)
        instructions = self._tensor_instructions(names)
        self._judge(terms, instructions)
        return terms, instructions

    def _tensor_instructions(self, names: list[str]) -> float | None:
        found = [n for n in names if _TENSOR_INSTRUCTIONS.fullmatch(n)]
        per_sm = [n for n in found if n.startswith("sm__")]
        counts = [self.raw(n, _COUNTABLE) for n in _top_level(per_sm or found)]
        known = [c for c in counts if c is not None]
        return _finite(sum(known)) if known else None

    def _judge(self, terms: list[FlopTerm], instructions: float | None) -> None:
        """Flag FLOPs known to be a lower bound: a pipe with no counter."""
        tensor_ops = any(t.source is FlopSource.TENSOR_OPS for t in terms)
        if not tensor_ops and instructions:
            self._flag(NcuNoteKind.TENSOR_INSTRUCTIONS_ONLY, f"{instructions:.0f}")
        if not terms:
            self._flag(NcuNoteKind.NO_FLOP_COUNTER)
            return
        if not tensor_ops and instructions is None:
            self._flag(NcuNoteKind.NO_TENSOR_COUNTER)
        if not any(t.source in _FP32_SOURCES for t in terms):
            self._flag(NcuNoteKind.NO_CUDA_CORE_COUNTER)

    # -- roofs ---------------------------------------------------------------------

    def peak_flops(self, p: _Precision) -> float | None:
        """Peak FLOP/s of one precision's FMA pipe at the roofline's SM clock: its body
        item's, or by the metrics' own names in a --page raw export."""
        letter = p.letter.upper()
        found = self.shown("roofline", f"Theoretical Predicated-On {letter}FMA Operations",
                           _RATES)
        if found is None:
            name = f"Theoretical Predicated-On {letter}FMA Thread Instructions Executed"
            instructions = self.shown("roofline", name, _RATES)
            found = (2 * instructions[0], instructions[1]) if instructions else None
        if found is not None:
            clock = self.roof_clock("SM Frequency", found[1][1], achieved=False)
            return _product(found[0], clock)
        ops = self.raw(f"derived__sm__sass_thread_inst_executed_op_{p.letter}fma_pred_on_x2",
                       _RATES)
        if ops is None:
            name = f"sm__sass_thread_inst_executed_op_{p.letter}fma_pred_on.sum.peak_sustained"
            per_cycle = self.raw(name, _RATES)
            ops = 2 * per_cycle if per_cycle is not None else None
        return _product(ops, self.raw("sm__cycles_elapsed.avg.per_second", (Dim.HERTZ,)))

    def peak_dram(self) -> float | None:
        """Peak DRAM bytes/s: bytes per cycle x the DRAM clock of the same body item."""
        per_cycle = (Dim.BYTES_PER_CYCLE, Dim.BYTES)
        found = self.shown("roofline", "Theoretical DRAM Bytes Accessible", per_cycle)
        if found is not None:
            clock = self.roof_clock("DRAM Frequency", found[1][1], achieved=False)
            return _product(found[0], clock)
        return _product(self.raw("dram__bytes.sum.peak_sustained", per_cycle),
                        self.raw("dram__cycles_elapsed.avg.per_second", (Dim.HERTZ,)))

    def text(self, name: str) -> str | None:
        """A raw metric's text as written (a device's name), None if absent or empty."""
        value = self.launch.values.get(("", "", name))
        if value is None or not value.text.strip():
            return None
        return value.text.strip()


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _product(a: float | None, b: float | None) -> float | None:
    return _finite(a * b) if a is not None and b is not None else None


def _term(source: FlopSource, metrics: list[str], flops: float | None) -> FlopTerm | None:
    if flops is None or not math.isfinite(flops):
        return None
    return FlopTerm(source=source, metrics=metrics, flops=flops)


def _size(text: str | None) -> tuple[int, int, int] | None:
    match = _SIZE.fullmatch(text.strip()) if text else None
    if match is None:
        return None
    x, y, z = (int(g) for g in match.groups())
    return x, y, z


def _compute_capability(figures: _Figures, column: str | None) -> str | None:
    if column:
        return column
    major = figures.text("device__attribute_compute_capability_major")
    minor = figures.text("device__attribute_compute_capability_minor")
    return f"{major}.{minor}" if major and minor else None


def _counters(launch: _Launch, notes: list[NcuNote]) -> KernelCounters:
    figures = _Figures(launch, notes)
    columns = launch.columns
    duration_s, duration_name = figures.duration()
    read, write, dram = figures.dram()
    terms, instructions = figures.flops(duration_s, duration_name)
    flops = _finite(sum(t.flops for t in terms)) if terms else None
    process, launch_id, name = launch.key
    return KernelCounters(
        launch_id=launch_id,
        process_id=process,
        kernel_name=name,
        normalised_name=normalise_kernel_name(name),
        process_name=columns.get("Process Name") or None,
        device=columns.get("Device") or None,
        device_name=figures.text("device__attribute_display_name"),
        compute_capability=_compute_capability(figures, columns.get("CC")),
        block_size=_size(columns.get("Block Size")),
        grid_size=_size(columns.get("Grid Size")),
        context=columns.get("Context") or None,
        stream=columns.get("Stream") or None,
        duration_s=duration_s,
        dram_read_bytes=read,
        dram_write_bytes=write,
        dram_bytes=dram,
        l2_bytes=figures.raw("lts__t_bytes.sum", (Dim.BYTES,)),
        l1_bytes=figures.raw("l1tex__t_bytes.sum", (Dim.BYTES,)),
        flops=flops,
        flops_by_source=terms,
        flops_complete=figures.complete and flops is not None,
        tensor_instructions=instructions,
        sm_frequency_hz=figures.sm_clock(),
        dram_frequency_hz=figures.dram_clock(),
        sm_throughput_pct=figures.percent(
            ("Compute (SM) Throughput", "Compute (SM) [%]", "SM [%]", "SOL SM"),
            ("sm__throughput.avg.pct_of_peak_sustained_elapsed",)),
        dram_throughput_pct=figures.percent(
            ("DRAM Throughput", "SOL DRAM"),
            ("dram__throughput.avg.pct_of_peak_sustained_elapsed",
             "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed")),
        memory_throughput_pct=figures.percent(
            ("Memory Throughput", "Memory [%]", "SOL Memory"),
            ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",)),
        peak_dram_bytes_per_s=figures.peak_dram(),
        peak_fp32_flops_per_s=figures.peak_flops(_PRECISIONS[0]),
        peak_fp64_flops_per_s=figures.peak_flops(_PRECISIONS[1]),
        files=list(launch.paths),
    )

"""Read Nsight Compute (ncu) CSV exports into typed per-launch counters.

Files in, :class:`~batchscope.records.counters.NcuExport` out; nothing here classifies.

**Layouts.** A details export (``--page details``, a ``--section`` export, a ``--metrics``
list) has one row per metric: ``"ID","Process ID",...,"Kernel Name",...,"Section Name",
["Body Item Label",] "Metric Name","Metric Unit","Metric Value"`` and rule columns; older ncu
has ``"Kernel Time"`` instead of Block Size, Grid Size, Device and CC. A ``--page raw`` export
has one row per launch and one column per metric, its second row the units. Columns are found
by name, never by position. Whatever precedes the header row (``==PROF==`` lines, the
program's own output) is skipped, and so are ``==PROF==``/``==WARNING==`` lines after it.

**Units.** Every value is scaled by its own unit to SI base units: bytes (``Kbyte`` is 1000,
``KiB`` 1024), seconds, Hz, bytes/s. A unit without a known scale leaves its figure None with
a note; nothing is guessed. Thousands separators are read; ``n/a`` is "not collected".

**One launch, many files.** Rows of all files with the same ``(Process ID, ID, Kernel Name)``
describe one launch and are merged, unless two files disagree on one of its metrics by more
than :data:`SAME_RUN_TOLERANCE` (and by more than their printed precision): then they are
different runs and stay separate launches.

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

Example:
    >>> normalise_kernel_name("void at::native::(anonymous namespace)::k<(int)4>(float*)")
    'k<4>'
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from batchscope.errors import UsageError
from batchscope.records.counters import (
    FlopSource,
    FlopTerm,
    KernelCounters,
    NcuExport,
    NcuFile,
    NcuLayout,
    NcuNote,
    NcuNoteKind,
)

# Two files' values for one launch key further apart than this share are different runs.
SAME_RUN_TOLERANCE = 0.01
# Bytes the binary check looks at: a NUL byte there is no text export.
SNIFF_BYTES = 8192
EXPORT_HINT = "export with `ncu --csv --page details` or `--page raw`"


class NcuUnreadable(UsageError):
    """A file is not a Nsight Compute CSV export (one sentence names it and says why)."""


def _not_export(path: Path, why: str) -> NcuUnreadable:
    return NcuUnreadable(f"{path} is not a Nsight Compute CSV export: {why} ({EXPORT_HINT}).")


# ---------------------------------------------------------------------------- units


class Dim(str, Enum):
    """What a unit measures."""

    BYTES = "bytes"
    SECONDS = "seconds"
    HERTZ = "hertz"
    BYTES_PER_S = "bytes_per_s"
    COUNT = "count"  # "", inst, cycle, warp, ...: a plain number
    PER_CYCLE = "per_cycle"  # inst/cycle
    BYTES_PER_CYCLE = "bytes_per_cycle"
    PERCENT = "percent"


_DECIMAL = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "p": 1e15}
_BINARY = {"ki": 1024.0, "mi": 1024.0**2, "gi": 1024.0**3, "ti": 1024.0**4}
_TIME = {"nsecond": 1e-9, "ns": 1e-9, "usecond": 1e-6, "us": 1e-6, "µs": 1e-6, "μs": 1e-6,
         "msecond": 1e-3, "ms": 1e-3, "second": 1.0, "s": 1.0, "sec": 1.0}
_HERTZ = {"hz": 1.0, "khz": 1e3, "mhz": 1e6, "ghz": 1e9}
_COUNTS = frozenset({"", "inst", "cycle", "warp", "block", "thread", "cluster", "sector",
                     "request", "wavefront", "register", "flop", "op"})
_BYTE_UNIT = re.compile(r"(?:([kmgtp]?)bytes?|([kmgt]i)b)")


def parse_unit(text: str) -> tuple[Dim, float] | None:
    """The dimension and the factor to SI base units of an ncu unit (None: unknown).

    >>> parse_unit("Mbyte"), parse_unit("Ghz"), parse_unit("Gbyte/s")
    ((<Dim.BYTES: 'bytes'>, 1000000.0), (<Dim.HERTZ: 'hertz'>, 1000000000.0), \
(<Dim.BYTES_PER_S: 'bytes_per_s'>, 1000000000.0))
    """
    unit = text.strip().lower()
    if unit == "%":
        return Dim.PERCENT, 1.0
    if unit in _HERTZ:
        return Dim.HERTZ, _HERTZ[unit]
    if unit in _TIME:
        return Dim.SECONDS, _TIME[unit]
    if unit in _COUNTS:
        return Dim.COUNT, 1.0
    byte_scale = _bytes_scale(unit)
    if byte_scale is not None:
        return Dim.BYTES, byte_scale
    if unit.count("/") == 1:
        top, bottom = unit.split("/")
        top_bytes = _bytes_scale(top)
        if bottom == "cycle":
            if top_bytes is not None:
                return Dim.BYTES_PER_CYCLE, top_bytes
            return (Dim.PER_CYCLE, 1.0) if top in _COUNTS else None
        if bottom in _TIME:
            if top_bytes is not None:
                return Dim.BYTES_PER_S, top_bytes / _TIME[bottom]
            if top == "cycle":
                return Dim.HERTZ, 1.0 / _TIME[bottom]
    return None


def _bytes_scale(unit: str) -> float | None:
    match = _BYTE_UNIT.fullmatch(unit)
    if match is None:
        return None
    decimal, binary = match.groups()
    return _BINARY[binary] if binary else _DECIMAL[decimal or ""]


_NOT_COLLECTED = frozenset({"", "n/a", "na", "-", "--"})
_NUMBER = re.compile(r"[-+]?(?:\d[\d,]*(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")


def parse_value(text: str) -> float | None:
    """A metric value as a float: thousands separators read, ``n/a`` None.

    Raises ValueError for text that is not a number. NaN and infinity parse (the caller
    rejects them with a note).

    >>> parse_value("1,275,068,416"), parse_value("9,495.42"), parse_value("n/a")
    (1275068416.0, 9495.42, None)
    """
    cell = text.strip()
    if cell.lower() in _NOT_COLLECTED:
        return None
    if _NUMBER.fullmatch(cell):
        return float(cell.replace(",", ""))
    if cell.lower().lstrip("+-") in ("nan", "inf", "infinity"):
        return float(cell)
    raise ValueError(cell)


def _resolution(text: str) -> float:
    """One unit of the last printed digit of a number ("2.33": 0.01)."""
    mantissa = text.strip().lower().split("e")[0]
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    return 10.0 ** -decimals


# ---------------------------------------------------------------------------- one file

IDENTITY_COLUMNS = frozenset({
    "ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Kernel Time", "Context",
    "Stream", "Block Size", "Grid Size", "Device", "CC", "Section Name", "Body Item Label",
    "Metric Name", "Metric Unit", "Metric Value", "Rule Name", "Rule Type",
    "Rule Description", "Estimated Speedup Type", "Estimated Speedup"})
_LOG_LINE = re.compile(r"==[A-Za-z]+==")  # ==PROF==, ==WARNING==, ==ERROR==
# A metric's own name (dram__bytes_read.sum, flop_count_sp.sum), as opposed to a section's
# display name (Duration, SM Frequency).
_RAW_METRIC = re.compile(r"[a-z][a-z0-9_]*(?:__[a-z0-9_]+)?(?:\.[a-z0-9_]+)*")

MetricId = tuple[str, str, str]  # (section, body item label, metric name)
LaunchKey = tuple[str, str, str]  # (Process ID, ID, Kernel Name)


def metric_id(section: str, label: str, name: str) -> MetricId:
    """Where a metric is found: its own name stands alone (the same in every layout), a
    display name only within its section and body item."""
    if _RAW_METRIC.fullmatch(name) and ("__" in name or "." in name):
        return ("", "", name)
    return (section, label, name)


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


@dataclass
class _FileRead:
    info: NcuFile
    launches: list[_Launch]
    notes: list[NcuNote]


def _read_text(path: Path) -> str:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise NcuUnreadable(f"cannot read {path}: {exc.strerror or exc}.") from None
    if raw[:2] in (b"\xff\xfe", b"\xfe\xff"):  # UTF-16, as PowerShell's `>` writes it
        raw = raw.decode("utf-16", errors="replace").encode("utf-8")
    if not raw.strip():
        raise _not_export(path, "it is empty")
    if b"\x00" in raw[:SNIFF_BYTES]:
        hint = "it is a binary report" if path.suffix == ".ncu-rep" else "it is binary"
        raise _not_export(path, hint)
    return raw.decode("utf-8", errors="replace").lstrip("\ufeff")


def _header(line: str) -> tuple[list[str], NcuLayout] | None:
    """The columns and layout if ``line`` is an export's header row."""
    if not line.lstrip().startswith(('"ID"', "ID,")):
        return None
    try:
        return _header_columns(next(csv.reader([line])))
    except (csv.Error, StopIteration):
        return None


def _header_columns(row: list[str]) -> tuple[list[str], NcuLayout] | None:
    """The columns and layout if ``row`` names an export's columns: the first is ID, one is
    Kernel Name, and either Metric Name and Metric Value (details) or metrics (raw)."""
    columns = [c.strip() for c in row]
    if not columns or columns[0] != "ID" or "Kernel Name" not in columns:
        return None
    if "Metric Name" in columns and "Metric Value" in columns:
        return columns, NcuLayout.DETAILS
    if any(c and c not in IDENTITY_COLUMNS for c in columns):
        return columns, NcuLayout.RAW
    return None


def _whole_last_line(line: str, needed: int) -> bool:
    """Whether a last line without a newline is a whole row: a cut inside a quoted value
    leaves an odd quote count; a cut after a comma leaves too few fields (the empty field
    after a final comma is not one); an unquoted last field may be cut, so it is not whole."""
    stripped = line.rstrip()
    if stripped.count('"') % 2 or not stripped.endswith(('"', ",")):
        return False
    fields = next(csv.reader([stripped]), [])
    return len(fields) - stripped.endswith(",") >= needed


def _positions(columns: list[str]) -> dict[str, int]:
    """Each column's position (its first, where a name repeats)."""
    return {c: i for i, c in reversed(list(enumerate(columns)))}


def _rows(lines: list[str]) -> Iterator[list[str] | None]:
    """The csv rows of ``lines``, ncu's log lines left out; None for a row csv cannot read."""
    kept = (ln for ln in lines if ln.strip() and not _LOG_LINE.match(ln))
    reader = csv.reader(kept)
    while True:
        try:
            yield next(reader)
        except StopIteration:
            return
        except csv.Error:
            yield None


class _FileReader:
    """Reads one export into launches, with its notes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.name = str(path)
        self.notes: list[NcuNote] = []
        self.launches: dict[LaunchKey, _Launch] = {}
        self.metric_rows = 0
        self.skipped = 0

    def read(self) -> _FileRead:
        lines = _read_text(self.path).splitlines(keepends=True)
        found = next(((i, h) for i, ln in enumerate(lines) if (h := _header(ln))), None)
        if found is None:
            raise _not_export(self.path, "no row names the columns ID, Kernel Name and "
                                         "Metric Value")
        start, (columns, layout) = found
        body = lines[start + 1:]
        needed = (columns.index("Metric Value") + 1 if layout is NcuLayout.DETAILS
                  else len(columns))
        truncated = bool(body) and not body[-1].endswith(("\n", "\r"))
        truncated = truncated and not _whole_last_line(body[-1], needed)
        if truncated:
            body = body[:-1]
            self.notes.append(NcuNote(NcuNoteKind.TRUNCATED, self.name))
        self._read_body(columns, layout, body)
        if self.metric_rows == 0:
            why = "it has no whole metric row under its header"
            raise _not_export(self.path, why + (" (it is cut short)" if truncated else ""))
        if self.skipped:
            self.notes.append(NcuNote(NcuNoteKind.MALFORMED_ROWS, self.name,
                                      text=str(self.skipped)))
        info = NcuFile(path=self.name, layout=layout, header_line=start + 1,
                       metric_rows=self.metric_rows, launches=len(self.launches),
                       skipped_rows=self.skipped, truncated=truncated)
        return _FileRead(info, list(self.launches.values()), self.notes)

    def _read_body(self, columns: list[str], layout: NcuLayout, body: list[str]) -> None:
        units: list[str] | None = None
        first = True
        at = _positions(columns)
        for row in _rows(body):
            if row is None:
                self.skipped += 1
                continue
            again = _header_columns(row) if row[:1] == ["ID"] else None
            if again is not None:  # a second export appended to the first
                (columns, layout), units, first = again, None, True
                at = _positions(columns)
                continue
            if layout is NcuLayout.RAW:
                if first and not row[0].strip():
                    units, first = row, False
                    continue
                if first:
                    self.notes.append(NcuNote(NcuNoteKind.NO_UNITS, self.name))
                first = False
                self._raw_row(columns, units, row)
            else:
                if first and "Metric Unit" not in columns:
                    self.notes.append(NcuNote(NcuNoteKind.NO_UNITS, self.name))
                first = False
                self._details_row(columns, at, row)

    def _launch(self, columns: list[str], row: list[str]) -> _Launch | None:
        cells = {c: row[i].strip() for i, c in enumerate(columns)
                 if c in IDENTITY_COLUMNS and i < len(row)}
        if not cells.get("ID"):
            return None
        key = (cells.get("Process ID", ""), cells["ID"], cells.get("Kernel Name", ""))
        launch = self.launches.get(key)
        if launch is None:
            launch = self.launches[key] = _Launch(key, cells, paths=[self.name])
        return launch

    def _details_row(self, columns: list[str], at: dict[str, int], row: list[str]) -> None:
        """One metric's row; ``at`` is each column's (first) position."""
        if len(row) <= max(at["Metric Name"], at["Metric Value"]):
            self.skipped += 1
            return
        name = row[at["Metric Name"]].strip()
        if not name:  # a rule's row: advice, no metric
            return
        launch = self._launch(columns, row)
        if launch is None:
            self.skipped += 1
            return

        def cell(column: str) -> str:
            index = at.get(column)
            return row[index].strip() if index is not None and index < len(row) else ""

        mid = metric_id(cell("Section Name"), cell("Body Item Label"), name)
        unit = cell("Metric Unit") if "Metric Unit" in at else None
        launch.values.setdefault(mid, _Value(row[at["Metric Value"]], unit, self.name))
        self.metric_rows += 1

    def _raw_row(self, columns: list[str], units: list[str] | None, row: list[str]) -> None:
        launch = self._launch(columns, row) if len(row) >= len(columns) else None
        if launch is None:
            self.skipped += 1
            return
        for i, column in enumerate(columns):
            if column and column not in IDENTITY_COLUMNS:
                unit = units[i].strip() if units is not None and i < len(units) else None
                launch.values.setdefault(("", "", column), _Value(row[i], unit, self.name))
        self.metric_rows += 1


# ---------------------------------------------------------------------------- merging


def _si(value: _Value) -> tuple[float, float, Dim] | None:
    """A value in SI units with its printed resolution, where both number and unit read."""
    try:
        number = parse_value(value.text)
    except ValueError:
        return None
    parsed = parse_unit(value.unit) if value.unit is not None else None
    if number is None or parsed is None or not math.isfinite(number):
        return None
    dim, scale = parsed
    return number * scale, _resolution(value.text) * scale, dim


def _disagreement(a: _Launch, b: _Launch) -> str | None:
    """The first metric both launches record whose values are too far apart to be one run."""
    for mid in [m for m in a.values if m in b.values]:
        x, y = _si(a.values[mid]), _si(b.values[mid])
        if x is None or y is None or x[2] != y[2]:
            continue
        gap = abs(x[0] - y[0])
        if gap > SAME_RUN_TOLERANCE * max(abs(x[0]), abs(y[0])) and gap > max(x[1], y[1]):
            return mid[2]
    return None


def _merge(reads: list[_FileRead], notes: list[NcuNote]) -> list[_Launch]:
    merged: list[_Launch] = []
    by_key: dict[LaunchKey, list[_Launch]] = {}
    for read in reads:
        for launch in read.launches:
            same_key = by_key.setdefault(launch.key, [])
            verdicts = [(m, _disagreement(m, launch)) for m in same_key]
            target = next((m for m, differs in verdicts if differs is None), None)
            if target is None:
                merged.append(launch)
                same_key.append(launch)
                if verdicts:
                    notes.append(NcuNote(NcuNoteKind.SEPARATE_RUNS, read.info.path,
                                         _launch_label(launch.key), text=verdicts[0][1]))
                continue
            for mid, value in launch.values.items():
                target.values.setdefault(mid, value)
            target.paths.extend(p for p in launch.paths if p not in target.paths)
    return merged


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
        raw = self.raw("gpu__time_duration.sum", (Dim.SECONDS,))
        if raw is not None:
            return raw, "gpu__time_duration.sum"
        return self.sol("Duration", (Dim.SECONDS,)), "Duration"

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


def read_ncu_exports(paths: Sequence[Path]) -> NcuExport:
    """Read Nsight Compute CSV exports into one record per kernel launch.

    Rows of all files that describe the same launch are merged (see the module's docstring).

    Raises:
        NcuUnreadable: a file is not an ncu CSV export (empty, binary, no header row, no
            whole metric row), or cannot be read.

    Example:
        >>> from pathlib import Path
        >>> folder = Path("tests/data/ncu/deepseek-ocr-rtx5090")
        >>> export = read_ncu_exports(sorted(folder.glob("kernel_0003_*/*.csv")))
        >>> [(k.launch_id, k.duration_s, k.dram_bytes) for k in export.kernels]
        [('0', 2.342e-05, 3350000.0)]
    """
    reads = [_FileReader(Path(p)).read() for p in paths]
    notes = [note for read in reads for note in read.notes]
    kernels = [_counters(launch, notes) for launch in _merge(reads, notes)]
    return NcuExport(kernels=kernels, files=[r.info for r in reads], notes=notes)


# ---------------------------------------------------------------------------- kernel names

# Placeholders that keep a lambda's argument list and a call operator's "()" out of the
# removal of parameter lists; put back at the end.
_OPEN, _CLOSE, _CALL = "\x01", "\x02", "\x03"
_WS = re.compile(r"\s+")
_CAST = re.compile(r"\((?:(?:unsigned|signed) )?(?:char|short|int|long|long long|bool|"
                   r"unsigned|size_t)\)(?=-?\d)")
_INT_SUFFIX = re.compile(r"\b(\d+)(?:ull|ul|ll|u|l)\b", re.IGNORECASE)
_NCU_LAMBDA = re.compile(r"\[?lambda\(([^()]*)\) \(instance (\d+)\)\]?")
_KINETO_LAMBDA = re.compile(r"\{lambda\(([^()]*)\)#(\d+)\}")
_BEFORE_LAMBDA = re.compile(r"(?:::|\s)*\{lambda")
_CALL_OPERATOR = re.compile(r"operator\s*\(\)")
# ncu's "<unnamed>" namespace, and what a shortened ncu name leaves of it ("unnamed>::")
_UNNAMED = re.compile(r"(?:(?<=::)|(?<=^)|(?<=[\s,<]))<unnamed>::")
# ncu names a function inside template arguments with its return type ("void f<...>(...)")
_VOID_RETURN = re.compile(r"\bvoid\s+(?=[A-Za-z_])")
_QUALIFIER = re.compile(r"\b[A-Za-z_]\w*::")
_PUNCTUATION_SPACE = re.compile(r"\s*([<>,*&(){}\[\]#:!\x01\x02\x03])\s*")


def _outside_parentheses(text: str) -> str:
    """``text`` without its parenthesised groups (function parameter lists)."""
    kept, depth = [], 0
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth = max(depth - 1, 0)
        elif depth == 0:
            kept.append(char)
    return "".join(kept)


def _last_top_level_word(text: str) -> str:
    """What follows the last space outside <> and (): the name without its return type."""
    depth, start = 0, 0
    for i, char in enumerate(text):
        if char in "<(":
            depth += 1
        elif char in ">)":
            depth = max(depth - 1, 0)
        elif char == " " and depth == 0:
            start = i + 1
    return text[start:]


def normalise_kernel_name(name: str) -> str:
    """One form of a kernel's name for ncu's and Kineto's spellings of it, to join on.

    Both demangle the same symbol differently: ncu writes ``<unnamed>``, ``(int)4``,
    ``[lambda() (instance 1)]``, ``char *`` and (since 2024) its parameter lists in template
    placeholders, ``(int, T2, T3)``, and may shorten namespaces away; Kineto writes
    ``(anonymous namespace)``, ``4``, ``4ul``, ``true``, ``{lambda()#1}``, ``char*`` and ``T
    const&``. The form keeps the kernel's own name, its template arguments and its lambdas'
    numbers; it drops namespaces, the return type (``void``), every parameter list, ``const``
    and casts, and spaces no C++ token needs. It is for matching, not for display.

    >>> kineto = ("void at::native::f<4, at::native::(anonymous namespace)::g("
    ...           "at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda("
    ...           "c10::BFloat16)#1}, std::array<char*, 2ul> >(int, std::array<char*, 2ul>)")
    >>> ncu = ("void f<4, unnamed>::g(TensorIteratorBase &)::[lambda() (instance 1)]::"
    ...        "operator ()() lambda(BFloat16) (instance 1)], array<char *, 2>>(int, T2)")
    >>> normalise_kernel_name(kineto)
    'f<4, g{lambda()#1}::operator(){lambda(BFloat16)#1}, array<char*, 2>>'
    >>> normalise_kernel_name(ncu) == normalise_kernel_name(kineto)
    True
    """
    text = _WS.sub(" ", name).strip()
    text = _CAST.sub("", text)
    text = _INT_SUFFIX.sub(r"\1", text)
    text = re.sub(r"\btrue\b", "1", re.sub(r"\bfalse\b", "0", text))
    text = re.sub(r"\bconst\b", "", text)
    text = _VOID_RETURN.sub("", text)
    text = _NCU_LAMBDA.sub(r"{lambda(\1)#\2}", text)
    text = _KINETO_LAMBDA.sub(lambda m: "{lambda" + _OPEN + m[1] + _CLOSE + "#" + m[2] + "}",
                              text)
    text = _CALL_OPERATOR.sub("operator" + _CALL, text)
    text = _BEFORE_LAMBDA.sub("{lambda", text)
    text = text.replace("(anonymous namespace)::", "")
    text = _UNNAMED.sub("", text).replace("unnamed>::", "")
    text = _WS.sub(" ", _PUNCTUATION_SPACE.sub(r"\1", text)).strip()
    text = _outside_parentheses(_last_top_level_word(text))
    text = _QUALIFIER.sub("", text).lstrip(":")
    text = _PUNCTUATION_SPACE.sub(r"\1", text).replace(",", ", ")
    return text.replace(_OPEN, "(").replace(_CLOSE, ")").replace(_CALL, "()")

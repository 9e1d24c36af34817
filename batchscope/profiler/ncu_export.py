"""Read Nsight Compute (ncu) CSV exports into typed per-launch counters.

Files in, :class:`~batchscope.records.counters.NcuExport` out; nothing here classifies.

**Layouts.** A details export (``--page details``, a ``--section`` export, a ``--metrics``
list) has one row per metric: ``"ID","Process ID",...,"Kernel Name",...,"Section Name",
["Body Item Label",] "Metric Name","Metric Unit","Metric Value"`` and rule columns; older ncu
has ``"Kernel Time"`` instead of Block Size, Grid Size, Device and CC. A ``--page raw`` export
has one row per launch and one column per metric, its second row the units. Columns are found
by name, never by position. Whatever precedes the header row (``==PROF==`` lines, the
program's own output) is skipped, and so are ``==PROF==``/``==WARNING==`` lines after it.

**One launch, many files.** Rows of all files with the same ``(Process ID, ID, Kernel Name)``
describe one launch and are merged, unless two files disagree on one of its metrics by more
than :data:`SAME_RUN_TOLERANCE` (and by more than their printed precision): then they are
different runs and stay separate launches.

**Elsewhere.** Units and values are read by :mod:`batchscope.profiler.ncu_units`, kernel names
normalised by :mod:`batchscope.profiler.ncu_names`, and a merged launch's FLOPs, bytes and roofs
found by :mod:`batchscope.profiler.ncu_figures`; the names other code imports from here are
re-exported.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from batchscope.errors import UsageError
from batchscope.profiler.ncu_figures import (
    LaunchKey,
    MetricId,
    _counters,
    _Launch,
    _launch_label,
    _Value,
)
from batchscope.profiler.ncu_names import normalise_kernel_name as normalise_kernel_name
from batchscope.profiler.ncu_units import Dim, _resolution
from batchscope.profiler.ncu_units import parse_unit as parse_unit
from batchscope.profiler.ncu_units import parse_value as parse_value
from batchscope.records.counters import (
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


def metric_id(section: str, label: str, name: str) -> MetricId:
    """Where a metric is found: its own name stands alone (the same in every layout), a
    display name only within its section and body item."""
    if _RAW_METRIC.fullmatch(name) and ("__" in name or "." in name):
        return ("", "", name)
    return (section, label, name)


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

"""``diagnose ncu``: the report of Nsight Compute CSV exports, every kernel launch they
profiled on the roofline with its measured DRAM bytes and FLOPs (report.json ``counters``).

Nothing runs here: the exports are read (:mod:`batchscope.profiler.ncu_export`), placed under the
roofs of the GPU named with ``--gpu`` (its datasheet) or, without it, the exports' own
roofline section (:mod:`batchscope.classifiers.kernel_roofline`), and written as the usual
three files.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path

from batchscope.assemble import Measured, assemble
from batchscope.classifiers.kernel_roofline import counters_section
from batchscope.hardware.gpu_specs import resolve as resolve_gpu
from batchscope.profiler.ncu_export import read_ncu_exports
from batchscope.records import ModelInfo, Report, RunInfo
from batchscope.records.counters import NcuExport
from batchscope.records.report import Source
from batchscope.reports import write_all
from batchscope.version import __version__


def read_exports(paths: Sequence[str | Path]) -> NcuExport:
    """:func:`~batchscope.profiler.ncu_export.read_ncu_exports` of ``paths``.

    Raises:
        NcuUnreadable: a file is not an ncu CSV export (a UsageError: exit 4).
    """
    return read_ncu_exports([Path(p) for p in paths])


def exports_name(paths: Sequence[str | Path]) -> str:
    """What the report calls the exports: the file's name, or the folder that holds them
    all and how many there are.

    Example:
        >>> exports_name(["run/k1/ncu.details.csv", "run/k2/ncu.details.csv"])
        'run (2 ncu exports)'
    """
    if len(paths) == 1:
        return Path(paths[0]).name
    parents = [str(Path(p).resolve().parent) for p in paths]
    common = Path(os.path.commonpath(parents))
    return f"{common.name or common} ({len(paths)} ncu exports)"


def diagnose_ncu(paths: Sequence[str | Path], gpu: str | None = None,
                 out_dir: str | None = None) -> Report:
    """Read ``paths`` (ncu CSV exports: ``--page details``, section exports, ``--page
    raw``; the rows of one launch may be spread over several files), classify every launch,
    and write report.json/html and summary.md into ``out_dir`` (None: write nothing).

    Raises:
        UsageError: ``gpu`` names no part in the datasheet table, or an export is not an
            ncu CSV export (one sentence naming the file; exit 4).
    """
    started = time.time()
    spec = None
    if gpu is not None:
        spec = resolve_gpu(gpu, "--gpu", "leave it out to use the exports' own roofline "
                           "section")
    export = read_exports(paths)
    section = counters_section(export, spec)
    device = section.device or (f"GPU of compute capability {section.compute_capability}"
                                if section.compute_capability else "unknown GPU")
    report = assemble(Measured(
        model=ModelInfo(target=exports_name(paths), device=device),
        run=RunInfo(source=Source.NCU, tool_version=__version__,
                    started_at=time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
                    wall_s=time.time() - started),
        ceilings=None, results=[], counters=section))
    if out_dir is not None:
        write_all(report, out_dir)
    return report

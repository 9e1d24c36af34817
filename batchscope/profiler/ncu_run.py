"""Run one step of the model under Nsight Compute (``diagnose model.py --ncu``).

Per batch size, ``ncu`` starts :mod:`batchscope.profiler.ncu_step` in a process of its own
and profiles the kernels of its one step (``--profile-from-start off``: only inside the
step's ``cudaProfilerStart``/``Stop``), writing a ``--page raw`` CSV: one row per kernel
launch, one column per metric, which :mod:`batchscope.profiler.ncu_export` reads.

The settings are ncu's defaults, passed explicitly and recorded (``counters.cache_control``
and ``clock_control``): every cache flushed before each kernel (``--cache-control all``: a
kernel reads its inputs from DRAM even where a real step would find them in L2) and the
clocks locked to base (``--clock-control base``: rates below the boost clock's).

Where counters are not permitted (``ERR_NVGPUCTRPERM``, common on rented GPUs) or ncu
fails, the run says so in one sentence and the sweep goes on without counters.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from batchscope.profiler.worker_config import (
    WORKER_CONFIG_ENV,
    WorkerConfig,
    worker_config_to_json,
)

# The counters asked for: DRAM, L2 and L1 bytes, the duration, the CUDA cores' FLOPs by
# SASS instruction (add, mul, fma at each precision), the tensor pipe's operations at every
# precision it has, and its instructions; the roofline section for the GPU's own roofs.
NCU_METRICS = (
    "gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum",
    "lts__t_bytes.sum", "l1tex__t_bytes.sum",
    *(f"smsp__sass_thread_inst_executed_op_{p}{op}_pred_on.sum"
      for p in ("f", "h", "d") for op in ("add", "mul", "fma")),
    "regex:sm__ops_path_tensor_src_.*\\.sum$", "sm__inst_executed_pipe_tensor.sum",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
)
CACHE_CONTROL = "all"
CLOCK_CONTROL = "base"
NCU_ENV = "BATCHSCOPE_NCU"  # the ncu executable, where it is not ``ncu`` on PATH
PERMISSION_ERROR = "ERR_NVGPUCTRPERM"


class NcuFailure(str, Enum):
    """Why a batch size has no counters (reports/flag_text.py words each)."""

    NOT_STARTED = "not_started"  # ncu could not be started (detail: the OS's reason)
    PERMISSION = "permission"  # ERR_NVGPUCTRPERM: counters are for admins only here
    TIMEOUT = "timeout"  # detail: the seconds allowed
    EXITED = "exited"  # detail: the exit status and ncu's last error line
    NOTHING_WRITTEN = "nothing_written"  # ncu's log file is empty
    UNREADABLE = "unreadable"  # detail: the reader's sentence (no kernel profiled, ...)
    INTERRUPTED = "interrupted"  # Ctrl-C or SIGTERM during the ncu phase
    ERROR = "error"  # detail: what went wrong outside ncu (a folder not writable, ...)


@dataclass(frozen=True)
class NcuRun:
    """One batch size profiled: the CSV ncu wrote, or why there is none."""

    batch_size: int
    csv_path: str | None
    failure: NcuFailure | None = None
    detail: str = ""


def find_ncu() -> str | None:
    """The ncu to run: ``$BATCHSCOPE_NCU``, else ``ncu`` on PATH; None where neither."""
    named = os.environ.get(NCU_ENV)
    if named:
        return named if Path(named).exists() or shutil.which(named) else None
    return shutil.which("ncu")


def ncu_command(ncu: str, log_file: str, batch_size: int) -> list[str]:
    """The command line: ncu, its options, then the step's process."""
    return [ncu, "--csv", "--page", "raw", "--log-file", log_file,
            "--profile-from-start", "off", "--target-processes", "all",
            "--cache-control", CACHE_CONTROL, "--clock-control", CLOCK_CONTROL,
            "--metrics", ",".join(NCU_METRICS), "--section", "SpeedOfLight_RooflineChart",
            sys.executable, "-m", "batchscope.profiler.ncu_step", str(batch_size)]


def _kill(proc: subprocess.Popen[str]) -> None:
    """ncu and the step it runs, in the session they were started in."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()


def _last_error(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if "==ERROR==" in line]
    if lines:
        return lines[-1].replace("==ERROR==", "").strip()
    tail = [line.strip() for line in text.splitlines() if line.strip()]
    return tail[-1] if tail else "no output"


def run_ncu(ncu: str, config: WorkerConfig, batch_size: int, out_dir: Path,
            timeout_s: float) -> NcuRun:
    """Profile one step at ``batch_size``; the CSV goes to ``out_dir``. Never raises for
    what ncu or the step did: the result says what failed."""
    out_dir.mkdir(parents=True, exist_ok=True)
    log_file = out_dir / f"ncu-batch-{batch_size}.csv"
    with contextlib.suppress(FileNotFoundError):
        log_file.unlink()
    env = {**os.environ, **(config.env or {}), WORKER_CONFIG_ENV: worker_config_to_json(config)}
    try:
        proc = subprocess.Popen(ncu_command(ncu, str(log_file), batch_size), env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
    except OSError as exc:
        return NcuRun(batch_size, None, NcuFailure.NOT_STARTED, str(exc.strerror or exc))
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill(proc)
        return NcuRun(batch_size, None, NcuFailure.TIMEOUT, f"{timeout_s:.0f}")
    except KeyboardInterrupt:  # its own session: the terminal's Ctrl-C did not reach it
        _kill(proc)
        raise
    logged = log_file.read_text(errors="replace") if log_file.exists() else ""
    everything = output + logged
    if PERMISSION_ERROR in everything:
        return NcuRun(batch_size, None, NcuFailure.PERMISSION)
    if proc.returncode != 0:
        return NcuRun(batch_size, None, NcuFailure.EXITED,
                      f"status {proc.returncode}: {_last_error(everything)}")
    if not logged.strip():
        return NcuRun(batch_size, None, NcuFailure.NOTHING_WRITTEN)
    return NcuRun(batch_size, str(log_file))

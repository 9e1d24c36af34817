"""What the parent tells a new worker, importable without torch.

The parent process (the CLI, :mod:`batchscope.api`, :mod:`batchscope.profiler.supervisor`)
never imports torch: only the worker needs it, and importing it in both processes, one after
the other, cost ~1.5 s of every run on a 2-core CPU.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from batchscope.profiler.timing import TimingConfig
from batchscope.typed_json import decode, to_builtins

# glibc's malloc keeps what it frees mapped, in its heap, when these exceed the largest
# buffer: the environment of the worker that times the batch sizes again side by side
# (classifiers/allocator.py). 1 TiB: glibc 2.36 takes it from the environment.
KEPT_BUFFERS_ENV = {"MALLOC_MMAP_THRESHOLD_": str(2**40), "MALLOC_TRIM_THRESHOLD_": str(2**40)}

# The environment variable a worker started by another program (torch's launcher, ncu)
# reads its WorkerConfig from, as JSON (worker_config_to_json).
WORKER_CONFIG_ENV = "BATCHSCOPE_WORKER_CONFIG"

# The --dtype names the worker understands (batchscope.profiler.worker.DTYPES maps them).
DTYPE_NAMES = ("fp32", "float32", "bf16", "bfloat16", "fp16", "float16")
# torch.compile's modes (--compile-mode).
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
# The --amp names: autocast's lower precision, the model's weights staying fp32.
AMP_NAMES = ("bf16", "bfloat16", "fp16", "float16")


@dataclass
class WorkerConfig:
    """What the parent tells a new worker."""

    model_path: str
    callables: dict[str, Any] | None = None  # API use: build_model, make_inputs, ... by name
    device: str = "cpu"
    dtype: str = "fp32"
    mode: str | None = None  # None: the model file's MODE
    threads: int | None = None
    timing: TimingConfig = field(default_factory=TimingConfig)
    op_breakdown: bool = True  # capture + counting passes
    trace_dir: str | None = None
    recalibrate: bool = False  # distributed ranks: measure the all-reduce bandwidth again
    contexts: list[int] | None = None  # --contexts: replaces the file's CONTEXTS
    seq_lens: list[int] | None = None  # --seq-lens: replaces the file's SEQ_LENS
    env: dict[str, str] | None = None  # set in the worker's environment before it starts
    amp: str | None = None  # --amp: forward and loss under torch.autocast in this dtype
    compile_mode: str | None = None  # --compile: torch.compile(model, mode=...) in the worker


def worker_config_to_json(config: WorkerConfig) -> str:
    """``config`` as JSON text (a distributed sweep passes it to its ranks in the
    environment; model files only: ``callables`` cannot cross)."""
    return json.dumps(to_builtins(config))


def worker_config_from_json(text: str) -> WorkerConfig:
    """The :class:`WorkerConfig` that :func:`worker_config_to_json` wrote, every field
    typed."""
    return decode(json.loads(text), WorkerConfig)

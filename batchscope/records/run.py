"""What ``diagnose`` can be told: the options of a sweep, as data (report.json ``run.options``).

The checks live with the API (``batchscope.api.validate_options``), which knows the dtypes,
devices and objectives the layers below it accept; here is only what a report records.
"""

from __future__ import annotations

from dataclasses import dataclass

# Powers of two up to this unless --max-batch says otherwise: far past the knee of the
# models we target, and the plateau rule stops long before it on most of them.
DEFAULT_MAX_BATCH = 1024
# A batch size that takes longer than this (warm-up, timing, profiling, counting together) is
# stopped as `timeout`; a hung step must not hang the sweep.
DEFAULT_BATCH_TIMEOUT_S = 600.0
DEFAULT_OUT_DIR = "batchscope-report"


@dataclass
class Options:
    """Everything ``diagnose`` can be told; checked by ``api.validate_options`` before any
    import of the model."""

    device: str = "auto"
    dtype: str = "fp32"
    amp: str | None = None  # "bf16" or "fp16": torch.autocast over forward and loss
    compile_mode: str | None = None  # torch.compile's mode ("default", ...): compile the model
    batch_sizes: list[int] | None = None
    max_batch: int = DEFAULT_MAX_BATCH
    latency_limit_s: float | None = None
    memory_budget_bytes: int | None = None
    out_dir: str | None = DEFAULT_OUT_DIR
    min_time_s: float | None = None  # None: adaptive (TimingConfig); else fixed seconds
    batch_timeout_s: float = DEFAULT_BATCH_TIMEOUT_S
    threads: int | None = None
    trace: bool = False
    recalibrate: bool = False
    op_breakdown: bool = True
    measure_ceilings: bool = True
    measure_all: bool = False  # every batch size up to max_batch: no plateau or predicted stop
    # Predict (never measure) every power of two up to this too: a model too slow or too
    # large to sweep that far (step_model; the report labels them and any pick they make).
    predict_to: int | None = None
    # CPU: time the batch sizes whose page faults were flagged again, with the allocator
    # keeping its buffers, side by side (classifiers/allocator.py).
    allocator_check: bool = True
    # The decision rounds (profiler/rounds_run.py): the plateau and predicted stops checked
    # on paired rounds, and the pick made from them. False (--no-rounds, or
    # BATCHSCOPE_NO_ROUNDS=1): every decision reads the sequential timings, faster, and the
    # report's evidence says so.
    rounds: bool = True
    # --budget: seconds the whole sweep may take, plan and rounds (None: no limit).
    budget_s: float | None = None
    # --ncu: one step at each measured batch size under Nsight Compute (profiler/ncu_run.py)
    ncu: bool = False
    mode: str | None = None
    objective: str = "throughput"  # or "energy": J per unit from NVML, where measured
    # Data parallel (profiler/launcher.py): torchrun's arguments; None: one process.
    nproc_per_node: int | None = None
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str = ""
    global_batch: int | None = None  # the global batch to reach with gradient accumulation
    # Decode models: context lengths for make_inputs(batch_size, context), replacing the
    # file's CONTEXTS; the sweep runs at the first, the context grid at all of them.
    contexts: list[int] | None = None
    # Sequence models: row lengths for make_inputs(batch_size, seq_len), replacing the
    # file's SEQ_LENS; the sweep runs at the first, the batch × length grid at all of them.
    seq_lens: list[int] | None = None

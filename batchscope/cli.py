"""The ``diagnose`` command: parses options and calls the library, nothing more.

``diagnose model.py [options]`` runs the sweep; ``diagnose hardware`` prints this machine's
measured ceilings. Results go to files (and the summary to stdout); progress and errors go
to stderr. Exit codes are documented in README.md and :class:`batchscope.errors.ExitCode`.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import re
import signal
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from batchscope.api import (
    DEFAULT_OUT_DIR,
    Options,
    diagnose_file,
    exit_code,
    follow_node_zero,
    nothing_measured_message,
    validate_options,
)
from batchscope.errors import BatchscopeError, ExitCode, ModelFileError, UsageError
from batchscope.integrations.hf_models import (
    DEFAULT_SEQ_LEN,
    is_hf_target,
    write_model_file,
)
from batchscope.integrations.hf_models import TASKS as HF_TASKS
from batchscope.plan import parse_batch_sizes, parse_ordered_batch_sizes
from batchscope.profiler.supervisor import InterruptHold, reap_children
from batchscope.records.run import DEFAULT_MAX_BATCH
from batchscope.reports.compare import RUN_DRIFT
from batchscope.reports.console import (
    ProgressCallbacks,
    make_console,
    print_bus_bandwidths,
    print_ceilings,
    print_gpu_specs,
)
from batchscope.reports.kinds import print_summary

if TYPE_CHECKING:
    from batchscope.records import Report
    from batchscope.serving.whatif import WhatIfOptions

err_console = make_console(stderr=True)
out_console = make_console()

SUBCOMMANDS = ("hardware", "compare", "trace", "ncu", "serve")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "kib": 2**10, "m": 10**6, "mb": 10**6,
               "mib": 2**20, "g": 10**9, "gb": 10**9, "gib": 2**30, "t": 10**12, "tb": 10**12,
               "tib": 2**40}


def parse_size(text: str, option: str = "--memory-budget") -> int:
    """``"8GiB"``, ``"500MB"`` or a plain byte count -> bytes."""
    match = _SIZE.match(text)
    unit = (match.group(2) or "").lower() if match else None
    if match is None or unit not in _SIZE_UNITS:
        raise UsageError(f"{option} {text!r} is not a size such as 8GiB or 500MB.")
    return int(float(match.group(1)) * _SIZE_UNITS[unit])


def parse_contexts(text: str, option: str = "--contexts") -> list[int]:
    """``"128,512,1024"`` -> token counts in the order given (the first is the sweep's)."""
    values = []
    for part in text.split(","):
        try:
            values.append(int(part.strip()))
        except ValueError:
            raise UsageError(f"{option} {text!r}: {part.strip()!r} is not a whole number of "
                             "tokens; write e.g. 128,512,1024.") from None
    return values


def fail(exc: BatchscopeError) -> typer.Exit:
    err_console.print(f"[bold red]error:[/] {escape(str(exc))}", markup=True, soft_wrap=True)
    detail = exc.detail if isinstance(exc, ModelFileError) else ""
    if detail:
        err_console.print(detail, markup=False, highlight=False)
    return typer.Exit(code=int(exc.exit_code))


# A second interrupt ends the command at once: its SIGKILLed workers are usually gone within
# milliseconds, and one stuck in the kernel for longer is not waited for past this.
EXIT_NOW_REAP_S = 5.0


def _sigterm_as_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _reap_and_exit_now(signum: int, frame: object) -> None:
    """A second Ctrl-C or SIGTERM while the partial report is written: out at once, but
    with every worker killed and waited for, so none is left in the caller's process group."""
    reap_children(within_s=EXIT_NOW_REAP_S)
    os._exit(int(ExitCode.INTERRUPTED))


class _Progress(ProgressCallbacks):
    """The progress bar, whose second-interrupt handler also reaps the workers."""

    def on_interrupt(self) -> None:
        super().on_interrupt()  # says so, and sets the handlers for a second interrupt
        signal.signal(signal.SIGINT, _reap_and_exit_now)
        signal.signal(signal.SIGTERM, _reap_and_exit_now)


diagnose_app = typer.Typer(add_completion=False, rich_markup_mode=None)


@diagnose_app.command()
def diagnose(
    model: Annotated[
        Path,
        typer.Argument(
            help="Model file (build_model, make_inputs; see README), or hf:MODEL_ID_OR_PATH with "
            "--task.",
        ),
    ],
    out: Annotated[
        Path, typer.Option("--out", help="Folder for report.json/html and summary.md.")
    ] = Path(DEFAULT_OUT_DIR),
    batch_sizes: Annotated[
        str | None, typer.Option("--batch-sizes", help="Explicit list, e.g. 1,2,4,8.")
    ] = None,
    max_batch: Annotated[
        int, typer.Option("--max-batch", help="Largest batch size to try.")
    ] = DEFAULT_MAX_BATCH,
    measure_all: Annotated[
        bool,
        typer.Option(
            "--measure-all",
            help="Measure every batch size up to --max-batch: no stop when throughput plateaus or "
            "the step-time model predicts the rest cannot change the pick.",
        ),
    ] = False,
    predict_to: Annotated[
        int | None,
        typer.Option(
            "--predict-to",
            help="Predict, never measure, every power of two up to this batch size with the "
            "step-time model fitted on the measured ones (a model too slow or too large to sweep "
            "that far, e.g. --batch-sizes 1,2,4,8 --predict-to 1024): the report labels them, and "
            "says which would be the pick if they hold.",
        ),
    ] = None,
    latency_limit_ms: Annotated[
        float | None,
        typer.Option("--latency-limit-ms", help="Stop above this median step latency."),
    ] = None,
    memory_budget: Annotated[
        str | None, typer.Option("--memory-budget", help="Stop above this peak memory, e.g. 8GiB.")
    ] = None,
    device: Annotated[str, typer.Option("--device", help="auto, cpu, cuda or cuda:N.")] = "auto",
    dtype: Annotated[str, typer.Option("--dtype", help="fp32, bf16 or fp16.")] = "fp32",
    compile_model: Annotated[
        bool,
        typer.Option(
            "--compile",
            help="Run the model under torch.compile (inductor); the report separates each shape's "
            "compile (first step) from the step time, and attributes the compiled kernels to ops "
            "where it can.",
        ),
    ] = False,
    compile_mode: Annotated[
        str | None,
        typer.Option(
            "--compile-mode",
            help="torch.compile's mode with --compile: default, reduce-overhead, max-autotune.",
        ),
    ] = None,
    amp: Annotated[
        str | None,
        typer.Option(
            "--amp",
            help="bf16 or fp16: run forward and loss under torch.autocast (mixed precision); each "
            "op is counted and classified in the dtype it ran in.",
        ),
    ] = None,
    mode: Annotated[
        str | None, typer.Option("--mode", help="inference or train (default: the file's MODE).")
    ] = None,
    objective: Annotated[
        str, typer.Option("--objective", help="throughput, or energy (J per unit; needs NVML).")
    ] = "throughput",
    min_time: Annotated[
        float | None,
        typer.Option(
            "--min-time",
            help="Seconds of timed steps per batch size (default: adaptive, 0.05-1 s, until the "
            "median is known to ±3%).",
        ),
    ] = None,
    timeout: Annotated[
        float, typer.Option("--timeout", help="Seconds allowed per batch size.")
    ] = 600.0,
    threads: Annotated[
        int | None, typer.Option("--threads", help="torch intra-op threads.")
    ] = None,
    trace: Annotated[
        bool, typer.Option("--trace", help="Export a Perfetto trace per batch size.")
    ] = False,
    no_ops: Annotated[
        bool, typer.Option("--no-ops", help="Timing only: skip the per-op breakdown.")
    ] = False,
    recalibrate: Annotated[
        bool, typer.Option("--recalibrate", help="Re-measure the machine's ceilings.")
    ] = False,
    rounds: Annotated[
        bool,
        typer.Option(
            "--rounds/--no-rounds",
            help="Decide from interleaved rounds: the sizes near the pick timed in short "
            "blocks, each once per round in a shuffled order, in the sweep's worker and a "
            "fresh one, and compared within each round so that the machine's drift cancels; "
            "the plateau and predicted stops are checked the same way (default: on; "
            "BATCHSCOPE_NO_ROUNDS=1 also turns them off). Off: faster, every decision reads "
            "the sequential timings and the report says so.",
        ),
    ] = True,
    budget: Annotated[
        float | None,
        typer.Option(
            "--budget",
            help="Seconds the whole sweep may take, plan and rounds: the plan stops before a "
            "size that would run past it, and the report says what was left unmeasured.",
        ),
    ] = None,
    allocator_check: Annotated[
        bool,
        typer.Option(
            "--allocator-check/--no-allocator-check",
            help="CPU: when page faults take a share of a step, time those batch sizes again with "
            "glibc keeping its buffers and report both side by side (default: on).",
        ),
    ] = True,
    ncu: Annotated[
        bool,
        typer.Option(
            "--ncu",
            help="Profile one step at each measured batch size under Nsight Compute (ncu on "
            "PATH, or $BATCHSCOPE_NCU): each kernel's measured DRAM bytes and FLOPs on the "
            "roofline (report.json counters).",
        ),
    ] = False,
    nproc_per_node: Annotated[
        int | None,
        typer.Option(
            "--nproc-per-node",
            help="Data parallel: ranks on this node, started by torch.distributed.run (torchrun); "
            "the model is wrapped in DistributedDataParallel; batch sizes are per rank.",
        ),
    ] = None,
    nnodes: Annotated[
        int, typer.Option("--nnodes", help="Nodes in the distributed sweep (as torchrun).")
    ] = 1,
    node_rank: Annotated[
        int,
        typer.Option(
            "--node-rank", help="This node's rank (as torchrun); node 0 writes the report."
        ),
    ] = 0,
    rdzv_endpoint: Annotated[
        str,
        typer.Option(
            "--rdzv-endpoint", help="HOST:PORT of node 0, the same on every node (as torchrun)."
        ),
    ] = "",
    global_batch: Annotated[
        int | None,
        typer.Option(
            "--global-batch",
            help="Global batch to reach: the gradient-accumulation steps it takes at the "
            "recommended per-rank batch.",
        ),
    ] = None,
    task: Annotated[
        str | None,
        typer.Option(
            "--task",
            help="With hf:MODEL: causal-lm-decode, causal-lm-prefill, causal-lm-train, seq-cls, "
            "image-cls or seq2seq-train (built from the config; random weights unless they are "
            "local; nothing downloaded).",
        ),
    ] = None,
    seq_len: Annotated[
        int,
        typer.Option(
            "--seq-len",
            help="With hf:MODEL: tokens per row for prefill, classification and training tasks.",
        ),
    ] = DEFAULT_SEQ_LEN,
    context: Annotated[
        int | None,
        typer.Option(
            "--context",
            help="With hf:MODEL --task causal-lm-decode: tokens of KV cache per row (default "
            "1024, less where the config's position window needs: 768 for GPT-2).",
        ),
    ] = None,
    contexts: Annotated[
        str | None,
        typer.Option(
            "--contexts",
            help="Decode models: tokens of context, e.g. 128,512,1024 (make_inputs(batch_size, "
            "context)); the sweep runs at the first, a small grid of step times at all, for "
            "`diagnose serve`.",
        ),
    ] = None,
    seq_lens: Annotated[
        str | None,
        typer.Option(
            "--seq-lens",
            help="Sequence models: row lengths, e.g. 128,256,512 (make_inputs(batch_size, "
            "seq_len), replacing the file's SEQ_LENS; with hf:MODEL for its sequence tasks): the "
            "sweep runs at the first, a grid of batch size × length at all of them.",
        ),
    ] = None,
    target_gpu: Annotated[
        str | None,
        typer.Option(
            "--target-gpu",
            help="Predict, never time: the model's step, throughput and peak memory at each "
            "batch size on this GPU (e.g. \"A100 SXM4 80GB\", T4; `diagnose hardware "
            "--list-gpus`), "
            "from its exact per-op work and a model calibrated on real GPUs' traces. With "
            "--dtype and --batch-sizes.",
        ),
    ] = None,
    cuda_graphs: Annotated[
        bool,
        typer.Option(
            "--cuda-graphs",
            help="With --target-gpu: predict each step replayed as one CUDA graph (as vLLM and "
            "SGLang decode, or torch.compile's reduce-overhead): no host cost per op.",
        ),
    ] = False,
    fused: Annotated[
        bool,
        typer.Option(
            "--fused",
            help="With --target-gpu: predict an engine that fuses each run of non-GEMM ops "
            "between two GEMMs into one kernel (vLLM's fused norms and activations, "
            "torch.compile).",
        ),
    ] = False,
) -> None:
    """Sweep batch sizes of MODEL, place every op on the roofline, recommend a batch size.

    \b
    Example:
      diagnose samples/llm_decode.py --out report

    \b
    Other verbs (each has its own --help):
      diagnose hardware                  this machine's measured ceilings
        e.g. diagnose hardware --recalibrate
      diagnose compare BASE HEAD         two reports: a regression, with its confidence
        e.g. diagnose compare main/report.json pr/report.json
      diagnose trace TRACE...            recorded torch.profiler traces (GPU or CPU)
        e.g. diagnose trace rank0.json.gz --batch-sizes 64
      diagnose ncu NCU.csv...            Nsight Compute exports: kernels on the roofline
        e.g. diagnose ncu kernels/*/ncu.details.csv --gpu "RTX 5090"
      diagnose serve REPORT.json         static against continuous batching, from a
                                         decode model's report
        e.g. diagnose serve report/report.json --rate 2 --slo-tpot-ms 150
    """
    try:
        options = Options(
            device=device,
            dtype=dtype,
            amp=amp,
            compile_mode=(compile_mode or "default") if compile_model or compile_mode else None,
            batch_sizes=parse_batch_sizes(batch_sizes) if batch_sizes is not None else None,
            max_batch=max_batch,
            contexts=parse_contexts(contexts) if contexts is not None else None,
            seq_lens=parse_contexts(seq_lens, "--seq-lens") if seq_lens is not None else None,
            measure_all=measure_all,
            predict_to=predict_to,
            latency_limit_s=latency_limit_ms / 1e3 if latency_limit_ms is not None else None,
            memory_budget_bytes=parse_size(memory_budget) if memory_budget is not None else None,
            out_dir=str(out),
            min_time_s=min_time,
            batch_timeout_s=timeout,
            threads=threads,
            trace=trace,
            recalibrate=recalibrate,
            op_breakdown=not no_ops,
            allocator_check=allocator_check,
            rounds=rounds,
            budget_s=budget,
            ncu=ncu,
            mode=mode,
            objective=objective,
            nproc_per_node=nproc_per_node,
            nnodes=nnodes,
            node_rank=node_rank,
            rdzv_endpoint=rdzv_endpoint,
            global_batch=global_batch,
        )
        validate_options(options)
    except UsageError as exc:
        raise fail(exc) from None
    if is_hf_target(str(model)):
        try:
            if task is None:
                raise UsageError(f"{model} needs --task ({', '.join(HF_TASKS)}).")
            model = write_model_file(str(model), task, out, context=context, seq_len=seq_len,
                                     seq_lens=options.seq_lens, contexts=options.contexts)
            options.seq_lens = None  # written into the file as its SEQ_LENS
        except UsageError as exc:
            raise fail(exc) from None
        err_console.print(f"model file for {task} written to {model}", markup=False)
    elif task is not None or context is not None:
        raise fail(UsageError("--task and --context go with an hf:MODEL_ID_OR_PATH target."))
    if target_gpu is not None:
        raise typer.Exit(code=_predict_on(model, target_gpu, options, cuda_graphs, fused))
    if cuda_graphs or fused:
        flag = "--cuda-graphs" if cuda_graphs else "--fused"
        raise fail(UsageError(f"{flag} goes with --target-gpu (a prediction); a sweep on this "
                              "machine times the model as its file runs it."))
    if options.node_rank:
        raise typer.Exit(code=_follow(model, options))
    previous = signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
    # A process started in the background by a non-interactive shell inherits SIGINT
    # ignored, and Python then keeps ignoring it: Ctrl-C (or a CI runner's SIGINT) must
    # still stop the sweep and write the partial report.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    progress = _Progress(err_console)
    try:
        with progress:
            report = diagnose_file(model, options, callbacks=progress)
        code = exit_code(report)
        # The report is written; printing it is not cut short by an interrupt either
        # (after one, a second still exits at once: its handler is not held).
        with InterruptHold() if code != ExitCode.INTERRUPTED else contextlib.nullcontext():
            print_summary(out_console, report)
            if code == ExitCode.INTERRUPTED:
                err_console.print(f"interrupted: the partial report is in {out}/",
                                  markup=False)
            elif code == ExitCode.NOTHING_MEASURED:
                err_console.print(f"error: {nothing_measured_message(report)}", markup=False)
    except (ModelFileError, BatchscopeError) as exc:
        raise fail(exc) from None
    except KeyboardInterrupt:  # a second interrupt while the finished report was written
        err_console.print("interrupted again: stopped at once", markup=False)
        raise typer.Exit(code=int(ExitCode.INTERRUPTED)) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    raise typer.Exit(code=int(code))


def _predict_on(model: Path, gpu: str, options: Options, cuda_graphs: bool = False,
                fused: bool = False) -> int:
    """--target-gpu: the prediction's report, nothing timed."""
    from batchscope.target.predict import diagnose_target

    unsupported = [flag for flag, given in (
        ("--amp", options.amp is not None), ("--compile", options.compile_mode is not None),
        ("--nproc-per-node", options.nproc_per_node is not None),
        ("--mode", options.mode is not None),
        ("--seq-lens", options.seq_lens is not None)) if given]
    if unsupported:
        raise fail(UsageError(f"--target-gpu predicts the model file as it is, in --dtype at "
                              f"--batch-sizes (and a decode model's --contexts); it does not "
                              f"take {', '.join(unsupported)}."))
    try:
        report = diagnose_target(model, gpu, options.dtype, options.batch_sizes,
                                 out_dir=options.out_dir, cuda_graphs=cuda_graphs,
                                 contexts=options.contexts, fused=fused)
    except (ModelFileError, BatchscopeError) as exc:
        raise fail(exc) from None
    print_summary(out_console, report)
    return int(ExitCode.OK)


def _follow(model: Path, options: Options) -> int:
    """Node ≠ 0: run this node's ranks until node 0 ends the sweep; node 0 reports."""
    err_console.print(f"node {options.node_rank}: running {options.nproc_per_node} ranks "
                      f"under torch.distributed.run; node 0 writes the report.", markup=False)
    try:
        code, log = follow_node_zero(model, options)
    except KeyboardInterrupt:
        return int(ExitCode.INTERRUPTED)
    if code:
        err_console.print(f"error: this node's ranks ended with exit code {code} (their "
                          f"output: {log}).", markup=False)
        return int(ExitCode.SOME_FAILED)
    return int(ExitCode.OK)


tools_app = typer.Typer(add_completion=False, rich_markup_mode=None, no_args_is_help=True)


@tools_app.callback()
def tools() -> None:
    """batchscope's other verbs (`diagnose MODEL.py` runs the sweep)."""


@tools_app.command("hardware")
def hardware(
    device: Annotated[str, typer.Option("--device", help="cpu, cuda or cuda:N.")] = "cpu",
    recalibrate: Annotated[bool, typer.Option("--recalibrate", help="Measure again.")] = False,
    list_gpus: Annotated[
        bool,
        typer.Option("--list-gpus", help="List the GPUs --target-gpu and --gpu know (their "
                     "datasheets); measure nothing."),
    ] = False,
) -> None:
    """Print this machine's measured ceilings (measuring them on first use).

    Example: diagnose hardware --recalibrate
    """
    from batchscope.hardware import load_or_measure

    if list_gpus:
        print_gpu_specs(out_console)
        return
    if not re.match(r"^(cpu|cuda(:\d+)?)$", device):
        raise fail(UsageError(f"unknown device {device!r}; use cpu, cuda or cuda:N."))
    print_ceilings(out_console, load_or_measure(device, recalibrate=recalibrate))
    from batchscope.hardware.interconnect import cached_bus_bandwidths

    print_bus_bandwidths(out_console, cached_bus_bandwidths())


@tools_app.command("compare")
def compare(
    base: Annotated[
        str,
        typer.Argument(
            help="report.json of the base (e.g. the main branch); several runs comma-separated. "
            "With --ab: the base's model file.",
        ),
    ],
    head: Annotated[
        str,
        typer.Argument(
            help="report.json of the head (e.g. the pull request); several runs comma-separated. "
            "With --ab: the head's model file.",
        ),
    ],
    threshold: Annotated[
        float,
        typer.Option(
            "--threshold",
            help="Fail (exit 1) when the head does this many percent more work per step (counted "
            "FLOPs, bytes, op calls) at the base's recommended batch size, or its throughput there "
            "falls by more than this many percent beyond the noise between runs.",
        ),
    ] = 10.0,
    run_drift: Annotated[
        float,
        typer.Option(
            "--run-drift",
            help="Run-to-run drift, in percent (one standard deviation of a run's throughput), "
            "assumed for a side given as a single report (repeated runs measure it; a report's "
            "own measured drift may raise it).",
        ),
    ] = RUN_DRIFT * 100,
    markdown: Annotated[
        Path | None,
        typer.Option("--markdown", help="Also write the comparison as Markdown to this file."),
    ] = None,
    output_format: Annotated[
        str, typer.Option("--format", help="What to print: text (a table) or markdown.")
    ] = "text",
    work_only: Annotated[
        bool,
        typer.Option(
            "--work-only",
            help="Exit 1 on the counted work per step alone (exact: FLOPs, bytes, op calls); "
            "the time verdict is printed but does not decide. For a job whose time gate is "
            "--ab, which times both sides in one run: one run a side tells only a large drop.",
        ),
    ] = False,
    ab: Annotated[
        bool,
        typer.Option(
            "--ab",
            help="BASE and HEAD are model files: time both in one run, in interleaved pairs of "
            "short blocks (random order in each pair), and count each side's work.",
        ),
    ] = False,
    batch_size: Annotated[
        int | None,
        typer.Option("--batch-size", help="With --ab: the batch size to time (default 1)."),
    ] = None,
    pairs: Annotated[
        int | None,
        typer.Option("--pairs", help="With --ab: pairs of timing blocks (default 30, at least 9)."),
    ] = None,
    block_time: Annotated[
        float | None,
        typer.Option(
            "--block-time", help="With --ab: seconds of timed steps per block (default 0.2)."
        ),
    ] = None,
    rounds: Annotated[
        int | None,
        typer.Option("--rounds", help="With --ab: pairs of worker processes the pairs are "
                     "split over, each started afresh (default 10; with 9 or more the rounds' "
                     "medians are samples of their own, with fewer each one counts)."),
    ] = None,
    seed: Annotated[
        int, typer.Option("--seed", help="With --ab: seed of the order within each pair.")
    ] = 0,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="With --ab: folder for ab.json and ab.md (default "
                     "batchscope-ab/)."),
    ] = None,
    device: Annotated[
        str, typer.Option("--device", help="With --ab: auto, cpu, cuda or cuda:N.")
    ] = "auto",
    dtype: Annotated[str, typer.Option("--dtype", help="With --ab: fp32, bf16 or fp16.")] = "fp32",
    mode: Annotated[
        str | None,
        typer.Option("--mode", help="With --ab: inference or train (default: each file's MODE)."),
    ] = None,
    threads: Annotated[
        int | None, typer.Option("--threads", help="With --ab: torch intra-op threads.")
    ] = None,
    timeout: Annotated[
        float, typer.Option("--timeout", help="With --ab: seconds allowed per block.")
    ] = 600.0,
) -> None:
    """Compare two report.json files: work per step, throughput, latency, recommendation, op
    classes; or, with --ab, time two model files against each other in one run.

    Exit 0: no regression (or an inconclusive drop the noise between runs can explain); 1:
    the head does more than --threshold percent more work per step at the base's recommended
    batch size, or its throughput there fell by more than --threshold percent beyond that noise
    (or the head could not measure it); with --work-only, 1 on the work alone; 4: unreadable
    input or a bad option; 5 (--ab): a model could not be loaded or run.

    \b
    Example: diagnose compare main/report.json,main2/report.json pr/report.json --format markdown
             diagnose compare --ab main/model.py pr/model.py --batch-size 8 --threads 1
    """
    from batchscope.reports.compare import REGRESSION_EXIT_CODE, compare_files
    from batchscope.reports.compare_render import print_comparison, render_markdown
    from batchscope.reports.json_report import atomic_write_text

    try:
        if output_format not in ("text", "markdown"):
            raise UsageError(f"--format must be text or markdown, not {output_format!r}.")
        if not 0 < threshold < 100:
            raise UsageError(
                f"--threshold must be a percentage between 0 and 100, not {threshold:g}."
            )
        if ab and work_only:
            raise UsageError("--work-only gates two reports on their counted work; --ab counts "
                             "both sides' work itself and gates on it and on time: drop one.")
        if ab:
            _compare_ab(base, head, threshold / 100, markdown, output_format, batch_size, pairs,
                        block_time, seed, out, device, dtype, mode, threads, timeout, rounds)
            return
        given = [name for name, value in (("--batch-size", batch_size), ("--pairs", pairs),
                                          ("--block-time", block_time), ("--out", out),
                                          ("--rounds", rounds))
                 if value is not None]
        if given:
            raise UsageError(f"{', '.join(given)} time two model files: add --ab (and give "
                             "model files), or drop them to compare two reports.")
        if not 0 <= run_drift < 100:
            raise UsageError(f"--run-drift must be a percentage from 0 to 100, not {run_drift:g}.")
        result = compare_files([p for p in base.split(",") if p],
                               [p for p in head.split(",") if p], threshold / 100,
                               run_drift / 100)
    except BatchscopeError as exc:
        raise fail(exc) from None
    text = render_markdown(result)
    if markdown is not None:
        try:
            atomic_write_text(markdown, text)
        except OSError as exc:
            raise fail(
                UsageError(f"cannot write --markdown {markdown}: {exc.strerror or exc}.")
            ) from None
    if output_format == "markdown":
        sys.stdout.write(text)
    else:
        print_comparison(out_console, result)
    regression = result.work_regression if work_only else result.regression
    raise typer.Exit(code=REGRESSION_EXIT_CODE if regression else 0)


def _compare_ab(base: str, head: str, threshold: float, markdown: Path | None,
                output_format: str, batch_size: int | None, pairs: int | None,
                block_time: float | None, seed: int, out: Path | None, device: str, dtype: str,
                mode: str | None, threads: int | None, timeout: float,
                rounds: int | None = None) -> None:
    """``diagnose compare --ab``: run the A/B, write ab.json and ab.md, print, exit."""
    from batchscope.api import check_writable
    from batchscope.profiler.ab_run import (
        DEFAULT_BLOCK_S,
        DEFAULT_PAIRS,
        DEFAULT_ROUNDS,
        MIN_PAIRS,
        ABConfig,
        run_ab,
    )
    from batchscope.profiler.worker_config import DTYPE_NAMES, WorkerConfig
    from batchscope.records.ab import ABStopKind
    from batchscope.reports.ab_compare import judge, write_ab
    from batchscope.reports.compare import REGRESSION_EXIT_CODE
    from batchscope.reports.compare_render import print_ab, render_ab_markdown
    from batchscope.reports.json_report import atomic_write_text

    b = 1 if batch_size is None else batch_size
    k = DEFAULT_PAIRS if pairs is None else pairs
    r = min(DEFAULT_ROUNDS, k) if rounds is None else rounds
    block_s = DEFAULT_BLOCK_S if block_time is None else block_time
    for label, path in (("base", base), ("head", head)):
        if not Path(path).is_file():
            raise UsageError(f"--ab times two model files; the {label} {path!r} is not a file.")
    if b < 1:
        raise UsageError(f"--batch-size must be at least 1, not {b}.")
    if k < MIN_PAIRS:
        raise UsageError(f"--pairs must be at least {MIN_PAIRS}, not {k}: with fewer, the "
                         "median ratio's 95% interval is the pairs' whole range.")
    if not 1 <= r <= k:
        raise UsageError(f"--rounds must be between 1 and --pairs ({k}), not {r}.")
    if not 0 < block_s <= 60:
        raise UsageError(f"--block-time must be between 0 and 60 seconds, not {block_s:g}.")
    if timeout <= 0:
        raise UsageError("--timeout must be positive.")
    if not re.match(r"^(auto|cpu|cuda(:\d+)?)$", device):
        raise UsageError(f"unknown device {device!r}; use auto, cpu, cuda or cuda:N.")
    if dtype not in DTYPE_NAMES:
        raise UsageError(f"unknown dtype {dtype!r}; use one of fp32, bf16, fp16.")
    if mode not in (None, "inference", "train"):
        raise UsageError(f"--mode must be inference or train, not {mode!r}.")
    if threads is not None and threads < 1:
        raise UsageError(f"--threads must be at least 1, not {threads}.")
    folder = out if out is not None else Path("batchscope-ab")
    check_writable(folder)
    config = ABConfig(base, head, WorkerConfig(base, device=device, dtype=dtype, mode=mode,
                                               threads=threads),
                      batch_size=b, pairs=k, block_s=block_s, seed=seed, timeout_s=timeout,
                      rounds=r)

    def progress(done: int, total: int) -> None:
        if done == 0:
            err_console.print(f"work counted; timing {total} pairs of blocks at batch {b}")

    err_console.print(f"starting two workers: {base} and {head}")
    try:
        measurement = run_ab(config, progress)
    except KeyboardInterrupt:
        err_console.print("interrupted before any pair was timed: nothing written", markup=False)
        raise typer.Exit(code=int(ExitCode.INTERRUPTED)) from None
    result = judge(measurement, threshold)
    text = render_ab_markdown(result)
    try:
        for written in write_ab(result, folder, text):
            err_console.print(f"wrote {written}", markup=False)
        if markdown is not None:
            atomic_write_text(markdown, text)
    except OSError as exc:
        raise UsageError(f"cannot write the A/B results: {exc.strerror or exc}.") from None
    if output_format == "markdown":
        sys.stdout.write(text)
    else:
        print_ab(out_console, result)
    if measurement.stop is not None and measurement.stop.kind == ABStopKind.INTERRUPTED:
        raise typer.Exit(code=int(ExitCode.INTERRUPTED))
    raise typer.Exit(code=REGRESSION_EXIT_CODE if result.regression else 0)


@tools_app.command("trace")
def trace(
    traces: Annotated[
        list[Path],
        typer.Argument(
            help="torch.profiler traces (.json or .json.gz), one per batch size, or one per rank "
            "of one step.",
        ),
    ],
    batch_sizes: Annotated[
        str | None,
        typer.Option("--batch-sizes", help="The batch size of each trace, in order, e.g. 8,16,32."),
    ] = None,
    ncu_exports: Annotated[
        list[Path] | None,
        typer.Option("--ncu", help="Nsight Compute CSV exports of the same step (repeat for "
                     "several files): each op's kernels' measured DRAM bytes and FLOPs beside "
                     "the modelled ones."),
    ] = None,
    out: Annotated[
        Path, typer.Option("--out", help="Folder for report.json/html and summary.md.")
    ] = Path(DEFAULT_OUT_DIR),
) -> None:
    """Analyse recorded torch.profiler traces (from your own GPU runs): the same report.

    Exit 0: analysed (a trace missing pieces gets a sentence saying what); 4: no trace
    could be read, --batch-sizes does not fit the traces, or an --ncu file is not an Nsight
    Compute CSV export.

    Example: diagnose trace rank0.pt.trace.json.gz rank1.pt.trace.json.gz --batch-sizes 64
    """
    from batchscope.api import check_writable
    from batchscope.records import FlagKind
    from batchscope.reports.flag_text import flag_text
    from batchscope.traces.diagnose import diagnose_traces

    try:
        sizes = parse_ordered_batch_sizes(batch_sizes) if batch_sizes is not None else None
        check_writable(out)
        report = diagnose_traces(traces, sizes, str(out), ncu_exports or ())
    except BatchscopeError as exc:
        raise fail(exc) from None
    for flag in report.flags:
        if flag.kind == FlagKind.TRACE_NOT_READ:
            err_console.print(f"warning: {flag_text(flag)}", markup=False)
    for batch in report.batches:
        for flag in batch.flags:
            err_console.print(f"note: {Path(batch.trace_path).name}: {flag_text(flag)}",
                              markup=False)
    print_summary(out_console, report)
    err_console.print(f"report written to {out}/", markup=False)
    raise typer.Exit(code=0)


@tools_app.command("ncu")
def ncu(
    exports: Annotated[
        list[Path],
        typer.Argument(
            help="Nsight Compute CSV exports (ncu --csv: --page details, --section exports, "
            "--page raw); the rows of one kernel launch may be spread over several files.",
        ),
    ],
    gpu: Annotated[
        str | None,
        typer.Option("--gpu", help="The GPU the exports were recorded on, e.g. \"RTX 5090\": "
                     "its datasheet's roofs, tensor cores included (default: the exports' own "
                     "roofline section, which has no tensor roof)."),
    ] = None,
    out: Annotated[
        Path, typer.Option("--out", help="Folder for report.json/html and summary.md.")
    ] = Path(DEFAULT_OUT_DIR),
) -> None:
    """Place every kernel launch Nsight Compute profiled on the roofline, from its measured
    DRAM bytes and FLOPs (report.json counters.kernels[]).

    Exit 0: read (figures a file lacks or garbles are listed as set aside); 4: a file is not
    an Nsight Compute CSV export, or --gpu names a GPU not in the datasheet table.

    Example: diagnose ncu kernels/*/ncu.details.csv kernels/*/ncu.metrics.csv --gpu "RTX 5090"
    """
    from batchscope.api import check_writable
    from batchscope.traces.ncu_diagnose import diagnose_ncu

    try:
        check_writable(out)
        report = diagnose_ncu(exports, gpu, str(out))
    except BatchscopeError as exc:
        raise fail(exc) from None
    print_summary(out_console, report)
    err_console.print(f"report written to {out}/", markup=False)
    raise typer.Exit(code=0)


@tools_app.command("serve")
def serve(
    report: Annotated[Path, typer.Argument(help="report.json of a decode model's sweep.")],
    rate: Annotated[
        list[float] | None,
        typer.Option(
            "--rate",
            help="Offered requests per second; repeat for several (default: six loads from light "
            "to past saturation).",
        ),
    ] = None,
    requests: Annotated[
        int, typer.Option("--requests", help="Requests in the seeded Poisson stream.")
    ] = 500,
    prompt_tokens: Annotated[
        str | None,
        typer.Option(
            "--prompt-tokens",
            help="Prompt length, e.g. 128 or 64:512 (uniform); default: the sweep's context.",
        ),
    ] = None,
    output_tokens: Annotated[
        str,
        typer.Option(
            "--output-tokens", help="Tokens generated per request, e.g. 128 or 16:256 (uniform)."
        ),
    ] = "16:256",
    trace_file: Annotated[
        Path | None,
        typer.Option(
            "--trace",
            help="Requests to replay instead (CSV or JSON lines: arrival_s, prompt_tokens, "
            "output_tokens); --rate rescales its arrivals.",
        ),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the request stream.")] = 0,
    caps: Annotated[
        str | None,
        typer.Option(
            "--caps", help="Batch caps to try, e.g. 8,32,64 (default: every measured batch size)."
        ),
    ] = None,
    kv_memory: Annotated[
        str | None,
        typer.Option(
            "--kv-memory",
            help="Memory for the KV cache, e.g. 8GiB (default: 90% of what the sweep found free "
            "beside the weights).",
        ),
    ] = None,
    slo_ttft_ms: Annotated[
        float | None, typer.Option("--slo-ttft-ms", help="Target p99 time to first token, ms.")
    ] = None,
    slo_tpot_ms: Annotated[
        float | None, typer.Option("--slo-tpot-ms", help="Target p99 time per output token, ms.")
    ] = None,
    prefill_ms_per_token: Annotated[
        float,
        typer.Option(
            "--prefill-ms-per-token",
            help="Prefill cost charged at admission (default 0: the prompt's KV is taken as "
            "ready).",
        ),
    ] = 0.0,
    context: Annotated[
        int | None,
        typer.Option(
            "--context",
            help="Tokens of context the sweep's steps held, when the model file set no CONTEXTS.",
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", help="Folder for serving.json/html/md (default: the report's folder)."
        ),
    ] = None,
    engine: Annotated[
        str | None,
        typer.Option(
            "--engine",
            help="Run this serving engine on the report's model first (transformers; a short "
            "calibration at up to three caps) and add its measured cost per step; its runs "
            "are kept in engine_runs.json.",
        ),
    ] = None,
    engine_runs: Annotated[
        Path | None,
        typer.Option(
            "--engine-runs",
            help="An engine_runs.json an earlier --engine wrote: simulate on those calibration "
            "runs instead of running the engine again.",
        ),
    ] = None,
    paged: Annotated[
        bool,
        typer.Option(
            "--paged",
            help="A --target-gpu prediction served by a paged-attention engine (vLLM, SGLang): "
            "each row reads its own KV cache once a step, not the batch's longest.",
        ),
    ] = False,
) -> None:
    """Static against continuous batching, simulated from a report's step times.

    Example: diagnose serve batchscope-report/report.json --slo-tpot-ms 200

    Prefill is timed on the report's model where its file defines build_engine_model() (the
    file `diagnose hf:MODEL --task causal-lm-decode` writes does), unless
    --prefill-ms-per-token is given.

    Exit 0: simulated; 4: bad input (an unreadable report, one whose step is not a decode
    step, a negative rate, an empty trace, an engine that cannot run here, an unreadable
    engine_runs.json).
    """
    from batchscope.reports.json_report import atomic_write_text, load_report
    from batchscope.reports.serving_render import (
        document,
        print_serving,
        render_html,
        render_markdown,
    )
    from batchscope.serving.metrics import Slo
    from batchscope.serving.requests import load_trace, parse_token_range
    from batchscope.serving.whatif import WhatIfOptions, what_if

    try:
        decoded = load_report(report)
        options = WhatIfOptions(
            rates_per_s=list(rate) if rate else None, requests=requests,
            prompt_tokens=parse_token_range(prompt_tokens, "--prompt-tokens", 0)
            if prompt_tokens is not None else None,
            output_tokens=parse_token_range(output_tokens, "--output-tokens", 1),
            trace=load_trace(trace_file) if trace_file is not None else None, seed=seed,
            caps=parse_batch_sizes(caps) if caps is not None else None,
            kv_memory_bytes=parse_size(kv_memory, "--kv-memory") if kv_memory else None,
            slo=Slo(None if slo_ttft_ms is None else slo_ttft_ms / 1e3,
                    None if slo_tpot_ms is None else slo_tpot_ms / 1e3),
            prefill_s_per_token=prefill_ms_per_token / 1e3, context=context, paged=paged)
        if context is not None and not 0 <= context <= 10_000_000:
            raise UsageError(f"--context must be a token count from 0 up, not {context}.")
        folder = out if out is not None else report.parent
        from batchscope.api import check_writable

        check_writable(folder)  # before the engine runs: what it measures is written there
        options = _measure_for_serving(decoded, options, engine, engine_runs, folder)
        result = what_if(decoded, options)
    except BatchscopeError as exc:
        raise fail(exc) from None
    atomic_write_text(folder / "serving.json",
                      json.dumps(document(result), indent=1, allow_nan=False) + "\n")
    atomic_write_text(folder / "serving.html", render_html(result))
    atomic_write_text(folder / "serving.md", render_markdown(result))
    print_serving(out_console, result)
    err_console.print(f"serving what-if written to {folder}/", markup=False)
    raise typer.Exit(code=0)


def _measure_for_serving(report: Report, options: WhatIfOptions, engine: str | None,
                         engine_runs: Path | None, folder: Path) -> WhatIfOptions:
    """``options`` with the model's prefill timed (unless --prefill-ms-per-token is given)
    and, with --engine, the engine's calibration runs (written to ``folder`` at once: a
    simulation that fails after them loses nothing measured), or with --engine-runs those
    read back."""
    import dataclasses

    from batchscope.reports.engine_runs import read_engine_runs, write_engine_runs

    if engine_runs is not None:
        if engine is not None:
            raise UsageError("give --engine (run the engine now) or --engine-runs (reuse runs "
                             "it made before), not both.")
        if report.target is not None:
            raise UsageError(f"--engine-runs holds runs measured on a real machine; the report "
                             f"is a prediction for the {report.target.gpu}, whose step the "
                             "runs cannot calibrate.")
        recorded = read_engine_runs(engine_runs)
        if recorded.target != report.model.target:
            err_console.print(f"note: {engine_runs} was measured on {recorded.target}; this "
                              f"report's model is {report.model.target}.", markup=False)
        measured = recorded.measurement
        return dataclasses.replace(options, engine=measured, prefill_points=measured.prefill)

    from batchscope.records.engine import Engine
    from batchscope.serving.engines.calibrate import measure_engine, measure_prefill
    from batchscope.serving.whatif import serving_plan

    names = [e.value for e in Engine]
    if engine is not None and engine not in names:
        raise UsageError(f"--engine {engine!r} is not an engine batchscope runs; use one of "
                         f"{', '.join(names)}.")
    if engine is None and options.prefill_s_per_token > 0:
        return options
    stream, caps = serving_plan(report, options)
    if report.target is not None:
        if engine is not None:
            raise UsageError(f"--engine {engine} runs the engine on this machine; the report "
                             f"is a prediction for the {report.target.gpu}, which nothing "
                             "here can calibrate.")
        from batchscope.records.engine import PrefillSource
        from batchscope.serving.engines.calibrate import prompt_lengths
        from batchscope.target.prefill import predict_prefill

        points = predict_prefill(report, prompt_lengths(stream))
        if points:
            err_console.print(f"prefill predicted on the {report.target.gpu} at "
                              f"{', '.join(str(p.prompt_tokens) for p in points)} tokens",
                              markup=False)
        return dataclasses.replace(options, prefill_points=points or [],
                                   prefill_source=PrefillSource.PREDICTED)
    if engine is None:
        points = measure_prefill(report.model.target, stream)
        if points:
            err_console.print(f"prefill timed on {report.model.target}'s build_engine_model() "
                              f"at {', '.join(str(p.prompt_tokens) for p in points)} tokens",
                              markup=False)
        return dataclasses.replace(options, prefill_points=points or [])
    err_console.print(f"running {engine} on {report.model.target} to measure its cost per step "
                      "(a short calibration)...", markup=False)
    measured = measure_engine(Engine(engine), report.model.target, stream, caps)
    write_engine_runs(folder / "engine_runs.json", measured, report.model.target)
    return dataclasses.replace(options, engine=measured, prefill_points=measured.prefill)


def _nearest_subcommand(word: str) -> str | None:
    """The verb ``word`` was probably meant to be (``hardwre`` -> ``hardware``), when it is
    no verb, no option and no file; else None."""
    if word in SUBCOMMANDS or word.startswith("-") or Path(word).exists():
        return None
    close = difflib.get_close_matches(word, SUBCOMMANDS, n=1, cutoff=0.6)
    return close[0] if close else None


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``diagnose`` console script and ``python -m batchscope``.

    An exception that reaches here is a bug in batchscope: one line saying so, the
    traceback for the bug report, and exit 3 (never typer's exit 1, which means "some batch
    sizes failed").
    """
    args = list(sys.argv[1:] if argv is None else argv)
    near = _nearest_subcommand(args[0]) if args else None
    if near is not None:
        err_console.print(f"error: {args[0]!r} is neither a model file nor a verb; did you mean "
                          f"`diagnose {near}`?", markup=False, soft_wrap=True)
        sys.exit(int(ExitCode.USAGE))
    app = tools_app if args and args[0] in SUBCOMMANDS else diagnose_app
    try:
        app(args, prog_name="diagnose")
    except Exception as exc:  # noqa: BLE001 - the last resort: report the bug, exit 3
        err_console.print(traceback.format_exc(), markup=False, highlight=False)
        err_console.print(f"internal error (a bug in batchscope, please report it): "
                          f"{type(exc).__name__}", markup=False)
        sys.exit(int(ExitCode.INTERNAL))
    finally:
        # Whatever the way out, no process of this command is left behind (a worker, the
        # resource tracker that multiprocessing started for them).
        reap_children()

"""The baseline a performance engineer would script by hand: a plain, fixed-grid profiled sweep.

Build the model once; for every batch size of a fixed grid: build the inputs, warm up a few
steps, profile a fixed number of steps with ``torch.profiler`` (``record_shapes=True``),
read ``key_averages()`` (grouped by input shape, the top ops as a table) and take the
throughput from the wall time of the profiled steps; pick the batch size with the best
throughput. Nothing from batchscope is used: this is what one writes without it.

    python benchmarks/plain_sweep.py samples/llm_decode.py --batch-sizes 1,2,4,8
    python benchmarks/plain_sweep.py samples/train_cnn.py --batch-sizes 1,2,4 --json

Prints one line per batch size (or one JSON object with ``--json``), the pick last.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

# A few steps let oneDNN/MKL choose kernels and the allocator settle at the new shape.
WARMUP_STEPS = 3
# Ten profiled steps: enough for a throughput within a few percent on a quiet machine, and
# for key_averages() to show a stable per-op table.
PROFILED_STEPS = 10
TOP_OPS = 15


def load_module(path: str) -> Any:
    """Import a model file as a module (what ``from my_model import ...`` does)."""
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def make_step(module: Any, model: torch.nn.Module, inputs: Any,
              optimizer: torch.optim.Optimizer | None) -> Callable[[], Any]:
    """One step: the model file's ``run`` (or ``model(**inputs)`` / ``model(*inputs)`` /
    ``model(x)``); in training mode plus the loss, backward and optimizer step."""
    run = getattr(module, "run", None)
    if run is not None:
        def forward() -> Any:
            return run(model, inputs)
    elif isinstance(inputs, Mapping):
        def forward() -> Any:
            return model(**inputs)
    elif isinstance(inputs, (tuple, list)):
        def forward() -> Any:
            return model(*inputs)
    else:
        def forward() -> Any:
            return model(inputs)
    if optimizer is None:
        return forward
    loss_fn = module.loss

    def train_step() -> Any:
        loss = loss_fn(forward(), inputs)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return loss

    return train_step


def plain_profiled_sweep(path: str, batch_sizes: list[int], warmup_steps: int = WARMUP_STEPS,
                         profiled_steps: int = PROFILED_STEPS,
                         log: Callable[[str], None] = print) -> dict[str, Any]:
    """Profile every batch size of ``batch_sizes`` and pick the best throughput.

    Returns ``{"throughput_per_s": {b: rows/s}, "pick": b, "tables": {b: str}}``.
    """
    module = load_module(path)
    train = getattr(module, "MODE", "inference") == "train"
    model = module.build_model()
    model.train() if train else model.eval()
    optimizer = module.make_optimizer(model) if train else None
    grad = torch.enable_grad if train else torch.inference_mode
    throughput: dict[int, float] = {}
    tables: dict[int, str] = {}
    for b in batch_sizes:
        inputs = module.make_inputs(b)
        step = make_step(module, model, inputs, optimizer)
        with grad():
            for _ in range(warmup_steps):
                step()
            with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
                started = time.perf_counter()
                for _ in range(profiled_steps):
                    step()
                elapsed = time.perf_counter() - started
        averages = prof.key_averages(group_by_input_shape=True)
        tables[b] = averages.table(sort_by="cpu_time_total", row_limit=TOP_OPS)
        throughput[b] = b * profiled_steps / elapsed
        log(f"batch {b:>5}: {throughput[b]:>12,.1f} rows/s  ({elapsed / profiled_steps * 1e3:.2f} "
            f"ms/step profiled)")
        del inputs, step
    pick = max(throughput, key=throughput.get)
    log(f"pick: batch {pick}")
    return {"throughput_per_s": throughput, "pick": pick, "tables": tables}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--batch-sizes", required=True, help="e.g. 1,2,4,8")
    parser.add_argument("--warmup-steps", type=int, default=WARMUP_STEPS)
    parser.add_argument("--profiled-steps", type=int, default=PROFILED_STEPS)
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args()
    sizes = [int(x) for x in args.batch_sizes.split(",")]
    log = (lambda _msg: None) if args.json else print
    out = plain_profiled_sweep(args.model, sizes, args.warmup_steps, args.profiled_steps, log)
    if args.json:
        print(json.dumps({"throughput_per_s": out["throughput_per_s"], "pick": out["pick"]}))


if __name__ == "__main__":
    main()

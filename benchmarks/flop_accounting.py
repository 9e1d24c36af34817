"""FLOP accounting: batchscope's per-step FLOPs vs torch.utils.flop_counter and the usual tools.

For each sample at one batch size, in one process: batchscope's counting pass (exactly what
the worker runs), ``torch.utils.flop_counter.FlopCounterMode`` over the same step, and, where
they import, fvcore (``FlopCountAnalysis``), ptflops (both backends), thop and DeepSpeed's
flops profiler over the model's forward. fvcore, ptflops and thop report multiply-accumulates
(MACs); they are doubled here to FLOPs (a multiply and an add are two FLOPs, as batchscope,
flop_counter and DeepSpeed count), and ptflops' pytorch backend, which reports per sample, is
multiplied back by the batch size. The module- and trace-based tools see the forward pass
only: for a training sample their totals leave out backward and the optimizer.

Then one probe per kind of op the samples use (a module or call on its own) says which tool
counts it at all: the "misses" table.

    python benchmarks/flop_accounting.py                 # every sample at batch 8
    python benchmarks/flop_accounting.py samples/llm_decode.py --batch-size 1
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import sys
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from batchscope.profiler.counting import count_step
from batchscope.profiler.training import persistent_tensors
from batchscope.tensors import iter_tensors
from benchmarks._common import SAMPLES, Stepper, table

TOOLS = ["batchscope", "flop_counter", "fvcore", "ptflops (pytorch)", "ptflops (aten)", "thop",
         "deepspeed"]


def _quiet() -> contextlib.ExitStack:
    stack = contextlib.ExitStack()
    stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
    stack.enter_context(warnings.catch_warnings())
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    stack.callback(logging.disable, logging.NOTSET)
    return stack


def forward_call(model: nn.Module, run_once: Callable[[], Any]) -> tuple[tuple, dict]:
    """The positional and keyword arguments the model's forward receives in one step."""
    seen: dict[str, Any] = {}

    def hook(_m: nn.Module, args: tuple, kwargs: dict) -> None:
        seen.setdefault("call", (args, kwargs))

    handle = model.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        with torch.no_grad():
            run_once()
    finally:
        handle.remove()
    return seen["call"]


def as_positional(model: nn.Module, args: tuple, kwargs: dict) -> tuple:
    """Keyword arguments in the forward's order appended to the positional ones (for
    tracing tools that take a tuple)."""
    import inspect

    names = list(inspect.signature(model.forward).parameters)[len(args):]
    return args + tuple(kwargs[n] for n in names if n in kwargs)


# --- one function per tool: FLOPs of a forward (or of the step, for the first two) ---------

def batchscope_flops(step: Callable[[], Any], model: nn.Module, optimizer: Any, inputs: Any,
                     grad: Callable[[], Any]) -> tuple[int, Counter, list[str]]:
    with grad():
        ops = count_step(step, weights=list(persistent_tensors(model, optimizer)),
                         state=iter_tensors(inputs), root=model)
    by_op: Counter = Counter()
    uncounted = sorted({op.name for op in ops if op.flops is None})
    for op in ops:
        if op.flops:
            by_op[op.name] += op.flops
    return sum(by_op.values()), by_op, uncounted


def flop_counter_flops(step: Callable[[], Any], grad: Callable[[], Any]) -> tuple[int, Counter]:
    from torch.utils.flop_counter import FlopCounterMode

    with grad(), FlopCounterMode(display=False) as mode:
        step()
    counts = mode.get_flop_counts().get("Global", {})
    return mode.get_total_flops(), Counter({str(k).split(".")[-1]: v for k, v in counts.items()})


def fvcore_flops(model: nn.Module, args: tuple) -> tuple[int, Counter, list[str]]:
    from fvcore.nn import FlopCountAnalysis

    with _quiet(), torch.no_grad():
        analysis = FlopCountAnalysis(model, args)
        analysis.unsupported_ops_warnings(False)
        analysis.uncalled_modules_warnings(False)
        total = 2 * analysis.total()  # fvcore counts one "flop" per multiply-accumulate
        by_op = Counter({k: 2 * v for k, v in analysis.by_operator().items()})
        skipped = sorted(k.removeprefix("aten::") for k in analysis.unsupported_ops())
    return total, by_op, skipped


def ptflops_flops(model: nn.Module, args: tuple, kwargs: dict, backend: str) -> int:
    from ptflops import get_model_complexity_info

    def construct(_res: tuple) -> Any:
        return dict(kwargs) if kwargs else args[0]

    with _quiet(), torch.no_grad():
        macs, _ = get_model_complexity_info(model, (1,), input_constructor=construct,
                                            as_strings=False, print_per_layer_stat=False,
                                            backend=backend)
    # The pytorch backend divides by the batch it reads off the first positional input
    # (none with keyword inputs): multiply back to a whole step.
    per_step = len(args[0]) if backend == "pytorch" and not kwargs else 1
    return 2 * int(macs) * per_step


def thop_flops(model: nn.Module, args: tuple) -> int:
    import thop

    with _quiet(), torch.no_grad():
        macs, _ = thop.profile(model, inputs=args, verbose=False)
    return 2 * int(macs)


def deepspeed_flops(model: nn.Module, args: tuple, kwargs: dict) -> tuple[int, Counter]:
    from deepspeed.profiling.flops_profiler import get_model_profile
    from deepspeed.profiling.flops_profiler import profiler as ds

    by_fn: Counter = Counter()

    class Recording(list):  # each module's list of (function, flops) as the profiler pops it
        def pop(self, *a: Any) -> Any:
            entries = super().pop(*a)
            for name, flops in entries:
                by_fn[name] += flops
            return entries

    ds.module_flop_count = Recording()
    with _quiet(), torch.no_grad():
        flops, _, _ = get_model_profile(model, args=list(args), kwargs=dict(kwargs),
                                        print_profile=False, detailed=False, as_string=False)
    return int(flops), by_fn


def measure_sample(path: str, batch_size: int) -> dict[str, Any]:
    """Every tool's FLOPs for one step of the sample."""
    stepper = Stepper(path)
    inputs = stepper.spec.make_inputs(batch_size)
    step = stepper.step_for(inputs)
    with stepper.grad():
        step()  # optimizer state and caches exist before counting, as in the worker
    out: dict[str, Any] = {"train": stepper.train}
    total, by_op, uncounted = batchscope_flops(step, stepper.model, stepper.optimizer, inputs,
                                               stepper.grad)
    out["batchscope"] = total
    out["batchscope_by_op"] = by_op
    out["batchscope_uncounted"] = uncounted
    out["flop_counter"], out["flop_counter_by_op"] = flop_counter_flops(step, stepper.grad)
    forward = stepper.spec.step_fn(stepper.model, inputs)
    args, kwargs = forward_call(stepper.model, forward)
    positional = as_positional(stepper.model, args, kwargs)
    runners: dict[str, Callable[[], Any]] = {
        "fvcore": lambda: fvcore_flops(stepper.model, positional),
        "ptflops (pytorch)": lambda: ptflops_flops(stepper.model, args, kwargs, "pytorch"),
        "ptflops (aten)": lambda: ptflops_flops(stepper.model, args, kwargs, "aten"),
        "thop": lambda: thop_flops(stepper.model, positional),
        "deepspeed": lambda: deepspeed_flops(stepper.model, args, kwargs),
    }
    for name, run in runners.items():
        try:
            result = run()
        except Exception as exc:  # noqa: BLE001 - a tool that fails is reported, not fatal
            out[name] = f"failed: {type(exc).__name__}: {str(exc)[:80]}"
            continue
        if isinstance(result, tuple):
            out[name] = result[0]
            out[f"{name}_detail"] = result[1:]
        else:
            out[name] = result
    return out


# --- probes: one kind of op each, as the samples use it --------------------------------------

class _Probe(nn.Module):
    def __init__(self, fn: Callable[..., torch.Tensor], *modules: nn.Module) -> None:
        super().__init__()
        self.mods = nn.ModuleList(modules)
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(self, x)


def _probes() -> dict[str, tuple[nn.Module, torch.Tensor, str]]:
    """name -> (model, input, the samples that use it)."""
    seq = torch.randn(4, 1, 64)
    img = torch.randn(2, 8, 16, 16)
    return {
        "nn.Linear": (_Probe(lambda s, x: s.mods[0](x), nn.Linear(64, 64)), seq, "all but cnn"),
        "F.linear (tied LM head)": (_Probe(lambda s, x: F.linear(x, s.mods[0].weight),
                                           nn.Linear(64, 64)), seq, "llm_decode"),
        "nn.Conv2d": (_Probe(lambda s, x: s.mods[0](x), nn.Conv2d(8, 8, 3, padding=1)), img,
                      "cnn, train_cnn"),
        "F.scaled_dot_product_attention": (
            _Probe(lambda s, x: F.scaled_dot_product_attention(
                x.view(4, 4, 1, 16), x.view(4, 4, 1, 16).expand(4, 4, 8, 16),
                x.view(4, 4, 1, 16).expand(4, 4, 8, 16))), seq, "llm_decode"),
        "nn.LayerNorm": (_Probe(lambda s, x: s.mods[0](x), nn.LayerNorm(64)), seq, "llm_decode"),
        "nn.BatchNorm2d (eval)": (_Probe(lambda s, x: s.mods[0](x), nn.BatchNorm2d(8).eval()),
                                  img, "cnn, train_cnn"),
        "F.gelu (tanh)": (_Probe(lambda s, x: F.gelu(x, approximate="tanh")), seq,
                          "llm_decode"),
        "nn.ReLU": (_Probe(lambda s, x: s.mods[0](x), nn.ReLU()), img, "all but llm_decode"),
        "residual x + y": (_Probe(lambda s, x: x + x * 2), seq, "llm_decode, cnn"),
        "nn.MaxPool2d": (_Probe(lambda s, x: s.mods[0](x), nn.MaxPool2d(2)), img,
                         "cnn, train_cnn"),
        "nn.AdaptiveAvgPool2d": (_Probe(lambda s, x: s.mods[0](x), nn.AdaptiveAvgPool2d(1)),
                                 img, "cnn"),
    }


def probe_counts(model: nn.Module, x: torch.Tensor) -> dict[str, int | None]:
    """Each tool's FLOPs for the probe (None where the tool fails on it)."""
    model.eval()
    with torch.inference_mode():
        ops = count_step(lambda: model(x), weights=list(model.parameters()), state=[x],
                         root=model)
    counts: dict[str, int | None] = {"batchscope": sum(op.flops or 0 for op in ops)}
    counts["flop_counter"] = flop_counter_flops(lambda: model(x), torch.inference_mode)[0]
    runners = {
        "fvcore": lambda: fvcore_flops(model, (x,))[0],
        "ptflops (pytorch)": lambda: ptflops_flops(model, (x,), {}, "pytorch"),
        "ptflops (aten)": lambda: ptflops_flops(model, (x,), {}, "aten"),
        "thop": lambda: thop_flops(model, (x,)),
        "deepspeed": lambda: deepspeed_flops(model, (x,), {})[0],
    }
    for tool, run in runners.items():
        try:
            counts[tool] = run()
        except Exception:  # noqa: BLE001 - a tool that fails on a probe is reported
            counts[tool] = None
    return counts


def probe_table() -> list[list[str]]:
    rows = []
    for name, (model, x, used_by) in _probes().items():
        counts = probe_counts(model, x)
        rows.append([name, used_by] + [
            "fails" if counts[t] is None else ("✓" if counts[t] else "**✗**") for t in TOOLS])
    return rows


def _g(flops: Any, reference: int) -> str:
    if isinstance(flops, str):
        return flops
    amount = f"{flops / 1e9:.3f} G" if reference >= 1e9 else f"{flops / 1e6:.3f} M"
    return f"{amount} ({flops / reference:.1%})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=SAMPLES)
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()
    torch.manual_seed(0)
    rows, notes = [], []
    for path in args.models:
        result = measure_sample(path, args.batch_size)
        ref = result["batchscope"]
        name = Path(path).name + (" (train step)" if result["train"] else "")
        rows.append([name] + [_g(result[t], ref) if t in result else "not run" for t in TOOLS])
        fl_missing = {op: f for op, f in result["batchscope_by_op"].items()
                      if result["flop_counter_by_op"].get(op, 0) == 0}
        top = sorted(fl_missing.items(), key=lambda kv: -kv[1])[:6]
        notes.append(f"- {name}: flop_counter has no FLOPs for "
                     + ", ".join(f"`{op}` ({f / ref:.1%})" for op, f in top)
                     + ("; batchscope leaves uncounted: "
                        f"{', '.join(result['batchscope_uncounted'])}"
                        if result["batchscope_uncounted"] else "; batchscope counts every op"))
        if "fvcore_detail" in result:
            skipped = result["fvcore_detail"][1]
            notes.append(f"  fvcore skips: {', '.join(skipped) or 'nothing'}")
        print(f"{path}: done", file=sys.stderr, flush=True)
    print(f"FLOPs per step at batch {args.batch_size} (share of batchscope's count)\n")
    print(table(["sample", *TOOLS], rows))
    print()
    print("\n".join(notes))
    print("\nWhich tool counts each kind of op the samples use (✓ counted, ✗ missed)\n")
    print(table(["op", "in samples", *TOOLS], probe_table()))


if __name__ == "__main__":
    main()

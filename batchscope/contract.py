"""The model-file contract (DESIGN.md): load a user's file into a :class:`ModelSpec`.

A model file defines ``build_model()`` and ``make_inputs(batch_size)``, optionally
``run(model, inputs)`` and the settings ``BATCH_SIZES``, ``UNIT``, ``UNITS_PER_ROW`` (units one
row yields: a prefill row's tokens; ``"seq_len"``: as many as its sequence length), ``MODE``,
and one second axis: ``CONTEXTS`` (a decode model's context lengths: then
``make_inputs(batch_size, context)``; the sweep runs at the first, and a small grid of step
times at all of them feeds the serving what-if) or ``SEQ_LENS`` (the sequence lengths of a
row: then ``make_inputs(batch_size, seq_len)``; the sweep runs at the first, and the grid of
batch size × sequence length is reported as tokens per step against units/s and memory). Anything
that breaks the contract raises :class:`~batchscope.errors.ModelFileError` with one
sentence naming what is wrong, and the user's own traceback frames where there are any.

This module imports user code, so only the worker process calls :func:`load_model_file`;
the parent checks options only.
"""

from __future__ import annotations

import importlib.util
import inspect
import operator
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from batchscope.errors import ModelFileError
from batchscope.tensors import iter_tensors
from batchscope.tracebacks import describe_exception, quote, truncate, user_frames

MODES = ("inference", "train")
DEFAULT_UNIT = "sample"
DEFAULT_MODE = "inference"
# Even at one byte per row a batch this large is a terabyte: beyond any one device, and
# still far inside the int64 sizes torch and the byte accounting work in.
MAX_BATCH_SIZE = 2**40
# A unit is one word ("token", "image"); it is printed in every table header and rate.
MAX_UNIT_CHARS = 32
# A file that lacks build_model() is told what it does define; past this many names, "…".
MAX_NAMES_LISTED = 12
OPTIONAL_FUNCTIONS = ("run", "make_optimizer", "loss")
SETTINGS = ("BATCH_SIZES", "UNIT", "MODE", "CONTEXTS", "SEQ_LENS", "UNITS_PER_ROW")
# A grid of step times at more contexts (or sequence lengths) than this is a second sweep,
# not a grid.
MAX_CONTEXTS = 16
# UNITS_PER_ROW = PER_TOKEN: a row yields as many units as its sequence length (SEQ_LENS).
PER_TOKEN = "seq_len"
# Tokens of context beyond any model's window: a typo, refused before any memory is taken.
MAX_CONTEXT = 10_000_000
# More batch sizes than this is not a sweep anyone waits for (each takes seconds), and
# refusing early keeps a runaway range(1, 2**40) from being walked at all.
MAX_BATCH_SIZES = 1024
# The positional arguments the sweep calls each function of the contract with.
PARAMETERS = {
    "build_model": (),
    "make_inputs": ("batch_size",),
    "run": ("model", "inputs"),
    "make_optimizer": ("model",),
    "loss": ("outputs", "inputs"),
}


@dataclass
class ModelSpec:
    """What a model file provides, checked against the contract."""

    path: Path
    build_model: Callable[[], torch.nn.Module]
    make_inputs: Callable[..., Any]  # (batch_size) or, with CONTEXTS/SEQ_LENS, (batch_size, length)
    run: Callable[[torch.nn.Module, Any], Any] | None
    batch_sizes: list[int] | None
    unit: str
    mode: str
    module: Any = None
    make_optimizer: Callable[[torch.nn.Module], torch.optim.Optimizer] | None = None
    loss: Callable[[Any, Any], torch.Tensor] | None = None
    contexts: list[int] | None = None  # CONTEXTS: make_inputs(batch_size, context)
    seq_lens: list[int] | None = None  # SEQ_LENS: make_inputs(batch_size, seq_len)
    # UNITS_PER_ROW: units one row of a batch yields (a prefill row: its tokens), so that
    # throughput reads in UNITs per second; at the sweep's own sequence length when
    # ``per_token`` (UNITS_PER_ROW = "seq_len").
    units_per_row: int = 1
    per_token: bool = False

    @property
    def grid_axis(self) -> str | None:
        """The second axis: "context" (CONTEXTS), "seq_len" (SEQ_LENS) or None."""
        return "context" if self.contexts else "seq_len" if self.seq_lens else None

    @property
    def lengths(self) -> list[int] | None:
        """The second axis's values (CONTEXTS or SEQ_LENS), the sweep's own first."""
        return self.contexts or self.seq_lens

    @property
    def base_context(self) -> int | None:
        """The length the sweep runs at (the first of CONTEXTS or SEQ_LENS); None without."""
        return self.lengths[0] if self.lengths else None

    def units_per_row_at(self, length: int | None) -> int:
        """Units one row yields at ``length`` of the second axis (None: the sweep's own)."""
        return length if self.per_token and length is not None else self.units_per_row

    def call_make_inputs(self, batch_size: int, context: int | None = None) -> Any:
        if self.lengths is None:
            return self.make_inputs(batch_size)
        return self.make_inputs(batch_size, self.base_context if context is None else context)

    def step_fn(self, model: torch.nn.Module, inputs: Any) -> Callable[[], Any]:
        """One step of the model on ``inputs``, as a zero-argument callable."""
        if self.run is not None:
            run = self.run
            return lambda: run(model, inputs)
        if isinstance(inputs, Mapping):
            return lambda: model(**inputs)
        if isinstance(inputs, (tuple, list)):
            return lambda: model(*inputs)
        return lambda: model(inputs)


def _a(type_name: str) -> str:
    """``"an int"``, ``"a str"``: the article a type name takes."""
    return f"{'an' if type_name[:1].lower() in 'aeiou' else 'a'} {type_name}"


def _defined_names(namespace: Mapping[str, Any]) -> str:
    """The public functions and settings a module defines, listed for an error sentence."""
    names = sorted(
        name
        for name, value in namespace.items()
        if isinstance(name, str) and name.isidentifier() and not name.startswith("_")
        and (callable(value) or name.isupper()) and not inspect.ismodule(value)
    )
    listed = ", ".join(names[:MAX_NAMES_LISTED]) or "nothing public"
    more = len(names) - MAX_NAMES_LISTED
    return f"{listed} and {more} more" if more > 0 else listed


def _length(value: list[Any] | tuple[Any, ...] | range) -> int:
    """``len(value)``, also for a range longer than ``len`` can count."""
    if isinstance(value, range):
        return max(0, -((value.start - value.stop) // value.step))
    return len(value)


def _whole(value: Any, low: int, high: int) -> int | None:
    """``value`` as a plain int when it is an integer (not a bool) from low to high."""
    if isinstance(value, bool) or not hasattr(type(value), "__index__"):
        return None
    number = operator.index(value)
    return number if low <= number <= high else None


def _check_batch_sizes(value: Any, where: str) -> list[int]:
    """BATCH_SIZES as sorted plain ints, or :class:`ModelFileError` naming what is wrong."""
    if not isinstance(value, (list, tuple, range)) or _length(value) == 0:
        raise ModelFileError(f"{where}: BATCH_SIZES must be a non-empty list of integers, "
                             f"not {quote(value)}.")
    if _length(value) > MAX_BATCH_SIZES:
        raise ModelFileError(f"{where}: BATCH_SIZES lists {_length(value):,} batch sizes, "
                             f"more than the {MAX_BATCH_SIZES:,} a sweep can measure.")
    sizes = []
    for b in value:
        size = _whole(b, 1, MAX_BATCH_SIZE)
        if size is None:
            raise ModelFileError(f"{where}: BATCH_SIZES must hold integers from 1 to "
                                 f"{MAX_BATCH_SIZE:,}, found {quote(b)}.")
        sizes.append(size)
    if len(set(sizes)) != len(sizes):
        raise ModelFileError(f"{where}: BATCH_SIZES lists a batch size twice: {quote(sizes)}.")
    return sorted(sizes)


def check_contexts(value: Any, where: str, name: str = "CONTEXTS") -> list[int]:
    """CONTEXTS (or SEQ_LENS, ``name``) as plain ints in the file's order (the first is the
    sweep's own), or :class:`ModelFileError` naming what is wrong."""
    what, low = ("contexts", 0) if name == "CONTEXTS" else ("lengths", 1)
    if not isinstance(value, (list, tuple)) or not value:
        raise ModelFileError(f"{where}: {name} must be a non-empty list of token counts, "
                             f"not {quote(value)}.")
    if len(value) > MAX_CONTEXTS:
        raise ModelFileError(f"{where}: {name} lists {len(value)} {what}, more than the "
                             f"{MAX_CONTEXTS} a grid measures.")
    contexts = []
    for c in value:
        context = _whole(c, low, MAX_CONTEXT)
        if context is None:
            raise ModelFileError(f"{where}: {name} must hold token counts from {low} to "
                                 f"{MAX_CONTEXT:,}, found {quote(c)}.")
        contexts.append(context)
    if len(set(contexts)) != len(contexts):
        raise ModelFileError(f"{where}: {name} lists a {what[:-1]} twice: {quote(contexts)}.")
    return contexts


def _check_unit(value: Any, where: str) -> str:
    unit = value.strip() if isinstance(value, str) else ""
    if not unit or len(unit) > MAX_UNIT_CHARS or not unit.isprintable():
        raise ModelFileError(f"{where}: UNIT must be a short word such as 'token' (at most "
                             f"{MAX_UNIT_CHARS} printable characters), not {quote(value)}.")
    return unit


def _check_mode(value: Any, where: str) -> str:
    if not isinstance(value, str) or value not in MODES:
        raise ModelFileError(f"{where}: MODE must be one of {MODES}, not {quote(value)}.")
    return value


def _check_function(name: str, fn: Any, where: str,
                    parameters: tuple[str, ...] | None = None) -> None:
    """``fn`` is callable the way the sweep calls it (see :data:`PARAMETERS`)."""
    if not callable(fn):
        raise ModelFileError(f"{where}: {name} is {_a(type(fn).__name__)}, not a function.")
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # a builtin or C function without a signature: it is called as it is
    parameters = parameters or PARAMETERS[name]
    try:
        signature.bind(*parameters)
    except TypeError:
        why = ""
        if parameters != PARAMETERS[name]:
            given = ("CONTEXTS or --contexts" if parameters[-1] == "context"
                     else "SEQ_LENS or --seq-lens")
            why = (f" (with {given}"
                   f" it is given the {parameters[-1].replace('_', ' ')} too)")
        raise ModelFileError(f"{where}: {name} cannot be called as {name}("
                             f"{', '.join(parameters)}){why}; check its parameters.") from None


def import_model_file(path: Path) -> Any:
    """Import ``path`` as a fresh module, translating failures into :class:`ModelFileError`."""
    if not path.exists():
        raise ModelFileError(f"model file {path} does not exist.")
    if not path.is_file():
        raise ModelFileError(f"model file {path} is not a file.")
    module_name = f"batchscope_user_model_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ModelFileError(f"{path} cannot be imported as Python (is it a .py file?).")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)  # so the file can import its neighbours
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        sys.modules.pop(module_name, None)
        raise ModelFileError(
            f"{path} line {exc.lineno}: syntax error: {truncate(str(exc.msg))}."
        ) from None
    except SystemExit as exc:
        sys.modules.pop(module_name, None)
        raise ModelFileError(
            f"importing {path} raised SystemExit({quote(exc.code)}): a model file must only "
            "define functions and settings when imported (guard a script's own work with "
            "if __name__ == '__main__':)."
        ) from None
    except Exception as exc:  # noqa: BLE001 - any user exception becomes one sentence
        sys.modules.pop(module_name, None)
        raise ModelFileError(f"importing {path} raised {_sentence(describe_exception(exc))}",
                             detail=user_frames(exc)) from None
    return module


def _sentence(text: str) -> str:
    """``text`` ending with a full stop (once)."""
    return text if text.endswith(".") else text + "."


def load_model_file(path: str | os.PathLike[str], contexts: list[int] | None = None,
                    seq_lens: list[int] | None = None) -> ModelSpec:
    """Load a model file and check it against the contract.

    Example:
        >>> spec = load_model_file("samples/mlp.py")  # doctest: +SKIP
        >>> model = spec.build_model()  # doctest: +SKIP
    """
    path = Path(path)
    module = import_model_file(path)
    # What the file itself defines: a module-level __getattr__ must not invent (or raise
    # for) names the file does not have.
    namespace = vars(module)
    for required in ("build_model", "make_inputs"):
        if namespace.get(required) is None:
            raise ModelFileError(
                f"{path} defines no {required}() (the contract needs build_model() and "
                f"make_inputs(batch_size)); it defines: {_defined_names(namespace)}."
            )
    return check_spec(
        path=path,
        build_model=namespace["build_model"],
        make_inputs=namespace["make_inputs"],
        optional={name: namespace.get(name) for name in OPTIONAL_FUNCTIONS},
        settings={name: namespace.get(name) for name in SETTINGS},
        module=module,
        contexts=contexts,
        seq_lens=seq_lens,
    )


def _check_units_per_row(value: Any, where: str, seq_lens: list[int] | None) -> int:
    if _per_token(value):
        if seq_lens is None:
            raise ModelFileError(f"{where}: UNITS_PER_ROW = {PER_TOKEN!r} needs SEQ_LENS (or "
                                 "--seq-lens): it counts each row's sequence length.")
        return seq_lens[0]
    units = _whole(value, 1, MAX_CONTEXT)
    if units is None:
        raise ModelFileError(f"{where}: UNITS_PER_ROW must be a whole number of units one "
                             f"row yields, 1 to {MAX_CONTEXT:,} (e.g. a prefill row's tokens), "
                             f"or {PER_TOKEN!r} with SEQ_LENS, not {quote(repr(value), 40)}.")
    return units


def _per_token(value: Any) -> bool:
    return isinstance(value, str) and value == PER_TOKEN


def _second_axis(settings: dict[str, Any], where: str, contexts: list[int] | None,
                 seq_lens: list[int] | None) -> tuple[list[int] | None, list[int] | None]:
    """(CONTEXTS, SEQ_LENS): an option (``--contexts``, ``--seq-lens``) replaces whichever
    the file set; a file that sets both is refused."""
    if contexts is not None:
        return check_contexts(contexts, "--contexts"), None
    if seq_lens is not None:
        return None, check_contexts(seq_lens, "--seq-lens", "SEQ_LENS")
    if settings.get("CONTEXTS") is not None and settings.get("SEQ_LENS") is not None:
        raise ModelFileError(f"{where}: CONTEXTS and SEQ_LENS are both set; a model sweeps "
                             "one second axis: a decode model's context, or a row's length.")
    if settings.get("CONTEXTS") is not None:
        return check_contexts(settings["CONTEXTS"], where), None
    if settings.get("SEQ_LENS") is not None:
        return None, check_contexts(settings["SEQ_LENS"], where, "SEQ_LENS")
    return None, None


def check_spec(path: Path, build_model: Any, make_inputs: Any, optional: dict[str, Any],
               settings: dict[str, Any], module: Any = None,
               contexts: list[int] | None = None,
               seq_lens: list[int] | None = None) -> ModelSpec:
    """Check the functions and settings of a model file (or of API arguments).

    A setting that is None is not set and takes its default; any other value must be of
    the right type and range. ``contexts`` (``--contexts``) and ``seq_lens``
    (``--seq-lens``) replace the file's second axis, whichever it set.

    Raises:
        ModelFileError: one sentence naming ``path`` and the first thing that is wrong.
    """
    where = str(path)
    try:
        _check_function("build_model", build_model, where)
        contexts, seq_lens = _second_axis(settings, where, contexts, seq_lens)
        _check_function("make_inputs", make_inputs, where,
                        ("batch_size", "context") if contexts is not None else
                        ("batch_size", "seq_len") if seq_lens is not None else None)
        for name, fn in optional.items():
            if fn is not None:
                _check_function(name, fn, where)
        batch_sizes = settings.get("BATCH_SIZES")
        if batch_sizes is not None:
            batch_sizes = _check_batch_sizes(batch_sizes, where)
        unit = settings.get("UNIT")
        unit = DEFAULT_UNIT if unit is None else _check_unit(unit, where)
        mode = settings.get("MODE")
        mode = DEFAULT_MODE if mode is None else _check_mode(mode, where)
        units_per_row = settings.get("UNITS_PER_ROW")
        per_token = _per_token(units_per_row)
        units_per_row = 1 if units_per_row is None else _check_units_per_row(units_per_row,
                                                                              where, seq_lens)
    except ModelFileError:
        raise
    except Exception as exc:  # noqa: BLE001 - the values are user objects running user code
        raise ModelFileError(
            f"{where}: checking its functions and settings raised "
            f"{_sentence(describe_exception(exc))}"
        ) from None
    return ModelSpec(
        path=path,
        build_model=build_model,
        make_inputs=make_inputs,
        run=optional.get("run"),
        batch_sizes=batch_sizes,
        unit=unit,
        mode=mode,
        module=module,
        make_optimizer=optional.get("make_optimizer"),
        loss=optional.get("loss"),
        contexts=contexts,
        seq_lens=seq_lens,
        units_per_row=units_per_row,
        per_token=per_token,
    )


def check_inputs(inputs: Any, batch_size: int, where: str) -> None:
    """Check what ``make_inputs(batch_size)`` returned against the contract."""
    if not isinstance(inputs, (torch.Tensor, tuple, list, Mapping)):
        raise ModelFileError(
            f"{where}: make_inputs({batch_size}) returned a {type(inputs).__name__}; "
            "expected a Tensor, a tuple/list (positional arguments) or a dict (keyword "
            "arguments)."
        )
    tensors = [t for t in iter_tensors(inputs) if t.dim() > 0]
    if not tensors:
        raise ModelFileError(
            f"{where}: make_inputs({batch_size}) returned no tensor with a batch dimension."
        )
    first = tensors[0]
    if first.shape[0] != batch_size:
        raise ModelFileError(
            f"{where}: make_inputs({batch_size}) returned a first tensor of shape "
            f"{list(first.shape)}, whose leading (batch) dimension is {first.shape[0]}, "
            f"not {batch_size}."
        )


def spec_from_callables(build_model: Any, make_inputs: Any, run: Any = None,
                        make_optimizer: Any = None, loss: Any = None,
                        batch_sizes: list[int] | None = None, unit: str | None = None,
                        mode: str | None = None, name: str | None = None,
                        contexts: list[int] | None = None,
                        seq_lens: list[int] | None = None) -> ModelSpec:
    """A :class:`ModelSpec` from functions passed to the Python API, checked the same way."""
    label = name or getattr(build_model, "__module__", "model") + "." + getattr(
        build_model, "__qualname__", "build_model")
    return check_spec(
        path=Path(label),
        build_model=build_model,
        make_inputs=make_inputs,
        optional={"run": run, "make_optimizer": make_optimizer, "loss": loss},
        settings={"BATCH_SIZES": batch_sizes, "UNIT": unit, "MODE": mode},
        contexts=contexts,
        seq_lens=seq_lens,
    )

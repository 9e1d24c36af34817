"""The model-file contract (DESIGN.md): load a user's file into a :class:`ModelSpec`.

A model file defines ``build_model()`` and ``make_inputs(batch_size)``, optionally
``run(model, inputs)`` and the settings ``BATCH_SIZES``, ``UNIT`` and ``MODE``. Anything
that breaks the contract raises :class:`~batchscope.errors.ModelFileError` with one
sentence naming what is wrong, and the user's own traceback frames where there are any.

This module imports user code, so only the worker process calls :func:`load_model_file`;
the parent checks options only.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import sys
import sysconfig
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from batchscope.errors import ModelFileError

MODES = ("inference", "train")
DEFAULT_UNIT = "sample"
DEFAULT_MODE = "inference"
# Longest exception text we echo back: a hostile or runaway message must not flood reports.
MAX_ERROR_CHARS = 2000


@dataclass
class ModelSpec:
    """What a model file provides, checked against the contract."""

    path: Path
    build_model: Callable[[], torch.nn.Module]
    make_inputs: Callable[[int], Any]
    run: Callable[[torch.nn.Module, Any], Any] | None
    batch_sizes: list[int] | None
    unit: str
    mode: str
    module: Any = None
    make_optimizer: Callable[[torch.nn.Module], torch.optim.Optimizer] | None = None
    loss: Callable[[Any, Any], torch.Tensor] | None = None

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


def truncate(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """Cut ``text`` to ``limit`` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"… [{len(text) - limit} more characters cut]"


def describe_exception(exc: BaseException) -> str:
    """``TypeName: message`` on one line, truncated."""
    message = str(exc).strip().replace("\n", " ")
    return truncate(f"{type(exc).__name__}: {message}" if message else type(exc).__name__)


def _library_dirs() -> list[str]:
    paths = sysconfig.get_paths()
    dirs = {paths.get("stdlib", ""), paths.get("purelib", ""), paths.get("platlib", "")}
    dirs.add(str(Path(__file__).resolve().parent))
    return [d for d in dirs if d]


def user_frames(exc: BaseException) -> str:
    """The traceback of ``exc`` restricted to the user's own files.

    Frames inside the standard library, installed packages, importlib and batchscope are
    left out, so the user sees only where their code went wrong.
    """
    skip = _library_dirs()
    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if not f.filename.startswith("<frozen")
        and not any(os.path.abspath(f.filename).startswith(d) for d in skip)
    ]
    if not frames:
        return ""
    return "".join(traceback.format_list(frames)).rstrip()


def _defined_names(module: Any) -> list[str]:
    return sorted(
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and (callable(value) or name.isupper())
        and not inspect.ismodule(value)
    )


def _check_batch_sizes(value: Any, where: str) -> list[int]:
    if not isinstance(value, Sequence) or isinstance(value, (str, bytes)) or not value:
        raise ModelFileError(f"{where}: BATCH_SIZES must be a non-empty list of integers.")
    for b in value:
        if isinstance(b, bool) or not isinstance(b, int) or b <= 0:
            raise ModelFileError(
                f"{where}: BATCH_SIZES must hold positive integers, found {b!r}."
            )
    if len(set(value)) != len(value):
        raise ModelFileError(f"{where}: BATCH_SIZES has duplicates: {list(value)}.")
    return sorted(value)


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
        raise ModelFileError(
            f"{path} line {exc.lineno}: syntax error: {exc.msg}."
        ) from None
    except Exception as exc:  # noqa: BLE001 - any user exception becomes one sentence
        frames = user_frames(exc)
        err = ModelFileError(f"importing {path} raised {describe_exception(exc)}")
        err.detail = frames  # type: ignore[attr-defined]
        raise err from None
    return module


def load_model_file(path: str | os.PathLike[str]) -> ModelSpec:
    """Load a model file and check it against the contract.

    Example:
        >>> spec = load_model_file("samples/mlp.py")  # doctest: +SKIP
        >>> model = spec.build_model()  # doctest: +SKIP
    """
    path = Path(path)
    module = import_model_file(path)
    where = str(path)
    for required in ("build_model", "make_inputs"):
        fn = getattr(module, required, None)
        if fn is None:
            names = ", ".join(_defined_names(module)) or "nothing public"
            raise ModelFileError(
                f"{where} defines no {required}() (the contract needs build_model() and "
                f"make_inputs(batch_size)); it defines: {names}."
            )
    return check_spec(
        path=path,
        build_model=module.build_model,
        make_inputs=module.make_inputs,
        optional={name: getattr(module, name, None) for name in OPTIONAL_FUNCTIONS},
        settings={name: getattr(module, name, None) for name in SETTINGS},
        module=module,
    )


OPTIONAL_FUNCTIONS = ("run", "make_optimizer", "loss")
SETTINGS = ("BATCH_SIZES", "UNIT", "MODE")


def check_spec(path: Path, build_model: Any, make_inputs: Any, optional: dict[str, Any],
               settings: dict[str, Any], module: Any = None) -> ModelSpec:
    """Check the optional functions and settings of a model file (or of API arguments)."""
    where = str(path)
    for name in ("build_model", "make_inputs"):
        fn = build_model if name == "build_model" else make_inputs
        if not callable(fn):
            raise ModelFileError(f"{where}: {name} is a {type(fn).__name__}, not a function.")
    for name, fn in optional.items():
        if fn is not None and not callable(fn):
            raise ModelFileError(f"{where}: {name} is a {type(fn).__name__}, not a function.")
    batch_sizes = settings.get("BATCH_SIZES")
    if batch_sizes is not None:
        batch_sizes = _check_batch_sizes(batch_sizes, where)
    unit = settings.get("UNIT") or DEFAULT_UNIT
    if not isinstance(unit, str) or not unit.strip():
        raise ModelFileError(f"{where}: UNIT must be a non-empty string such as 'token'.")
    mode = settings.get("MODE") or DEFAULT_MODE
    if mode not in MODES:
        raise ModelFileError(f"{where}: MODE must be one of {MODES}, not {mode!r}.")
    return ModelSpec(
        path=path,
        build_model=build_model,
        make_inputs=make_inputs,
        run=optional.get("run"),
        batch_sizes=batch_sizes,
        unit=unit.strip(),
        mode=mode,
        module=module,
        make_optimizer=optional.get("make_optimizer"),
        loss=optional.get("loss"),
    )


def iter_tensors(obj: Any) -> list[torch.Tensor]:
    """All tensors inside nested tuples, lists and dicts, in order."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, Mapping):
        return [t for v in obj.values() for t in iter_tensors(v)]
    if isinstance(obj, (tuple, list)):
        return [t for v in obj for t in iter_tensors(v)]
    return []


def map_tensors(obj: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """Apply ``fn`` to every tensor inside nested tuples, lists and dicts."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, Mapping):
        return {k: map_tensors(v, fn) for k, v in obj.items()}
    if isinstance(obj, tuple):
        return tuple(map_tensors(v, fn) for v in obj)
    if isinstance(obj, list):
        return [map_tensors(v, fn) for v in obj]
    return obj


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
                        mode: str | None = None, name: str | None = None) -> ModelSpec:
    """A :class:`ModelSpec` from functions passed to the Python API, checked the same way."""
    label = name or getattr(build_model, "__module__", "model") + "." + getattr(
        build_model, "__qualname__", "build_model")
    return check_spec(
        path=Path(label),
        build_model=build_model,
        make_inputs=make_inputs,
        optional={"run": run, "make_optimizer": make_optimizer, "loss": loss},
        settings={"BATCH_SIZES": batch_sizes, "UNIT": unit, "MODE": mode},
    )

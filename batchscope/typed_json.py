"""Records to JSON-safe values and back, for any dataclass of the project.

:func:`to_builtins` writes every field (enums as their values, dict keys as strings, sets
sorted: the same record always gives the same JSON); :func:`decode` reads such values back
into the typed record, each field checked against its annotation by msgspec. report.json
(records/codec.py) and the ceilings' cache (hardware/cache.py) use them (the worker's
messages are pickled: profiler/protocol.py); nothing here knows any record.

Example:
    >>> from batchscope.hardware.figures import OpCost
    >>> decode(to_builtins(OpCost(400, 25, 1e-6, 9e-7, 2e-6, 0.05)), OpCost).calls_per_chunk
    400
"""

from __future__ import annotations

import dataclasses
import json
from enum import Enum
from typing import Any, TypeVar

import msgspec

T = TypeVar("T")


def to_builtins(obj: Any) -> Any:
    """A record (dataclasses, enums, nested containers) as JSON-safe values: every field,
    dict keys as strings, sets sorted, so that the same record always gives the same JSON.

    (msgspec's own ``to_builtins`` leaves out the fields a decoded dataclass took from its
    class defaults, so it is not used here.)
    """
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_builtins(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Enum):
        return obj.value
    if isinstance(obj, dict):
        return {(k.value if isinstance(k, Enum) else str(k)): to_builtins(v)
                for k, v in obj.items()}
    if isinstance(obj, (set, frozenset)):
        return sorted(to_builtins(v) for v in obj)
    if isinstance(obj, (list, tuple)):
        return [to_builtins(v) for v in obj]
    return obj


def decode(value: Any, type_: type[T]) -> T:
    """JSON-safe values (as :func:`to_builtins` gives them) back into a typed record.

    Raises:
        msgspec.ValidationError: a field of the wrong type, with where it is.
        ValueError: a value JSON cannot hold (NaN, infinity).
    """
    return msgspec.json.decode(json.dumps(value, allow_nan=False), type=type_, strict=True)

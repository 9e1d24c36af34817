"""Cache measured :class:`Ceilings` per machine as JSON, so calibration runs once.

The cache folder is ``$BATCHSCOPE_CACHE_DIR``, else ``$XDG_CACHE_HOME/batchscope``, else
``~/.cache/batchscope``. Each file is named by a short hash of the machine key and holds the
full key inside: a different CPU model, GPU (CUDA index, name, UUID, driver), thread count,
torch version or calibration format gets a different file and is measured afresh, so
``cuda:0`` and ``cuda:1`` never share an entry. Files are written
atomically; a corrupt, foreign or non-finite file is ignored and re-measured, never fatal.

Example:
    >>> from batchscope.hardware.cache import load_or_measure
    >>> c = load_or_measure("cpu")       # measures once (seconds), then reads the cache
    >>> c.source in ("measured", "cache")
    True
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import msgspec
import torch

from batchscope.hardware import microbench
from batchscope.hardware.busy import BUSY_SHARE, OtherLoad
from batchscope.hardware.types import FP32, Ceilings
from batchscope.typed_json import to_builtins

log = logging.getLogger(__name__)

# Bump when microbench changes what or how it measures, so old caches are re-measured.
# 2: overhead floor is the median over several tiny op kinds; 3: cache_bytes is measured,
# the CUDA index is in the key and CUDA events record on the measured device's stream.
# 4: the peak of a dtype is the best of torch.mm, F.linear and a 3x3 convolution (issue 13).
# 5: the bandwidth is the best of a copy and an in-place update (write-allocate; issue 13).
# 6: the details are typed records (hardware/figures.py; issue 30).
# 7: a roof per kernel family (matmul, convolution), the theoretical peak beside them, and
# each repeat's quartiles (issue 32).
CALIBRATION_FORMAT = 7
# Hex digits of the key's SHA-256 in the file name: short to read, ample against collisions
# (and a collision is harmless: the full key inside is compared too).
_HASH_DIGITS = 12


def cache_dir() -> Path:
    """The folder that holds cached ceilings (not created here)."""
    explicit = os.environ.get("BATCHSCOPE_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "batchscope"


def _device_type(device: str | torch.device) -> str:
    return torch.device(device).type


def machine_key(device: str | torch.device) -> str:
    """The full cache key of ``device`` on this machine, as canonical JSON.

    It names the calibration format, the device type, the CPU model, the intra-op thread
    count and the torch version; for CUDA also the GPU's index, name, UUID and driver
    version (reading those initialises CUDA in this process).

    Args:
        device: "cpu", "cuda" or "cuda:N" (or a ``torch.device``); plain "cuda" is the
            current device.
    """
    dev = torch.device(device)
    key: dict[str, Any] = {
        "format": CALIBRATION_FORMAT,
        "device": dev.type,
        "cpu": microbench.cpu_model_name(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }
    if dev.type == "cuda":
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        key["gpu"] = to_builtins(microbench.gpu_identity(dev))
    return json.dumps(key, sort_keys=True, separators=(",", ":"))


def _path_for(device_type: str, key: str) -> Path:
    digest = hashlib.sha256(key.encode()).hexdigest()[:_HASH_DIGITS]
    return cache_dir() / f"ceilings-{device_type}-{digest}.json"


def cache_path(device: str | torch.device) -> Path:
    """Where the ceilings of ``device`` on this machine are (or would be) cached."""
    return _path_for(_device_type(device), machine_key(device))


def _reject_constant(name: str) -> float:
    raise ValueError(f"non-finite number {name} in cache file")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # "1e999" parses to inf without passing parse_constant
        raise ValueError(f"non-finite number {text} in cache file")
    return value


def _positive(value: float) -> bool:
    return math.isfinite(value) and value > 0


def _read(path: Path, key: str) -> Ceilings | None:
    """The cached ceilings at ``path`` if the file is sound and made for ``key``, else None."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("ignoring unreadable ceilings cache %s: %s", path, exc)
        return None
    try:
        data = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
        if not isinstance(data, dict) or data.get("key") != key:
            log.info("ignoring ceilings cache %s: made for another machine key", path)
            return None
        ceilings = Ceilings.from_dict(data)
        figures = [*ceilings.peak_flops_per_s.values(), ceilings.bandwidth_bytes_per_s,
                   ceilings.overhead_s,
                   *(roof.flops_per_s for by_dtype in ceilings.family_peaks.values()
                     for roof in by_dtype.values())]
        if FP32 not in ceilings.peak_flops_per_s or not all(_positive(v) for v in figures):
            raise ValueError("missing or non-positive figures")
    except (ValueError, KeyError, TypeError, AttributeError, msgspec.ValidationError) as exc:
        log.warning("ignoring corrupt ceilings cache %s: %s", path, exc)
        return None
    ceilings.source = "cache"
    return ceilings


def _write(path: Path, ceilings: Ceilings) -> None:
    """Write ``ceilings`` to ``path`` atomically; see :func:`write_json_atomically`."""
    write_json_atomically(path, ceilings.to_dict(), "ceilings")


def write_json_atomically(path: Path, data: Any, what: str) -> None:
    """Write ``data`` as JSON to ``path`` atomically (temp file in the same folder, then
    rename).

    A cache that cannot be written only costs a re-measurement next time: warn (naming
    ``what``), don't fail.
    """
    tmp: str | None = None
    try:
        text = json.dumps(data, allow_nan=False, indent=2, sort_keys=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}-", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        tmp = None
    except (OSError, ValueError, TypeError) as exc:
        log.warning("could not cache %s at %s: %s", what, path, exc)
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):  # the temp file may already be gone
                os.unlink(tmp)


def load_or_measure(device: str | torch.device = "cpu", *, recalibrate: bool = False) -> Ceilings:
    """The ceilings of ``device``: from the cache when valid, else measured and cached.

    Args:
        device: "cpu", "cuda" or "cuda:N", or a ``torch.device`` (CUDA figures are read and
            measured in this process, which therefore initialises CUDA). Pass the index:
            plain "cuda" (``device.type``) measures the current device, cuda:0 unless the
            caller set another.
        recalibrate: measure even when a valid cache exists, and overwrite it.

    Returns:
        Ceilings with ``source="cache"`` or ``source="measured"`` and ``key`` set.
    """
    key = machine_key(device)
    path = _path_for(_device_type(device), key)
    if not recalibrate:
        cached = _read(path, key)
        if cached is not None:
            return cached
    with OtherLoad() as load:
        ceilings = microbench.measure(device)
    ceilings.key = key
    ceilings.source = "measured"
    if math.isfinite(load.share):  # NaN: too short to judge, or no /proc/stat
        ceilings.details = dataclasses.replace(ceilings.details, other_cpu_share=load.share)
    if load.share >= BUSY_SHARE:
        # Low figures, cached, would misplace every op of every later run on this machine
        # (a 2-core EPYC measured 14 GFLOP/s fp32 and 3.3 GB/s while tests ran beside it,
        # 115 GFLOP/s and 17.5 GB/s alone): used for this run only, and said so.
        ceilings.source = "measured on a busy machine, not cached"
        log.warning("other processes took %.0f%% of the CPU while the ceilings were measured; "
                    "not caching them", load.share * 100)
        return ceilings
    _write(path, ceilings)
    return ceilings

"""The all-reduce bus bandwidth of a group of ranks, cached beside the ceilings.

A data-parallel sweep (profiler/ranks.py) measures it at its start the first time a group
of that shape runs here (backend, device type, ranks per host, torch version) and reads it
from the cache after, as the ceilings are; ``--recalibrate`` measures it again.
``diagnose hardware`` lists what is cached. Files: ``allreduce-<hash>.json`` in the
ceilings' cache folder, the full key inside; a corrupt or foreign file is ignored.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from pathlib import Path
from typing import Any

from batchscope.hardware.cache import cache_dir, write_json_atomically

log = logging.getLogger(__name__)

# Bump when what is measured changes.
INTERCONNECT_FORMAT = 1


def bus_bandwidth_key(backend: str, device_type: str, hosts: list[str],
                      torch_version: str) -> str:
    """The cache key of a group of ranks: ``hosts`` has one entry per rank."""
    per_host = sorted(Counter(hosts).items())
    return json.dumps({"format": INTERCONNECT_FORMAT, "backend": backend,
                       "device": device_type, "ranks_per_host": per_host,
                       "world_size": len(hosts), "torch": torch_version},
                      sort_keys=True, separators=(",", ":"))


def _path(key: str) -> Path:
    return cache_dir() / f"allreduce-{hashlib.sha256(key.encode()).hexdigest()[:12]}.json"


def load_bus_bandwidth(key: str) -> dict[str, Any] | None:
    """The cached figures for ``key``, or None (missing, corrupt, or made for another)."""
    try:
        data = json.loads(_path(key).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("ignoring unreadable all-reduce cache: %s", exc)
        return None
    if not isinstance(data, dict) or data.get("key") != key:
        return None
    busbw = data.get("busbw_bytes_per_s")
    if not isinstance(busbw, (int, float)) or not busbw > 0:
        return None
    return data


def save_bus_bandwidth(key: str, figures: dict[str, Any]) -> None:
    """Write ``figures`` (with ``busbw_bytes_per_s``) for ``key``, atomically; a cache that
    cannot be written only costs a measurement next time."""
    write_json_atomically(_path(key), {**figures, "key": key}, "the all-reduce bandwidth")


def cached_bus_bandwidths() -> list[dict[str, Any]]:
    """Every cached group's figures with its key decoded (``diagnose hardware``)."""
    found = []
    for path in sorted(cache_dir().glob("allreduce-*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            key = json.loads(data["key"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        found.append({**data, "group": key})
    return found

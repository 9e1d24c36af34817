"""NVML's view of a CUDA device: the never-raising probe and CUDA index -> handle.

Every NVML call goes through :class:`~batchscope.hardware.nvml_api.Nvml`'s typed methods,
which turn NVML errors into a reading's reason. Nothing here raises on a machine without a
GPU: :func:`nvml_status` answers ``(False, reason)`` and the mapping functions raise only
:class:`~batchscope.hardware.nvml_api.NvmlUnavailable`, which the sampler factory turns into
a null sampler.

CUDA numbers devices its own way: ``CUDA_VISIBLE_DEVICES`` renumbers and reorders them and
CUDA's default order (fastest first) need not be NVML's (PCI bus order). The only sure link is
the UUID, so :func:`nvml_handle_for_cuda_index` prefers the UUID torch reports and falls back
to reading ``CUDA_VISIBLE_DEVICES`` (indices, GPU UUIDs or their unique prefixes, MIG UUIDs
in both the ``MIG-<uuid>`` and the older ``MIG-GPU-<uuid>/<gi>/<ci>`` form).

Example:
    >>> ok, reason = nvml_status()          # never raises
    >>> isinstance(ok, bool) and isinstance(reason, str)
    True
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

from batchscope.hardware.nvml_api import Handle, Nvml, NvmlUnavailable, init_nvml, load_nvml


def nvml_status(lib: Any = None) -> tuple[bool, str]:
    """Whether NVML works on this machine, and why not. Never raises.

    Args:
        lib: a ``pynvml``-shaped module to use instead of importing ``pynvml``.

    Returns:
        ``(True, "NVML ok: 2 GPUs, driver 550.54")`` or ``(False, reason)``.
    """
    try:
        nvml = init_nvml(lib)
    except NvmlUnavailable as exc:
        return False, str(exc)
    except Exception as exc:  # noqa: BLE001 - the probe answers, whatever happens
        return False, f"NVML probe failed: {type(exc).__name__}: {exc}"
    try:
        count = nvml.device_count()
        if count.reason is not None:
            return False, f"NVML cannot count GPUs: {count.reason}"
        if not count.value:
            return False, "NVML sees no GPU"
        driver = nvml.driver_version().value
        return True, f"NVML ok: {count.value} GPU(s), driver {driver or 'unknown'}"
    finally:
        nvml.shutdown()


# ---------------------------------------------------------------- CUDA_VISIBLE_DEVICES
_MIG_LEGACY = re.compile(r"^MIG-(GPU-[0-9A-Fa-f-]+)/(\d+)/(\d+)$")
_LEADING_INT = re.compile(r"^\+?(\d+)")


def parse_visible_devices(value: str | None) -> list[int | str] | None:
    """Parse ``CUDA_VISIBLE_DEVICES`` the way CUDA reads it.

    Entries are indices ("1", read like ``strtoul`` so "1gpu" is 1), GPU UUIDs or prefixes
    ("GPU-8f3c") or MIG UUIDs ("MIG-..."). The first entry that is none of these (e.g. "-1")
    ends the list; a repeated entry makes the list empty (CUDA then shows no device).

    Returns:
        None when the variable is unset (every device visible, in CUDA's order), else the
        visible entries in order.
    """
    if value is None:
        return None
    entries: list[int | str] = []
    for raw in value.split(","):
        text = raw.strip()
        entry: int | str
        if text.startswith(("GPU-", "MIG-")):
            entry = text
        elif match := _LEADING_INT.match(text):
            entry = int(match.group(1))
        else:
            break
        if entry in entries:
            return []
        entries.append(entry)
    return entries


@dataclass
class NvmlDevice:
    """The NVML view of one CUDA device.

    Attributes:
        handle: NVML handle of the device CUDA uses (a MIG instance handle on MIG).
        uuid: its NVML UUID ("GPU-..." or "MIG-..."), None if NVML would not say.
        name: its product name.
        mapping: how the handle was found, e.g. "torch UUID" or "CUDA_VISIBLE_DEVICES index 1".
        is_mig: whether ``handle`` is a MIG instance.
        parent_handle: the whole GPU's handle when ``is_mig`` (None if unknown).
        notes: caveats to show beside the figures (order assumptions, MIG scope).
    """

    handle: Handle
    uuid: str | None = None
    name: str | None = None
    mapping: str = ""
    is_mig: bool = False
    parent_handle: Handle | None = None
    notes: list[str] = field(default_factory=list)

    def describe(self) -> dict[str, Any]:
        """JSON-safe identity of the device (no handles; the notes travel separately)."""
        return {"uuid": self.uuid, "name": self.name, "mapping": self.mapping,
                "is_mig": self.is_mig}


def _all_devices(nvml: Nvml) -> list[tuple[str, Handle]]:
    """(uuid, handle) of every GPU and every MIG instance NVML knows, in NVML order."""
    found: list[tuple[str, Handle]] = []
    for index in range(nvml.device_count().value or 0):
        gpu = nvml.handle_by_index(index).value
        uuid = nvml.uuid(gpu).value if gpu is not None else None
        if gpu is None or uuid is None:
            continue
        found.append((uuid, gpu))
        for mig_index in range(nvml.mig_count_max(gpu).value or 0):
            mig = nvml.mig_by_index(gpu, mig_index).value
            mig_uuid = nvml.uuid(mig).value if mig is not None else None
            if mig is not None and mig_uuid is not None:
                found.append((mig_uuid, mig))
    return found


def _handle_by_uuid_or_prefix(nvml: Nvml, text: str) -> Handle:
    """The handle whose UUID is ``text`` or uniquely starts with it."""
    handle = nvml.handle_by_uuid(text).value
    if handle is not None:
        return handle
    matches = [h for uuid, h in _all_devices(nvml) if uuid.startswith(text)]
    if len(matches) == 1:
        return matches[0]
    what = f"is ambiguous ({len(matches)} devices)" if matches else "matches no device NVML knows"
    raise NvmlUnavailable(f"CUDA_VISIBLE_DEVICES entry {text!r} {what}")


def _legacy_mig_handle(nvml: Nvml, text: str) -> Handle:
    """Resolve the pre-R470 form ``MIG-GPU-<uuid>/<gpu instance>/<compute instance>``."""
    handle = nvml.handle_by_uuid(text).value  # drivers of that era accept it directly
    if handle is not None:
        return handle
    match = _MIG_LEGACY.match(text)
    if match is None:
        raise NvmlUnavailable(f"CUDA_VISIBLE_DEVICES entry {text!r} is not a MIG UUID")
    parent = _handle_by_uuid_or_prefix(nvml, match.group(1))
    gpu_instance, compute_instance = int(match.group(2)), int(match.group(3))
    for index in range(nvml.mig_count_max(parent).value or 0):
        mig = nvml.mig_by_index(parent, index).value
        if mig is None:
            continue
        gi = nvml.gpu_instance_id(mig).value
        ci = nvml.compute_instance_id(mig).value
        if (gi, ci) == (gpu_instance, compute_instance):
            return mig
    raise NvmlUnavailable(f"no MIG instance {gpu_instance}/{compute_instance} on {match.group(1)}")


def _handle_for_entry(nvml: Nvml, entry: int | str) -> Handle:
    if isinstance(entry, int):
        reading = nvml.handle_by_index(entry)
        if reading.value is None:
            raise NvmlUnavailable(f"NVML has no GPU at index {entry}: {reading.reason}")
        return reading.value
    if entry.startswith("MIG-GPU-"):
        return _legacy_mig_handle(nvml, entry)
    return _handle_by_uuid_or_prefix(nvml, entry)


def _handle_from_torch_uuid(nvml: Nvml, torch_uuid: str) -> Handle | None:
    """torch prints the CUDA UUID without NVML's "GPU-"/"MIG-" prefix: try both."""
    text = str(torch_uuid).strip()
    candidates = [text] if text.startswith(("GPU-", "MIG-")) else [f"GPU-{text}", f"MIG-{text}"]
    for candidate in candidates:
        handle = nvml.handle_by_uuid(candidate).value
        if handle is not None:
            return handle
    return None


def _index_order_note(nvml: Nvml) -> str | None:
    if os.environ.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID":
        return None
    if (nvml.device_count().value or 0) <= 1:
        return None
    return ("mapped by index: CUDA numbers GPUs fastest first unless CUDA_DEVICE_ORDER="
            "PCI_BUS_ID, NVML in PCI order, so on mixed GPUs this may be another GPU")


def nvml_handle_for_cuda_index(
    cuda_index: int, *, torch_uuid: str | None = None, nvml: Nvml | None = None,
) -> NvmlDevice:
    """The NVML device behind ``cuda:<cuda_index>`` of this process.

    NVML must be initialised (see :func:`init_nvml`).

    Args:
        cuda_index: the CUDA ordinal as torch sees it (after CUDA_VISIBLE_DEVICES).
        torch_uuid: ``str(torch.cuda.get_device_properties(cuda_index).uuid)``; the surest
            link, used first when given.
        nvml: NVML (:func:`~batchscope.hardware.nvml_api.init_nvml`); ``pynvml`` when
            not given.

    Raises:
        NvmlUnavailable: the device cannot be found in NVML (reason in the message).
    """
    nvml = nvml if nvml is not None else load_nvml()
    notes: list[str] = []
    handle: Handle | None = None
    if torch_uuid:
        handle = _handle_from_torch_uuid(nvml, torch_uuid)
        mapping = "torch UUID"
        if handle is None:
            notes.append(f"NVML does not know torch's UUID {torch_uuid}; used CUDA_VISIBLE_DEVICES")
    if handle is None:
        raw = os.environ.get("CUDA_VISIBLE_DEVICES")
        visible = parse_visible_devices(raw)
        if visible is None:
            entry: int | str = cuda_index
            mapping = f"index {cuda_index} (CUDA_VISIBLE_DEVICES unset)"
        elif 0 <= cuda_index < len(visible):
            entry = visible[cuda_index]
            mapping = f"CUDA_VISIBLE_DEVICES={raw!r} entry {cuda_index} ({entry})"
        else:
            raise NvmlUnavailable(
                f"cuda:{cuda_index} is not visible with CUDA_VISIBLE_DEVICES={raw!r}")
        handle = _handle_for_entry(nvml, entry)
        if isinstance(entry, int) and (note := _index_order_note(nvml)):
            notes.append(note)
    return _describe(nvml, handle, mapping, notes)


def _describe(nvml: Nvml, handle: Handle, mapping: str, notes: list[str]) -> NvmlDevice:
    uuid = nvml.uuid(handle).value
    is_mig = nvml.is_mig(handle).value
    if is_mig is None:  # a driver without MIG support has no MIG devices, unless the UUID says so
        is_mig = bool(uuid and uuid.startswith("MIG-"))
    device = NvmlDevice(handle=handle, uuid=uuid, mapping=mapping, is_mig=is_mig, notes=notes,
                        name=nvml.name(handle).value)
    if is_mig:
        parent = nvml.mig_parent(handle)
        device.parent_handle = parent.value
        if parent.value is None:
            notes.append(f"MIG instance whose parent GPU is unknown ({parent.reason})")
        else:
            parent_uuid = nvml.uuid(parent.value).value
            notes.append(f"MIG instance: power, energy, clocks, temperature and throttle "
                         f"reasons are those of the whole GPU {parent_uuid}, shared by all "
                         "its instances")
    return device

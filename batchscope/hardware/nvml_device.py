"""NVML access: loading, the never-raising probe, error translation, CUDA index -> handle.

Everything that calls NVML goes through :func:`nvml_query`, the one place where NVML errors
become ``None`` plus a reason ("not supported on this GPU", "no permission", ...), the way
zeus translates them in ``_handle_nvml_errors``. Nothing here raises on a machine without
a GPU: :func:`nvml_status` answers ``(False, reason)`` and the mapping functions raise only
:class:`NvmlUnavailable`, which the sampler factory turns into a null sampler.

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
from typing import Any, NamedTuple

# NVML's C error codes (nvml.h): part of its ABI, identical in every nvidia-ml-py version.
ERROR_UNINITIALIZED = 1
ERROR_INVALID_ARGUMENT = 2
ERROR_NOT_SUPPORTED = 3
ERROR_NO_PERMISSION = 4
ERROR_NOT_FOUND = 6
ERROR_DRIVER_NOT_LOADED = 9
ERROR_TIMEOUT = 10
ERROR_LIBRARY_NOT_FOUND = 12
ERROR_FUNCTION_NOT_FOUND = 13
ERROR_GPU_IS_LOST = 15
ERROR_RESET_REQUIRED = 16
ERROR_LIB_RM_VERSION_MISMATCH = 18
ERROR_NO_DATA = 21
ERROR_NOT_READY = 27
ERROR_UNKNOWN = 999

REASON_NOT_SUPPORTED = "not supported on this GPU"
REASON_NOT_SUPPORTED_MIG = "not supported on a MIG instance"
REASON_NO_PERMISSION = "no permission"
REASON_GPU_LOST = "GPU is lost (it fell off the bus or crashed)"
REASON_MISSING_IN_BINDING = "not in this nvidia-ml-py version"

_REASONS: dict[int, str] = {
    ERROR_UNINITIALIZED: "NVML is not initialised",
    ERROR_INVALID_ARGUMENT: "invalid argument (wrong or stale device handle)",
    ERROR_NOT_SUPPORTED: REASON_NOT_SUPPORTED,
    ERROR_NO_PERMISSION: REASON_NO_PERMISSION,
    ERROR_NOT_FOUND: "not found",
    ERROR_DRIVER_NOT_LOADED: "the NVIDIA driver is not loaded",
    ERROR_TIMEOUT: "NVML timed out",
    ERROR_LIBRARY_NOT_FOUND:
        "the NVML library (libnvidia-ml.so.1) is not found: no NVIDIA driver here",
    ERROR_FUNCTION_NOT_FOUND: "not in this driver's NVML (driver too old)",
    ERROR_GPU_IS_LOST: REASON_GPU_LOST,
    ERROR_RESET_REQUIRED: "the GPU needs a reset",
    ERROR_LIB_RM_VERSION_MISMATCH:
        "NVML and the kernel driver differ in version (reload the driver)",
    ERROR_NO_DATA: "no data yet",
    ERROR_NOT_READY: "not ready",
    ERROR_UNKNOWN: "unknown NVML error",
}
# After these the device answers nothing more: stop querying it.
FATAL_ERRORS = frozenset({ERROR_GPU_IS_LOST, ERROR_RESET_REQUIRED})
# These mean "try the older function instead" when a call has a fallback.
_MISSING_ERRORS = frozenset({ERROR_FUNCTION_NOT_FOUND})

# NVML field ids (nvml.h), for bindings that predate them.
FI_DEV_POWER_INSTANT = 186  # NVML_FI_DEV_POWER_INSTANT: current power draw, milliwatts
# nvmlValueType_t -> the member of the nvmlValue_t union that holds the number.
_VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal",
                  6: "usVal"}


class NvmlUnavailable(Exception):
    """NVML cannot serve this device; ``str(exc)`` is the reason in one sentence."""


class Reading(NamedTuple):
    """What one NVML call gave: a value, or None with the reason and whether it is fatal."""

    value: Any
    reason: str | None = None
    fatal: bool = False
    code: int | None = None


def error_reason(exc: BaseException) -> tuple[str, int | None]:
    """The reason text and NVML error code of an exception raised by an NVML call."""
    code = getattr(exc, "value", None)
    if isinstance(code, int) and code in _REASONS:
        return _REASONS[code], code
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 - pynvml's __str__ itself calls into NVML
        text = type(exc).__name__
    if isinstance(code, int):
        return f"NVML error {code}: {text}", code
    return f"{type(exc).__name__}: {text}", None


def nvml_query(nvml: Any, function: str, *args: Any) -> Reading:
    """Call ``nvml.<function>(*args)``, translating every failure into a :class:`Reading`.

    This is the only place that catches NVML errors. It never raises.

    Args:
        nvml: the ``pynvml`` module (or a stand-in of the same shape).
        function: the NVML function name, e.g. "nvmlDeviceGetPowerUsage".
        *args: its arguments.
    """
    fn = getattr(nvml, function, None)
    if fn is None:
        reason = f"{function} is {REASON_MISSING_IN_BINDING}"
        return Reading(None, reason, code=ERROR_FUNCTION_NOT_FOUND)
    try:
        return Reading(fn(*args))
    except Exception as exc:  # noqa: BLE001 - every NVML failure becomes a reason
        reason, code = error_reason(exc)
        return Reading(None, reason, fatal=code in FATAL_ERRORS, code=code)


def nvml_field_value(nvml: Any, handle: Any, field_id: int) -> Reading:
    """One NVML field value, read with ``nvmlDeviceGetFieldValues(handle, [field_id])``.

    The call succeeds even where the driver does not know the field: its own answer is in
    the value's ``nvmlReturn``, translated here like any NVML error (``NOT_SUPPORTED`` on a
    driver or GPU without the field). Never raises.

    Returns:
        A Reading with the number (the union member that ``valueType`` names), or None and
        the reason.
    """
    reading = nvml_query(nvml, "nvmlDeviceGetFieldValues", handle, [field_id])
    if reading.reason is not None:
        return reading
    try:
        value = reading.value[0]
        code = int(value.nvmlReturn)
        if code == 0:
            member = _VALUE_MEMBERS.get(int(value.valueType), "uiVal")
            return Reading(getattr(value.value, member))
    except (TypeError, ValueError, IndexError, AttributeError) as exc:
        return Reading(None, f"unexpected value from nvmlDeviceGetFieldValues: {exc}",
                       code=ERROR_UNKNOWN)
    reason = _REASONS.get(code, f"NVML error {code}")
    return Reading(None, reason, fatal=code in FATAL_ERRORS, code=code)


def nvml_query_first(nvml: Any, functions: tuple[str, ...], *args: Any) -> tuple[Reading, str]:
    """Try ``functions`` in order while one is missing (old driver or binding).

    Returns:
        The reading and the name of the function that gave it (the last one tried).
    """
    reading, used = Reading(None, "no function to call"), ""
    for used in functions:
        reading = nvml_query(nvml, used, *args)
        if reading.code not in _MISSING_ERRORS:
            break
    return reading, used


def load_nvml(nvml: Any = None) -> Any:
    """The ``pynvml`` module, or ``nvml`` when given; raises NvmlUnavailable if not installed."""
    if nvml is not None:
        return nvml
    try:
        import pynvml
    except Exception as exc:  # noqa: BLE001 - ImportError or a broken install
        raise NvmlUnavailable(f"nvidia-ml-py is not importable ({exc})") from None
    return pynvml


def init_nvml(nvml: Any = None) -> Any:
    """Load and initialise NVML (reference-counted: pair with ``nvmlShutdown``).

    Raises:
        NvmlUnavailable: with the reason, when NVML cannot be used here.
    """
    nvml = load_nvml(nvml)
    reading = nvml_query(nvml, "nvmlInit")
    if reading.reason is not None:
        raise NvmlUnavailable(f"NVML cannot start: {reading.reason}")
    return nvml


def nvml_status(nvml: Any = None) -> tuple[bool, str]:
    """Whether NVML works on this machine, and why not. Never raises.

    Args:
        nvml: a ``pynvml``-shaped module to use instead of importing ``pynvml``.

    Returns:
        ``(True, "NVML ok: 2 GPUs, driver 550.54")`` or ``(False, reason)``.
    """
    try:
        nvml = init_nvml(nvml)
    except NvmlUnavailable as exc:
        return False, str(exc)
    except Exception as exc:  # noqa: BLE001 - the probe answers, whatever happens
        return False, f"NVML probe failed: {type(exc).__name__}: {exc}"
    try:
        count = nvml_query(nvml, "nvmlDeviceGetCount")
        if count.reason is not None:
            return False, f"NVML cannot count GPUs: {count.reason}"
        if not count.value:
            return False, "NVML sees no GPU"
        driver = nvml_query(nvml, "nvmlSystemGetDriverVersion").value
        return True, f"NVML ok: {count.value} GPU(s), driver {driver or 'unknown'}"
    finally:
        nvml_query(nvml, "nvmlShutdown")


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

    handle: Any
    uuid: str | None = None
    name: str | None = None
    mapping: str = ""
    is_mig: bool = False
    parent_handle: Any = None
    notes: list[str] = field(default_factory=list)

    def describe(self) -> dict[str, Any]:
        """JSON-safe identity of the device (no handles; the notes travel separately)."""
        return {"uuid": self.uuid, "name": self.name, "mapping": self.mapping,
                "is_mig": self.is_mig}


def _as_int(value: Any) -> int:
    """pynvml returns some values as ctypes objects (``nvmlDeviceIsMigDeviceHandle``)."""
    return int(getattr(value, "value", value))


def _handle_by_uuid(nvml: Any, uuid: str) -> Any | None:
    return nvml_query(nvml, "nvmlDeviceGetHandleByUUID", uuid).value


def _all_devices(nvml: Any) -> list[tuple[str, Any]]:
    """(uuid, handle) of every GPU and every MIG instance NVML knows, in NVML order."""
    found: list[tuple[str, Any]] = []
    for index in range(nvml_query(nvml, "nvmlDeviceGetCount").value or 0):
        gpu = nvml_query(nvml, "nvmlDeviceGetHandleByIndex", index).value
        uuid = nvml_query(nvml, "nvmlDeviceGetUUID", gpu).value if gpu is not None else None
        if uuid is None:
            continue
        found.append((uuid, gpu))
        for mig_index in range(nvml_query(nvml, "nvmlDeviceGetMaxMigDeviceCount", gpu).value or 0):
            mig = nvml_query(nvml, "nvmlDeviceGetMigDeviceHandleByIndex", gpu, mig_index).value
            mig_uuid = nvml_query(nvml, "nvmlDeviceGetUUID", mig).value if mig is not None else None
            if mig_uuid is not None:
                found.append((mig_uuid, mig))
    return found


def _handle_by_uuid_or_prefix(nvml: Any, text: str) -> Any:
    """The handle whose UUID is ``text`` or uniquely starts with it."""
    handle = _handle_by_uuid(nvml, text)
    if handle is not None:
        return handle
    matches = [h for uuid, h in _all_devices(nvml) if uuid.startswith(text)]
    if len(matches) == 1:
        return matches[0]
    what = f"is ambiguous ({len(matches)} devices)" if matches else "matches no device NVML knows"
    raise NvmlUnavailable(f"CUDA_VISIBLE_DEVICES entry {text!r} {what}")


def _legacy_mig_handle(nvml: Any, text: str) -> Any:
    """Resolve the pre-R470 form ``MIG-GPU-<uuid>/<gpu instance>/<compute instance>``."""
    handle = _handle_by_uuid(nvml, text)  # drivers of that era accept it directly
    if handle is not None:
        return handle
    match = _MIG_LEGACY.match(text)
    if match is None:
        raise NvmlUnavailable(f"CUDA_VISIBLE_DEVICES entry {text!r} is not a MIG UUID")
    parent = _handle_by_uuid_or_prefix(nvml, match.group(1))
    gpu_instance, compute_instance = int(match.group(2)), int(match.group(3))
    for index in range(nvml_query(nvml, "nvmlDeviceGetMaxMigDeviceCount", parent).value or 0):
        mig = nvml_query(nvml, "nvmlDeviceGetMigDeviceHandleByIndex", parent, index).value
        if mig is None:
            continue
        gi = nvml_query(nvml, "nvmlDeviceGetGpuInstanceId", mig).value
        ci = nvml_query(nvml, "nvmlDeviceGetComputeInstanceId", mig).value
        if (gi, ci) == (gpu_instance, compute_instance):
            return mig
    raise NvmlUnavailable(f"no MIG instance {gpu_instance}/{compute_instance} on {match.group(1)}")


def _handle_for_entry(nvml: Any, entry: int | str) -> Any:
    if isinstance(entry, int):
        reading = nvml_query(nvml, "nvmlDeviceGetHandleByIndex", entry)
        if reading.value is None:
            raise NvmlUnavailable(f"NVML has no GPU at index {entry}: {reading.reason}")
        return reading.value
    if entry.startswith("MIG-GPU-"):
        return _legacy_mig_handle(nvml, entry)
    return _handle_by_uuid_or_prefix(nvml, entry)


def _handle_from_torch_uuid(nvml: Any, torch_uuid: str) -> Any | None:
    """torch prints the CUDA UUID without NVML's "GPU-"/"MIG-" prefix: try both."""
    text = str(torch_uuid).strip()
    candidates = [text] if text.startswith(("GPU-", "MIG-")) else [f"GPU-{text}", f"MIG-{text}"]
    for candidate in candidates:
        handle = _handle_by_uuid(nvml, candidate)
        if handle is not None:
            return handle
    return None


def _index_order_note(nvml: Any) -> str | None:
    if os.environ.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID":
        return None
    if (nvml_query(nvml, "nvmlDeviceGetCount").value or 0) <= 1:
        return None
    return ("mapped by index: CUDA numbers GPUs fastest first unless CUDA_DEVICE_ORDER="
            "PCI_BUS_ID, NVML in PCI order, so on mixed GPUs this may be another GPU")


def nvml_handle_for_cuda_index(
    cuda_index: int, *, torch_uuid: str | None = None, nvml: Any = None,
) -> NvmlDevice:
    """The NVML device behind ``cuda:<cuda_index>`` of this process.

    NVML must be initialised (see :func:`init_nvml`).

    Args:
        cuda_index: the CUDA ordinal as torch sees it (after CUDA_VISIBLE_DEVICES).
        torch_uuid: ``str(torch.cuda.get_device_properties(cuda_index).uuid)``; the surest
            link, used first when given.
        nvml: a ``pynvml``-shaped module to use instead of importing ``pynvml``.

    Raises:
        NvmlUnavailable: the device cannot be found in NVML (reason in the message).
    """
    nvml = load_nvml(nvml)
    notes: list[str] = []
    handle = None
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


def _describe(nvml: Any, handle: Any, mapping: str, notes: list[str]) -> NvmlDevice:
    uuid = nvml_query(nvml, "nvmlDeviceGetUUID", handle).value
    is_mig_reading = nvml_query(nvml, "nvmlDeviceIsMigDeviceHandle", handle)
    if is_mig_reading.value is not None:
        is_mig = bool(_as_int(is_mig_reading.value))
    else:  # a driver without MIG support has no MIG devices, unless the UUID says so
        is_mig = bool(uuid and str(uuid).startswith("MIG-"))
    device = NvmlDevice(handle=handle, uuid=uuid, mapping=mapping, is_mig=is_mig, notes=notes,
                        name=nvml_query(nvml, "nvmlDeviceGetName", handle).value)
    if is_mig:
        parent = nvml_query(nvml, "nvmlDeviceGetDeviceHandleFromMigDeviceHandle", handle)
        device.parent_handle = parent.value
        if parent.value is None:
            notes.append(f"MIG instance whose parent GPU is unknown ({parent.reason})")
        else:
            parent_uuid = nvml_query(nvml, "nvmlDeviceGetUUID", parent.value).value
            notes.append(f"MIG instance: power, energy, clocks, temperature and throttle "
                         f"reasons are those of the whole GPU {parent_uuid}, shared by all "
                         "its instances")
    return device

"""NVML through typed methods: the one wrapper of ``pynvml`` (nvidia-ml-py).

Everything batchscope asks NVML goes through a method of :class:`Nvml`, named for what it
answers with its unit (``power_average_w``, ``energy_counter_mj``, ``clock_sm_mhz``), never
through a function name in a string: a misspelt method fails type checking, and the
sampler's table of methods fails at import. Each method returns a :class:`Reading`: the value
in that unit, or None with the reason in one sentence ("not supported on this GPU", "no
permission", ...). :meth:`Nvml._read` is the one place where NVML errors become reasons,
the way zeus translates them in ``_handle_nvml_errors``; no method raises.

A function an older driver or binding lacks (``ERROR_FUNCTION_NOT_FOUND``, or not in this
nvidia-ml-py version) is a reading like any other; where NVML has an older function for the
same figure (the temperature, the throttle reasons), the method tries it next and asks only
that one from then on.

The C enum values the methods pass (clock kinds, the temperature sensor, field ids) and the
error codes are part of NVML's ABI (``nvml.h``): written here, and checked against the
installed nvidia-ml-py by tests/hardware/test_nvml.py, so a stand-in module need not define
them.

Example:
    >>> reading = Nvml(object()).device_count()  # a "binding" without NVML's functions
    >>> reading.value, reading.reason
    (None, 'nvmlDeviceGetCount is not in this nvidia-ml-py version')
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")

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

# The enum values the methods pass (nvml.h).
CLOCK_SM = 1  # NVML_CLOCK_SM
CLOCK_MEM = 2  # NVML_CLOCK_MEM
TEMPERATURE_GPU = 0  # NVML_TEMPERATURE_GPU
FI_DEV_POWER_INSTANT = 186  # NVML_FI_DEV_POWER_INSTANT: current power draw, milliwatts
# nvmlValueType_t -> the member of the nvmlValue_t union that holds the number.
_VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal",
                  6: "usVal"}
MW_PER_W = 1000.0  # NVML answers power in milliwatts

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

# An NVML device handle: opaque, passed back to NVML as it came.
Handle = object


class NvmlUnavailable(Exception):
    """NVML cannot serve this device; ``str(exc)`` is the reason in one sentence."""


@dataclass(frozen=True)
class Reading(Generic[T]):
    """What one NVML call gave: a value, or None with the reason, whether it is fatal (the
    GPU answers nothing more) and NVML's error code where it named one."""

    value: T | None
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


def code_reason(code: int) -> Reading[Any]:
    """The reading of an NVML return code other than success."""
    return Reading(None, _REASONS.get(code, f"NVML error {code}"), fatal=code in FATAL_ERRORS,
                   code=code)


def _as_int(value: Any) -> int:
    """pynvml returns some values as ctypes objects (``nvmlDeviceIsMigDeviceHandle``)."""
    return int(getattr(value, "value", value))


def _text(value: Any) -> str:
    """A string NVML answered (bytes in older nvidia-ml-py versions)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _watts(milliwatts: Any) -> float:
    return float(milliwatts) / MW_PER_W


def _same(value: Any) -> Any:
    return value


class _Fallback:
    """Which of a method's functions it tries first: the newest, until one turns out missing."""

    def __init__(self) -> None:
        self.start = 0


# A method's lookup of its function in the binding (``lambda lib: lib.nvmlInit``): kept apart
# from the call, so that a function the binding lacks is told from one that fails.
Find = Callable[[Any], Callable[..., Any]]


class Nvml:
    """The NVML functions batchscope uses, as typed methods over ``pynvml`` (or a stand-in of
    its shape: the tests' fakes).

    Args:
        lib: the ``pynvml`` module (see :func:`load_nvml`).
    """

    def __init__(self, lib: Any) -> None:
        self._lib = lib
        self._temperature = _Fallback()
        self._throttle = _Fallback()

    # -- the one place NVML errors become reasons ----------------------------------------
    def _read(self, find: Find, args: tuple[Any, ...], convert: Callable[[Any], T]
              ) -> Reading[T]:
        """Call the function ``find`` names with ``args`` and ``convert`` its answer; every
        failure a reading. Never raises."""
        try:
            function = find(self._lib)
        except AttributeError as exc:  # this nvidia-ml-py has no such function
            return Reading(None, f"{exc.name or exc} is {REASON_MISSING_IN_BINDING}",
                           code=ERROR_FUNCTION_NOT_FOUND)
        try:
            answer = function(*args)
        except Exception as exc:  # noqa: BLE001 - every NVML failure becomes a reason
            reason, code = error_reason(exc)
            return Reading(None, reason, fatal=code in FATAL_ERRORS, code=code)
        try:
            return Reading(convert(answer))
        except (TypeError, ValueError, AttributeError, IndexError) as exc:
            name = getattr(function, "__name__", "NVML")
            return Reading(None, f"unexpected value from {name}: {exc}")

    def _read_first(self, fallback: _Fallback, finds: tuple[Find, ...], args: tuple[Any, ...],
                    convert: Callable[[Any], T]) -> Reading[T]:
        """The first of ``finds`` (from the one that last answered) that is not missing; it
        is where the next call starts."""
        reading: Reading[T] = Reading(None, "no function to call")
        for index in range(fallback.start, len(finds)):
            fallback.start = index
            reading = self._read(finds[index], args, convert)
            if reading.code != ERROR_FUNCTION_NOT_FOUND:
                break
        return reading

    # -- the library ---------------------------------------------------------------------
    def init(self) -> Reading[None]:
        """``nvmlInit``: reference-counted, pair it with :meth:`shutdown`."""
        return self._read(lambda lib: lib.nvmlInit, (), lambda _: None)

    def shutdown(self) -> Reading[None]:
        return self._read(lambda lib: lib.nvmlShutdown, (), lambda _: None)

    def driver_version(self) -> Reading[str]:
        return self._read(lambda lib: lib.nvmlSystemGetDriverVersion, (), _text)

    def device_count(self) -> Reading[int]:
        return self._read(lambda lib: lib.nvmlDeviceGetCount, (), int)

    # -- devices -------------------------------------------------------------------------
    def handle_by_index(self, index: int) -> Reading[Handle]:
        return self._read(lambda lib: lib.nvmlDeviceGetHandleByIndex, (index,), _same)

    def handle_by_uuid(self, uuid: str) -> Reading[Handle]:
        return self._read(lambda lib: lib.nvmlDeviceGetHandleByUUID, (uuid,), _same)

    def uuid(self, handle: Handle) -> Reading[str]:
        return self._read(lambda lib: lib.nvmlDeviceGetUUID, (handle,), _text)

    def name(self, handle: Handle) -> Reading[str]:
        return self._read(lambda lib: lib.nvmlDeviceGetName, (handle,), _text)

    def is_mig(self, handle: Handle) -> Reading[bool]:
        """Whether ``handle`` is a MIG instance's."""
        return self._read(lambda lib: lib.nvmlDeviceIsMigDeviceHandle, (handle,),
                          lambda v: bool(_as_int(v)))

    def mig_parent(self, handle: Handle) -> Reading[Handle]:
        """The whole GPU's handle of a MIG instance."""
        return self._read(lambda lib: lib.nvmlDeviceGetDeviceHandleFromMigDeviceHandle,
                          (handle,), _same)

    def mig_count_max(self, handle: Handle) -> Reading[int]:
        return self._read(lambda lib: lib.nvmlDeviceGetMaxMigDeviceCount, (handle,), int)

    def mig_by_index(self, handle: Handle, index: int) -> Reading[Handle]:
        return self._read(lambda lib: lib.nvmlDeviceGetMigDeviceHandleByIndex,
                          (handle, index), _same)

    def gpu_instance_id(self, handle: Handle) -> Reading[int]:
        return self._read(lambda lib: lib.nvmlDeviceGetGpuInstanceId, (handle,), int)

    def compute_instance_id(self, handle: Handle) -> Reading[int]:
        return self._read(lambda lib: lib.nvmlDeviceGetComputeInstanceId, (handle,), int)

    # -- readings ------------------------------------------------------------------------
    def field_value(self, handle: Handle, field_id: int) -> Reading[float]:
        """One NVML field value, read with ``nvmlDeviceGetFieldValues(handle, [field_id])``.

        The call succeeds even where the driver does not know the field: its own answer is
        in the value's ``nvmlReturn``, read here like any NVML error (``NOT_SUPPORTED`` on a
        driver or GPU without the field). The number is the union member ``valueType``
        names.
        """
        reading = self._read(lambda lib: lib.nvmlDeviceGetFieldValues, (handle, [field_id]),
                             _same)
        if reading.reason is not None:
            return Reading(None, reading.reason, reading.fatal, reading.code)
        values: Any = reading.value
        try:
            value = values[0]
            code = int(value.nvmlReturn)
            if code == 0:
                member = _VALUE_MEMBERS.get(int(value.valueType), "uiVal")
                return Reading(getattr(value.value, member))
        except (TypeError, ValueError, IndexError, AttributeError) as exc:
            return Reading(None, f"unexpected value from nvmlDeviceGetFieldValues: {exc}",
                           code=ERROR_UNKNOWN)
        failed: Reading[float] = code_reason(code)
        return failed

    def power_instant_w(self, handle: Handle) -> Reading[float]:
        """The instantaneous draw (the field ``NVML_FI_DEV_POWER_INSTANT``), watts."""
        reading = self.field_value(handle, FI_DEV_POWER_INSTANT)
        if reading.value is None:
            return reading
        try:
            return Reading(_watts(reading.value))
        except (TypeError, ValueError) as exc:  # as a value field_value could not read
            return Reading(None, f"unexpected value: {exc}", code=ERROR_UNKNOWN)

    def power_average_w(self, handle: Handle) -> Reading[float]:
        """``nvmlDeviceGetPowerUsage``, watts: a one-second moving average on GPUs after
        GA100 (Ampere and later)."""
        return self._read(lambda lib: lib.nvmlDeviceGetPowerUsage, (handle,), _watts)

    def energy_counter_mj(self, handle: Handle) -> Reading[int]:
        """The energy counter since the driver loaded, millijoules."""
        return self._read(lambda lib: lib.nvmlDeviceGetTotalEnergyConsumption, (handle,), int)

    def clock_sm_mhz(self, handle: Handle) -> Reading[int]:
        return self._read(lambda lib: lib.nvmlDeviceGetClockInfo, (handle, CLOCK_SM), int)

    def clock_mem_mhz(self, handle: Handle) -> Reading[int]:
        return self._read(lambda lib: lib.nvmlDeviceGetClockInfo, (handle, CLOCK_MEM), int)

    def temperature_c(self, handle: Handle) -> Reading[int]:
        """The GPU's temperature, degrees Celsius (the versioned function where the binding
        has it)."""
        return self._read_first(self._temperature,
                                 (lambda lib: lib.nvmlDeviceGetTemperatureV,
                                  lambda lib: lib.nvmlDeviceGetTemperature),
                                 (handle, TEMPERATURE_GPU), int)

    def throttle_mask(self, handle: Handle) -> Reading[int]:
        """The clock event (throttle) reasons, a bit mask (the older function's name on
        drivers before R535)."""
        return self._read_first(self._throttle,
                                (lambda lib: lib.nvmlDeviceGetCurrentClocksEventReasons,
                                 lambda lib: lib.nvmlDeviceGetCurrentClocksThrottleReasons),
                                (handle,), int)

    def utilization_pct(self, handle: Handle) -> Reading[tuple[int, int]]:
        """(GPU, memory) utilisation over NVML's last sample period, percent."""
        return self._read(lambda lib: lib.nvmlDeviceGetUtilizationRates, (handle,),
                          lambda u: (int(u.gpu), int(u.memory)))

    def memory_used_bytes(self, handle: Handle) -> Reading[int]:
        return self._read(lambda lib: lib.nvmlDeviceGetMemoryInfo, (handle,),
                          lambda m: int(m.used))


def load_nvml(lib: Any = None) -> Nvml:
    """NVML over the ``pynvml`` module, or over ``lib`` when given (a stand-in of its shape).

    Raises:
        NvmlUnavailable: nvidia-ml-py is not installed (or does not import).
    """
    if lib is not None:
        return Nvml(lib)
    try:
        import pynvml
    except Exception as exc:  # noqa: BLE001 - ImportError or a broken install
        raise NvmlUnavailable(f"nvidia-ml-py is not importable ({exc})") from None
    return Nvml(pynvml)


def init_nvml(lib: Any = None) -> Nvml:
    """Load and initialise NVML (reference-counted: pair with :meth:`Nvml.shutdown`).

    Raises:
        NvmlUnavailable: with the reason, when NVML cannot be used here.
    """
    nvml = load_nvml(lib)
    reading = nvml.init()
    if reading.reason is not None:
        raise NvmlUnavailable(f"NVML cannot start: {reading.reason}")
    return nvml

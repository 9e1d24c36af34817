"""NVML on a GPU: power, energy, clocks, utilisation and throttling around a measurement.

The public face of three modules, one concept each:

- :mod:`~batchscope.hardware.nvml_device`: the never-raising probe, the one place NVML
  errors are translated, and the CUDA index -> NVML handle mapping (UUIDs, MIG,
  ``CUDA_VISIBLE_DEVICES``);
- :mod:`~batchscope.hardware.nvml_window`: samples, the recording file, the summary
  :class:`NvmlWindow` and :func:`energy_per_unit_j`;
- :mod:`~batchscope.hardware.nvml_sampler`: the live, null and replay samplers and the
  :func:`make_sampler` factory.

Example (the same code on a CPU, where the window is empty and says why):
    >>> from batchscope.hardware.nvml import make_sampler, energy_per_unit_j
    >>> sampler = make_sampler("cpu")
    >>> sampler.start()
    >>> # ... run the steps ...
    >>> window = sampler.stop()
    >>> window.energy_j is None, window.unsupported["all"]
    (True, 'no GPU: the device is cpu')
    >>> energy_per_unit_j(window, units_per_step=8, steps=100) is None
    True
"""

from __future__ import annotations

from batchscope.hardware.nvml_device import (
    NvmlDevice,
    NvmlUnavailable,
    nvml_handle_for_cuda_index,
    nvml_query,
    nvml_status,
    parse_visible_devices,
)
from batchscope.hardware.nvml_sampler import (
    DEFAULT_INTERVAL_S,
    NullSampler,
    NvmlSampler,
    ReplaySampler,
    Sampler,
    make_sampler,
)
from batchscope.hardware.nvml_window import (
    BENIGN_THROTTLE,
    THROTTLE_BITS,
    NvmlRecording,
    NvmlSample,
    NvmlWindow,
    decode_throttle,
    energy_per_unit_j,
    read_recording,
    summarize,
    trapezoid_j,
    write_recording,
)

__all__ = [
    "BENIGN_THROTTLE",
    "DEFAULT_INTERVAL_S",
    "THROTTLE_BITS",
    "NullSampler",
    "NvmlDevice",
    "NvmlRecording",
    "NvmlSample",
    "NvmlSampler",
    "NvmlUnavailable",
    "NvmlWindow",
    "ReplaySampler",
    "Sampler",
    "decode_throttle",
    "energy_per_unit_j",
    "make_sampler",
    "nvml_handle_for_cuda_index",
    "nvml_query",
    "nvml_status",
    "parse_visible_devices",
    "read_recording",
    "summarize",
    "trapezoid_j",
    "write_recording",
]

"""glibc's malloc told, inside a running worker, to keep the buffers it frees.

The allocator check (:mod:`batchscope.classifiers.allocator`) times the batch sizes again
with the allocator keeping its buffers mapped. glibc reads ``MALLOC_MMAP_THRESHOLD_`` and
``MALLOC_TRIM_THRESHOLD_`` (``KEPT_BUFFERS_ENV``) only when a process starts, which took a
second worker: its torch import, the model built again (~2.5 s of the CNN sample's 7.6 s
check of four sizes on a 2-core EPYC VM). ``mallopt`` sets the same two thresholds in the running
process, so the sweep's own worker times the sizes again once its measurements are done:
blocks freed from then on stay in the heap and the next step reuses them.

``mallopt`` takes an ``int``: the thresholds go to 2 GiB - 1, so a single buffer over
2 GiB is still mapped afresh (one the environment's 1 TiB would keep). A ``mallopt`` that
refuses, or a libc without one (musl, macOS), leaves the check to a fresh worker started
with the environment. glibc before 2.35 refuses an mmap threshold over 32 MiB from either
(only 2.36 was tried); the re-timed steps' page faults then say the setting did not hold.
"""

from __future__ import annotations

import ctypes

# mallopt's parameters (glibc's malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# The largest value mallopt's int takes: buffers up to 2 GiB stay mapped.
KEPT_THRESHOLD_BYTES = 2**31 - 1


def keep_freed_buffers() -> bool:
    """Raise glibc's mmap and trim thresholds in this process; True when glibc took both
    (what it then does is measured: the re-timed steps' page faults)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, KEPT_THRESHOLD_BYTES)) and bool(
        mallopt(M_TRIM_THRESHOLD, KEPT_THRESHOLD_BYTES))

"""How much of the machine other processes took while something was measured.

These machines are shared: a ceiling or a benchmark measured while something else ran is
low, and must be flagged rather than trusted (or cached).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

# Ceilings measured while other processes took at least this share of the machine's CPU are
# not cached, and the report flags them: on 2 cores one busy neighbour halves the roofs.
BUSY_SHARE = 0.25
# /proc/stat counts in ticks of 10 ms: over less than this a single tick of a neighbour
# reads as a large share, so shorter blocks get no share (NaN) rather than a wrong one.
MIN_JUDGED_S = 1.0


class OtherLoad:
    """Share of the machine's CPU that other processes used while the block ran.

    Busy CPU time from /proc/stat less this process's and its waited-for children's
    (``os.times``), over wall time × cores. These machines are shared: a result measured
    while something else ran is flagged, not trusted.

    Example:
        >>> with OtherLoad() as load:  # doctest: +SKIP
        ...     run_benchmark()
        >>> load.share  # doctest: +SKIP
        0.02
    """

    share: float = float("nan")

    @staticmethod
    def _busy_s() -> float:
        try:
            fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
        except OSError:
            return float("nan")
        ticks = [int(x) for x in fields]
        idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
        return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")

    @staticmethod
    def _ours_s() -> float:
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    def __enter__(self) -> OtherLoad:
        self._wall, self._busy, self._ours = time.perf_counter(), self._busy_s(), self._ours_s()
        return self

    def __exit__(self, *exc: object) -> None:
        wall = time.perf_counter() - self._wall
        if wall < MIN_JUDGED_S:
            return
        other = (self._busy_s() - self._busy) - (self._ours_s() - self._ours)
        self.share = max(0.0, other) / (wall * (os.cpu_count() or 1))

    def note(self) -> str:
        return f"{self.share:.0%}"

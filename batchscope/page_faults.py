"""What a minor page fault costs a CPU step: memory the allocator hands back to the OS and
faults in again every step (classifiers/allocator.py). A base module: the plan's plateau
rule reads it during the sweep, before any classifier runs.

Example:
    >>> round(fault_share(10_000, 0.1), 6)
    0.1
"""

from __future__ import annotations

# Cost of one minor page fault (trap, zeroing a 4 KiB page, mapping it): measured ~1.0 µs on
# this project's 2-core Xeon VM as the step-time difference with and without glibc returning
# the CNN sample's activations to the OS (batch 16: 59,526 faults, 372 vs 314 ms; batch 4:
# 7,024 faults, 89.7 vs 81.9 ms). An estimate for other machines, labelled as such; the
# side-by-side re-timing measures the machine's own (``allocator.cost_per_fault_s``).
PAGE_FAULT_COST_S = 1.0e-6
PAGE_BYTES = 4096


def fault_share(faults_per_step: float | None, step_s: float | None,
                cost_per_fault_s: float = PAGE_FAULT_COST_S) -> float | None:
    """The share of a step of ``step_s`` that its page faults take at ``cost_per_fault_s``
    a fault (the estimate :data:`PAGE_FAULT_COST_S` by default; the reports pass the cost
    the side-by-side check measured where it ran); None without faults or a step.

    Example:
        >>> round(fault_share(10_000, 0.1, cost_per_fault_s=2e-6), 6)
        0.2
        >>> fault_share(0, 0.1) is None, fault_share(10_000, None) is None
        (True, True)
    """
    if faults_per_step and step_s is not None and step_s > 0:
        return faults_per_step * cost_per_fault_s / step_s
    return None

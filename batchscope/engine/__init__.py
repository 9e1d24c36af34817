"""The measurement engine's device-free half: clocks, stop policies and the one timer.

- :mod:`~batchscope.engine.clock`: what reads the time (the host's clock with the device
  drained before it stops, or CUDA events on a device's stream).
- :mod:`~batchscope.engine.policies`: when a run of timed samples stops (adaptive, a fixed
  time, a fixed count, a repeat budget, the two fastest settled) and what stopped it
  (:class:`StoppedBy`).
- :mod:`~batchscope.engine.timer`: the one loop that takes samples under a policy, its
  warm-up and block sizing, and its push mode (:class:`~batchscope.engine.timer.PushTimer`:
  a loop that is not ours feeds it).

The device half (:mod:`batchscope.profiler.device`: sync, peak memory, page faults, the NVML
sampler, chosen once per device) and the one producer of a result's timed part
(:func:`batchscope.profiler.measurement.record_timing`) sit in the profiler layer. This half
sits below ``hardware`` (``hardware/microbench.py`` times its ceilings with it) and imports
no torch at module level: the sweep's parent process reads :class:`StoppedBy` through the
records.
"""

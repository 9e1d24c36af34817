"""Typed records that flow one way: profiler -> classifiers -> assembler -> reports.

- :mod:`~batchscope.records.measurement`: what is measured at one batch size.
- :mod:`~batchscope.records.flags`: flags and stop reasons as kinds and values.
- :mod:`~batchscope.records.run`: the options of a sweep.
- :mod:`~batchscope.records.report` and :mod:`~batchscope.records.serving`: the report,
  every section a dataclass.
- :mod:`~batchscope.records.codec`: to JSON-safe values, and back through one typed decoder.

Nothing here imports torch, the profiler, the classifiers or the reports.
"""

from __future__ import annotations

from batchscope.records.flags import Flag, FlagKind, Stop, StopKind
from batchscope.records.interval import ControlTiming, DriftControl, Interval
from batchscope.records.measurement import (
    FUSED_KERNEL_PREFIX,
    FUSED_KERNELS,
    ArgValue,
    BatchResult,
    Bound,
    ByteKind,
    ByteSplit,
    CountedOp,
    GridPoint,
    KernelStat,
    LatencyStats,
    OpStat,
    PeakMemoryMethod,
    RankResult,
    Status,
    StoppedBy,
    TimeBasis,
    TimedOp,
    TimeShare,
)
from batchscope.records.report import (
    SCHEMA,
    Accumulation,
    AllocatorCheck,
    Assumption,
    AssumptionKind,
    CurvePoint,
    DataParallel,
    Estimate,
    ModelInfo,
    PredictedPick,
    PredictionTerms,
    Recommendation,
    Report,
    Rule,
    RuleKind,
    RunInfo,
    Source,
    StepPrediction,
    ThroughputCurve,
)
from batchscope.records.run import Options

__all__ = [
    "FUSED_KERNELS",
    "FUSED_KERNEL_PREFIX",
    "SCHEMA",
    "Accumulation",
    "AllocatorCheck",
    "ArgValue",
    "Assumption",
    "AssumptionKind",
    "BatchResult",
    "Bound",
    "ByteKind",
    "ByteSplit",
    "ControlTiming",
    "CountedOp",
    "CurvePoint",
    "DataParallel",
    "DriftControl",
    "Estimate",
    "Flag",
    "FlagKind",
    "GridPoint",
    "Interval",
    "KernelStat",
    "LatencyStats",
    "ModelInfo",
    "OpStat",
    "Options",
    "PeakMemoryMethod",
    "PredictedPick",
    "PredictionTerms",
    "RankResult",
    "Recommendation",
    "Report",
    "Rule",
    "RuleKind",
    "RunInfo",
    "Source",
    "Status",
    "StepPrediction",
    "Stop",
    "StopKind",
    "StoppedBy",
    "ThroughputCurve",
    "TimeBasis",
    "TimeShare",
    "TimedOp",
]

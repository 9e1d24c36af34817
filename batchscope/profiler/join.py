"""Join counted ops (counting pass) to timed ops (capture pass) and group them per op.

Both passes see the same aten ops in the same order, so a counted op is matched to the next
profiled op with the same name and the same tensor shapes (CPU-TRIALS: this matched every op
of a decoder and 99.9% of a CNN's FLOPs). The profiler also records composite wrappers
(``aten::linear`` around ``aten::addmm``); a wrapper's own time is its dispatch cost, so it
is shared among the counted ops it contains, in proportion to their time. Time between
top-level ops (Python, module calls) is framework time.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from batchscope.profiler.capture import FUSED_KERNEL_RE, StepCapture
from batchscope.records import (
    FUSED_KERNEL_PREFIX,
    FUSED_KERNELS,
    BatchResult,
    ByteSplit,
    CountedOp,
    Flag,
    OpStat,
    TimedOp,
)
from batchscope.records.flag_payloads import FusedByInductor, NonDeterministic, UnmatchedCalls

# How far past the cursor we look for a counted op's profiled twin before giving up on it:
# only ops the profiler sees but the dispatch mode does not (children of a matched op are
# skipped by time, not by this window) lie in between.
LOOKAHEAD_OPS = 64
# A name-only match (one side recorded no shapes) is accepted only this close to the cursor,
# and so is any match of an op that does no work (a view, an alias: 0 FLOPs, 0 bytes). Such
# ops are many and alike: under the counting mode ``reshape`` runs as ``view`` where eager
# runs ``_reshape_alias``, so a ``view`` of the same shape further on (after the attention of
# a batch-1 BERT step) would otherwise be taken as the twin and the join would skip the ops
# in between (issue 13: 37-51% coverage of HF training steps at batch 1).
FALLBACK_OPS = 8
# Clock resolution of profiler timestamps (1 ns), for comparing start and end times.
EPS_S = 1e-9


@dataclass
class StepJoin:
    """Per counted op, the time attributed to it in one step, plus the leftovers."""

    attributed_s: list[float]
    matched: list[bool]
    unmatched_s: dict[str, float] = field(default_factory=dict)  # op name -> seconds
    op_time_s: float = 0.0  # time inside top-level aten ops
    step_s: float = 0.0


def _shape_key(shapes: Sequence[Sequence[int]]) -> tuple[tuple[int, ...], ...]:
    """Tensor shapes without the empty entries (scalars, None, non-tensor arguments)."""
    out = []
    for s in shapes:
        if isinstance(s, (list, tuple)) and s and all(isinstance(d, int) for d in s):
            out.append(tuple(s))
        elif isinstance(s, (list, tuple)) and s and all(isinstance(d, (list, tuple)) for d in s):
            out.extend(tuple(x) for x in s if x)  # a tensor list argument
    return tuple(out)


def call_args_key(call_args: list[Any] | None) -> str | None:
    """A hashable form of :attr:`CountedOp.call_args`: two convolutions of the same shapes
    with another stride are other ops."""
    return None if call_args is None else json.dumps(call_args, separators=(",", ":"))


def does_no_work(op: CountedOp) -> bool:
    """A view or alias: no FLOPs and no bytes moved."""
    return op.flops == 0 and op.bytes.total == 0


def _out_variant(timed_key: tuple[tuple[int, ...], ...],
                 want: tuple[tuple[int, ...], ...]) -> bool:
    """The profiled op is the counted op's ``out=`` variant: its shapes and one more, the
    output's. A torch.compile'd graph calls its extern kernels so (``addmm(b, x, w,
    out=buf)``) while the eager ops the counting pass sees take no output."""
    return len(timed_key) == len(want) + 1 and timed_key[:-1] == want and bool(want)


def _twin_names(counted: str, timed: str) -> bool:
    """The same op under both names: autograd accumulates a gradient in place (``add_``)
    where no dispatch mode is active and out of place (``add``) under the counting mode, the
    same work on the same shapes."""
    return timed == counted or timed == counted + "_"


def join_step(counted: Sequence[CountedOp], step: StepCapture) -> StepJoin:
    """Match ``counted`` (one step, execution order) to the profiled ops of ``step``."""
    timed = step.ops
    keys = [_shape_key(t.input_shapes) for t in timed]
    attributed = [0.0] * len(counted)
    matched = [False] * len(counted)
    match_index: list[int] = [-1] * len(counted)
    cursor = 0
    last_end = -1.0
    for i, op in enumerate(counted):
        want = _shape_key(op.input_shapes)
        fallback = -1
        j = cursor
        window = FALLBACK_OPS if does_no_work(op) else LOOKAHEAD_OPS
        while j < len(timed) and j < cursor + window:
            t = timed[j]
            if t.start_s + EPS_S >= last_end and _twin_names(op.name, t.name):
                if keys[j] == want:
                    break
                if fallback < 0 and _out_variant(keys[j], want):
                    fallback = j
                # Shapes can only be missing, not different: a same-named op with other
                # shapes is a later call (autograd's own detach calls are not profiled).
                if fallback < 0 and (not keys[j] or not want) and j < cursor + FALLBACK_OPS:
                    fallback = j
            j += 1
        else:
            j = fallback
        if j < 0 or j >= len(timed):
            continue
        t = timed[j]
        matched[i] = True
        match_index[i] = j
        attributed[i] = t.duration_s
        cursor = j + 1
        last_end = t.end_s
        # Past the op's children: a fused op of many (a transformer layer's fast path runs
        # ~70) would otherwise fill the window the next op is looked for in.
        while cursor < len(timed) and timed[cursor].start_s + EPS_S < last_end:
            cursor += 1

    result = StepJoin(attributed_s=attributed, matched=matched, step_s=step.step_s)
    _share_wrapper_time(timed, match_index, result)
    if step.fused_s > 0:  # inductor's fused kernels: op time no counted op can claim
        for kernel, seconds in step.fused_kernels_s.items():
            result.unmatched_s[FUSED_KERNEL_PREFIX + kernel] = seconds
        rest = step.fused_s - sum(step.fused_kernels_s.values())
        if rest > 0:  # the graph's own time between its kernels, or kernels not named
            result.unmatched_s[FUSED_KERNELS] = rest
        result.op_time_s += step.fused_s
    return result


def fused_ops(kernel: str, names: Iterable[str]) -> list[str]:
    """The aten ops inductor's kernel name says it fused, read against ``names`` (the
    counted ops' names: "native_layer_norm" holds underscores too); [] where the name does
    not split into them.

    Example:
        >>> fused_ops("cpp_fused_gelu_native_layer_norm_0", ["gelu", "native_layer_norm", "addmm"])
        ['gelu', 'native_layer_norm']
    """
    match = FUSED_KERNEL_RE.match(kernel)
    if match is None:
        return []
    text, known = match.group(2), set(names)
    # Split text into known names, each "_"-joined: the longest known name first.
    best: dict[int, list[str]] = {0: []}
    for start in range(len(text) + 1):
        if start not in best:
            continue
        for end in range(len(text), start, -1):
            word = text[start:end]
            if word in known and (end == len(text) or text[end] == "_"):
                nxt = end + 1 if end < len(text) else end
                best.setdefault(nxt, best[start] + [word])
    return best.get(len(text), [])


def _share_wrapper_time(timed: list[TimedOp], match_index: list[int], result: StepJoin) -> None:
    """Give each top-level op's unclaimed time to the matched ops inside it."""
    owner = {j: i for i, j in enumerate(match_index) if j >= 0}
    tops = [j for j, t in enumerate(timed) if t.depth == 0]
    result.op_time_s = sum(timed[j].duration_s for j in tops)
    inside: dict[int, list[int]] = defaultdict(list)
    top_pos = 0
    for j in sorted(owner):
        # find the top-level op containing timed[j]
        while top_pos + 1 < len(tops) and timed[tops[top_pos + 1]].start_s <= timed[j].start_s:
            top_pos += 1
        if tops and timed[tops[top_pos]].start_s <= timed[j].start_s + EPS_S:
            inside[tops[top_pos]].append(owner[j])
    for j in tops:
        members = inside.get(j, [])
        if not members:
            name = timed[j].name
            result.unmatched_s[name] = result.unmatched_s.get(name, 0.0) + timed[j].duration_s
            continue
        claimed = sum(result.attributed_s[i] for i in members)
        residual = timed[j].duration_s - claimed
        if residual <= 0:
            continue
        for i in members:
            share = result.attributed_s[i] / claimed if claimed > 0 else 1.0 / len(members)
            result.attributed_s[i] += residual * share


def join_steps(counted: Sequence[CountedOp], steps: Sequence[StepCapture]) -> StepJoin:
    """Join every captured step and average the attributed times over the steps."""
    if not steps:
        return StepJoin(attributed_s=[0.0] * len(counted), matched=[False] * len(counted))
    joins = [join_step(counted, s) for s in steps]
    n = len(joins)
    unmatched: dict[str, float] = defaultdict(float)
    for j in joins:
        for name, t in j.unmatched_s.items():
            unmatched[name] += t / n
    return StepJoin(
        attributed_s=[sum(j.attributed_s[i] for j in joins) / n for i in range(len(counted))],
        matched=[all(j.matched[i] for j in joins) for i in range(len(counted))],
        unmatched_s=dict(unmatched),
        op_time_s=sum(j.op_time_s for j in joins) / n,
        step_s=sum(j.step_s for j in joins) / n,
    )


def sequences_differ(steps: Sequence[StepCapture]) -> bool:
    """True when the profiled op sequence is not the same in every step."""
    names = [tuple(t.name for t in s.ops if t.depth == 0) for s in steps]
    return any(n != names[0] for n in names[1:])


TOP_LEVEL = "(top level)"
_INDEX = re.compile(r"(?<=\.)\d+(?=\.|$)|^\d+(?=\.|$)")


def module_pattern(paths: Sequence[str]) -> str:
    """One label for the module paths of a group: layer indices that differ become ``*``."""
    distinct = list(dict.fromkeys(p or TOP_LEVEL for p in paths))
    if len(distinct) <= 1:
        return distinct[0] if distinct else ""
    patterns = list(dict.fromkeys(_INDEX.sub("*", p) for p in distinct))
    if len(patterns) == 1:
        return patterns[0]
    return ", ".join(patterns[:2]) + (f" (+{len(patterns) - 2} more)" if len(patterns) > 2 else "")


def op_ids(counted: Sequence[CountedOp]) -> list[str]:
    """The identity of each call, the same at every batch size: the module path it ran
    under, its op name, and how many calls of that name ran under that path before it in
    the step (``"blocks.0.attn:addmm#1"``). An op that runs only at some batch sizes
    shifts no other op's identity, unless it has the same name under the same module."""
    seen: Counter[tuple[str, str]] = Counter()
    ids = []
    for op in counted:
        key = (op.module, op.name)
        ids.append(f"{op.module or TOP_LEVEL}:{op.name}#{seen[key]}")
        seen[key] += 1
    return ids


def group_ops(counted: Sequence[CountedOp], join: StepJoin,
              batch_size: int | None = None) -> list[OpStat]:
    """Group calls with the same name, shapes, dtype and non-tensor arguments (a
    convolution's stride, ...) into one :class:`OpStat` each, identified by the
    :func:`op_ids` identity of its first call; ``batch_size`` goes on their flags."""
    ids = op_ids(counted)
    groups: dict[tuple[str, tuple[tuple[int, ...], ...], str, str | None], list[int]] = {}
    for i, op in enumerate(counted):
        key = (op.name, _shape_key(op.input_shapes), op.dtype, call_args_key(op.call_args))
        groups.setdefault(key, []).append(i)
    stats = []
    for (name, _, dtype, _), members in groups.items():
        first = counted[members[0]]
        flops = [counted[i].flops for i in members]
        total_bytes = ByteSplit()
        for i in members:
            total_bytes = total_bytes + counted[i].bytes
        stat = OpStat(
            op_id=ids[members[0]],
            name=name,
            input_shapes=[list(s) for s in first.input_shapes],
            dtype=dtype,
            module=module_pattern([counted[i].module for i in members]),
            calls=len(members),
            time_s=sum(join.attributed_s[i] for i in members),
            flops=None if any(f is None for f in flops) else sum(f for f in flops if f is not None),
            bytes=total_bytes,
            call_args=first.call_args,
        )
        if not all(join.matched[i] or does_no_work(counted[i]) for i in members):
            # some calls had no profiled twin: their time is missing
            stat.flags.append(Flag.of(UnmatchedCalls(), batch_size, stat.op_id))
        stats.append(stat)
    return stats


def _flag_fused(ops: Sequence[OpStat], unmatched_ops_s: dict[str, float],
                batch_size: int) -> None:
    """Say on each counted op with no time of its own which fused kernels named it."""
    names = {op.name for op in ops}
    fused: dict[str, list[str]] = defaultdict(list)  # op name -> kernels that contain it
    for entry in unmatched_ops_s:
        if entry.startswith(FUSED_KERNEL_PREFIX):
            kernel = entry[len(FUSED_KERNEL_PREFIX):]
            for name in fused_ops(kernel, names):
                fused[name].append(kernel)
    for op in ops:
        if op.time_s == 0 and fused.get(op.name):
            # its time is the kernel's, listed apart (unmatched_ops_s), with the ops fused
            # with it
            op.flags.append(Flag.of(FusedByInductor(kernels=list(fused[op.name])),
                                    batch_size, op.op_id))


def fill_breakdown(result: BatchResult, counted: Sequence[CountedOp],
                   steps: Sequence[StepCapture]) -> BatchResult:
    """Join ``counted`` to the profiled ``steps``: a new record, ``result`` with the op
    breakdown filled (per-op groups, totals, coverage, unmatched time) and a flag when
    steps differ."""
    joined = join_steps(counted, steps)
    ops = group_ops(counted, joined, result.batch_size)
    unmatched_ops_s = dict(joined.unmatched_s)
    _flag_fused(ops, unmatched_ops_s, result.batch_size)
    total = ByteSplit()
    for op in counted:
        total = total + op.bytes
    counted_time = sum(s.time_s for s in ops if s.flops is not None)
    flags = list(result.flags)
    if sequences_differ(steps):
        # the op sequence differed between profiled steps
        flags.append(Flag.of(NonDeterministic(), result.batch_size))
    return replace(
        result,
        profiled_step_s=joined.step_s,
        op_time_s=joined.op_time_s,
        ops=ops,
        unmatched_ops_s=unmatched_ops_s,
        flops=sum(op.flops for op in counted if op.flops is not None),
        bytes=total,
        coverage=counted_time / joined.op_time_s if joined.op_time_s > 0 else None,
        flags=flags,
    )

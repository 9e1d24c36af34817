"""Kernel probes run for real on the CPU: the model's own matmul and convolution shapes,
timed alone."""

from __future__ import annotations

from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import nn

from batchscope.profiler.counting import count_step
from batchscope.profiler.probe import _Arguments, _caller, run_probes
from batchscope.records.probe import ProbeSpec, probe_key


def test_probes_time_linear_shaped_products_and_say_why_one_cannot_run():
    specs = [ProbeSpec(probe_key("addmm", [[64], [8, 32], [32, 64]]), "addmm",
                       [[64], [8, 32], [32, 64]]),
             ProbeSpec("mm-small", "mm", [[4, 16], [16, 8]]),
             ProbeSpec("bmm", "bmm", [[2, 4, 8], [2, 8, 3]]),
             ProbeSpec("bad", "mm", [[4, 16], [5, 8]]),
             ProbeSpec("pool", "max_pool2d", [[1, 3, 8, 8]]),
             ProbeSpec("conv", "convolution", [[1, 3, 8, 8], [4, 3, 3, 3]])]
    out = run_probes(specs, torch.float32, torch.device("cpu"), lambda: None,
                     cache_bytes=1 << 16)
    assert set(out.times_s) == {specs[0].key, "mm-small", "bmm"}
    assert all(0 < t < 1 for t in out.times_s.values())
    assert set(out.errors) == {"bad", "pool", "conv"}
    assert "not probed" in out.errors["pool"]
    assert "non-tensor arguments" in out.errors["conv"]  # a convolution needs its args


def conv_spec(conv: nn.Conv2d, x: torch.Tensor) -> ProbeSpec:
    """The spec of ``conv`` on ``x`` as the sweep builds it: from the counting pass."""
    with torch.inference_mode():
        (op,) = count_step(lambda: conv(x), weights=conv.parameters(), state=[x])
    assert op.name == "convolution"
    return ProbeSpec.of(op.name, op.input_shapes, op.call_args)


def test_convolution_probes_call_the_models_own_convolution():
    strided = nn.Conv2d(8, 16, 3, stride=2, padding=1)  # groups 1, with a bias
    depthwise = nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False)
    x = torch.randn(4, 8, 32, 32)
    specs = [conv_spec(strided, x), conv_spec(depthwise, x)]
    assert specs[0].key == ("convolution[[4,8,32,32],[16,8,3,3],[16]]"
                               "[[2,2],[1,1],[1,1],false,[0,0],1]")
    assert specs[1].key == ("convolution[[4,8,32,32],[8,1,3,3]]"
                               "[[1,1],[1,1],[1,1],false,[0,0],8]")
    # The probe's call is the module's: the same output for the same tensors.
    made = _Arguments(torch.float32, torch.device("cpu"))
    for spec, conv in zip(specs, (strided, depthwise), strict=True):
        tensors = made.for_spec(spec.name, spec.shapes, 0)
        with torch.inference_mode():
            got = _caller(spec)(tensors)
            want = F.conv2d(tensors[0], tensors[1], tensors[2] if len(tensors) > 2 else None,
                            conv.stride, conv.padding, conv.dilation, conv.groups)
        assert got.shape == want.shape and torch.allclose(got, want, atol=1e-5)
    # The input is made for its probe alone; the weights are kept for the round.
    assert [8, 1, 3, 3] in [list(k[0]) for k in made.made]
    assert [4, 8, 32, 32] not in [list(k[0]) for k in made.made]
    out = run_probes(specs, torch.float32, torch.device("cpu"), lambda: None)
    assert out.errors == {}
    assert set(out.times_s) == {s.key for s in specs}
    assert all(t > 0 for t in out.times_s.values())


def test_a_matmul_key_has_no_args_and_a_convolution_key_tells_strides_apart():
    assert probe_key("addmm", [[64], [8, 32], [32, 64]]) == "addmm[[64],[8,32],[32,64]]"
    shapes = [[1, 3, 8, 8], [4, 3, 3, 3]]
    one, two = ([[s, s], [1, 1], [1, 1], False, [0, 0], 1] for s in (1, 2))
    assert probe_key("convolution", shapes, one) != probe_key("convolution", shapes, two)


def test_a_round_makes_each_weight_once_and_its_copies_at_other_addresses():
    made = _Arguments(torch.float32, torch.device("cpu"))
    at_8 = made.for_spec("addmm", [[64], [8, 32], [32, 64]], 0)
    at_16 = made.for_spec("addmm", [[64], [16, 32], [32, 64]], 0)
    assert at_8[2] is at_16[2] and at_8[0] is at_16[0]  # bias and weight: made once
    assert at_8[2].stride() == (1, 32)  # nn.Linear's [out, in] weight, seen transposed
    copy = made.for_spec("addmm", [[64], [8, 32], [32, 64]], 1)
    assert copy[2].data_ptr() != at_8[2].data_ptr() and torch.equal(copy[2], at_8[2])


def test_the_bounded_probes_stop_at_their_measured_budget():
    # Convolutions carry the round's budget; the worker counts what they took, measured,
    # from earlier rounds on: set numbers here (0 s, already spent, unbounded), no speed.
    x = torch.randn(2, 4, 16, 16)
    convs = [conv_spec(nn.Conv2d(4, c, 3), x) for c in (4, 8, 16)]
    matmul = ProbeSpec("mm", "mm", [[4, 16], [16, 8]])
    cpu = torch.device("cpu")
    spent = run_probes([matmul] + [replace(s, budget_s=0.0) for s in convs],
                       torch.float32, cpu, lambda: None)
    assert set(spent.times_s) == {"mm"}  # a matmul has no budget
    assert spent.skipped == [s.key for s in convs] and spent.bounded_s == 0.0
    earlier = run_probes([replace(s, budget_s=5.0) for s in convs], torch.float32, cpu,
                         lambda: None, bounded_spent_s=5.0)
    assert earlier.times_s == {} and len(earlier.skipped) == 3
    ample = run_probes([replace(s, budget_s=1e9) for s in convs], torch.float32, cpu,
                       lambda: None)
    assert set(ample.times_s) == {s.key for s in convs} and ample.skipped == []
    assert ample.bounded_s >= sum(ample.times_s.values())  # warm-ups and inputs too


def test_a_cnn_training_steps_per_row_ops_are_replayed_from_their_recorded_arguments():
    # Batch norm, pooling, ReLU's backward and the backward convolution are counted with
    # their non-tensor arguments and called again through the overload those fit.
    from batchscope.op_families import REPLAYED_OPS
    from batchscope.profiler.probe import _Replay

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8 * 8 * 8, 4))
    x = torch.randn(4, 3, 16, 16)

    def step() -> None:
        model(x).sum().backward()

    ops = count_step(step, weights=list(model.parameters()), state=[x], root=model)
    replayed = {op.name: op for op in ops if op.name in REPLAYED_OPS}
    assert {"native_batch_norm", "native_batch_norm_backward", "max_pool2d_with_indices",
            "max_pool2d_with_indices_backward", "threshold_backward",
            "convolution_backward"} <= set(replayed)
    assert all(op.call_args is not None for op in replayed.values())
    bn = replayed["native_batch_norm"]
    assert bn.call_args == [True, 0.1, 1e-05]  # training, momentum, eps
    specs = [ProbeSpec.of(op.name, op.input_shapes, op.call_args) for op in replayed.values()]
    out = run_probes(specs, torch.float32, torch.device("cpu"), lambda: None)
    assert out.errors == {} and set(out.times_s) == {s.key for s in specs}
    # The replay is the op itself: batch norm's output for the same tensors.
    replay = _Replay.of(bn.name, bn.input_shapes, bn.call_args)
    tensors = replay.tensors(bn.input_shapes, torch.float32, torch.device("cpu"))
    got = replay.call([t.clone() for t in tensors], bn.call_args)[0]
    want = torch.native_batch_norm(*[t.clone() for t in tensors], True, 0.1, 1e-5)[0]
    assert torch.allclose(got, want)
    # An op whose recorded arguments fit no overload says so, and is not timed.
    bad = replace(specs[0], key="bad", args=[*(specs[0].args or []), 7])
    assert "no overload" in run_probes([bad], torch.float32, torch.device("cpu"),
                                       lambda: None).errors["bad"]


def test_a_probe_its_smaller_sibling_says_is_long_skips_its_warm_up(monkeypatch):
    # One op (op id "head") at two batch sizes: the second is estimated from the first's
    # time scaled by the rows; at 10**9 rows any first time makes it long. Set numbers.
    from batchscope.profiler import probe

    calls = []
    monkeypatch.setattr(probe, "time_probe", lambda spec, *a, warm_up=True, **k: (
        calls.append((spec.batch, warm_up)) or 1e-5))
    specs = [ProbeSpec(f"mm{b}", "mm", [[b, 4], [4, 4]], op_id="head", batch=b)
             for b in (1, 10**9)]
    other = ProbeSpec("x", "mm", [[8, 4], [4, 4]], op_id="other", batch=8)
    run_probes([*specs, other], torch.float32, torch.device("cpu"), lambda: None)
    assert calls == [(1, True), (10**9, False), (8, True)]


def test_calls_a_probe_could_not_repeat_record_no_args_and_a_spec_dtype_is_used():
    from batchscope.profiler.probe import _float_dtype

    x = torch.randn(2, 4, 8, 8)
    plain = nn.BatchNorm2d(4, affine=False).eval()  # weight and bias left None
    with torch.inference_mode():
        ops = count_step(lambda: (x * 0.5, plain(x), x + x), weights=[], state=[x])
    args = {(op.name, len(op.input_shapes)): op.call_args for op in ops}
    assert args[("mul", 1)] is None  # a Python number sat in a tensor slot
    assert args[("native_batch_norm", 3)] is None
    assert args[("add", 2)] == [1]
    # A replayed op runs in the dtype its spec names (the one it ran in, under --amp).
    bn = ProbeSpec("bn", "native_batch_norm", [[2, 4, 8, 8], [4], [4], [4], [4]],
                   args=[False, 0.1, 1e-5])
    made = _Arguments(torch.float32, torch.device("cpu"))
    assert {t.dtype for t in made.for_spec(bn.name, bn.shapes, 0, bn.args,
                                           _float_dtype("bfloat16"))} == {torch.bfloat16}
    assert _float_dtype("int64") is None and _float_dtype("") is None
    out = run_probes([replace(bn, dtype="bfloat16")], torch.float32, torch.device("cpu"),
                     lambda: None)
    assert out.errors == {} and out.times_s["bn"] > 0


def test_matmuls_and_convolutions_run_in_their_specs_dtype_and_their_keys_say_it():
    # Under --amp an fp32 model's matmuls ran in bfloat16: their probes run there too, with
    # their own weights (a bf16 copy of a shape is not the fp32 one's), and keyed apart.
    made = _Arguments(torch.float32, torch.device("cpu"))
    shapes = [[64], [8, 32], [32, 64]]
    fp32 = made.for_spec("addmm", shapes, 0)
    bf16 = made.for_spec("addmm", shapes, 0, dtype=torch.bfloat16)
    assert {t.dtype for t in fp32} == {torch.float32}
    assert {t.dtype for t in bf16} == {torch.bfloat16} and bf16[2].stride() == (1, 32)
    conv = made.for_spec("convolution", [[1, 3, 8, 8], [4, 3, 3, 3]], 0,
                         dtype=torch.bfloat16)
    assert {t.dtype for t in conv} == {torch.bfloat16}
    keys = [probe_key("addmm", shapes, dtype=d) for d in ("float32", "bfloat16")]
    assert keys[0] != keys[1] and keys[1].endswith("@bfloat16")
    specs = [ProbeSpec(key, "addmm", shapes, dtype=d)
             for key, d in zip(keys, ("float32", "bfloat16"), strict=True)]
    assert [s.key for s in specs] == [ProbeSpec.of("addmm", shapes, dtype=d).key
                                      for d in ("float32", "bfloat16")]
    out = run_probes(specs, torch.float32, torch.device("cpu"), lambda: None)
    assert out.errors == {} and set(out.times_s) == set(keys)


def test_a_round_skips_the_probes_it_expects_to_end_past_its_time():
    # A round of probes has round_s of wall time (the sweep's supervisor sets it from what
    # measuring took): a probe its op's smaller one says would end past it is skipped, not
    # begun, and once the time is spent nothing more begins. Unbounded, a GPT-2's matmuls
    # at every size to 1024 ran past the supervisor's 120 s and the whole round was lost.
    cpu = torch.device("cpu")
    small = ProbeSpec.of("mm", [[1, 64], [64, 64]], op_id="head", batch=1)
    # any call of the small one (1 ns or more) scaled to 2**40 rows: past 1000 s
    huge = ProbeSpec.of("mm", [[2**40, 64], [64, 64]], op_id="head", batch=2**40)
    out = run_probes([small, huge], torch.float32, cpu, lambda: None, round_s=60.0)
    assert set(out.times_s) == {small.key} and out.skipped == [huge.key] and not out.errors
    spent = run_probes([small], torch.float32, cpu, lambda: None, round_s=0.0)
    assert spent.times_s == {} and spent.skipped == [small.key]

"""The counting pass on real CPU ops: FLOPs, bytes by kind, names, modules."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from functools import partial
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils import flop_counter
from torch.utils.flop_counter import FlopCounterMode

from batchscope.profiler.counting import count_step
from batchscope.records import ByteSplit, CountedOp

CONTEXTS = [torch.inference_mode, torch.enable_grad]
MATMUL_LIKE = {
    p.__name__ for p in flop_counter.flop_registry if isinstance(p, torch._ops.OpOverloadPacket)
}
CPU_ATTENTION = "_scaled_dot_product_flash_attention_for_cpu"


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


def count(
    step: Callable[[], Any],
    weights: Iterable[torch.Tensor] = (),
    state: Iterable[torch.Tensor] = (),
    root: nn.Module | None = None,
    context: Callable[[], AbstractContextManager[Any]] = torch.inference_mode,
) -> list[CountedOp]:
    with context():
        return count_step(step, weights=list(weights), state=list(state), root=root)


def only(ops: list[CountedOp], name: str) -> CountedOp:
    matches = [op for op in ops if op.name == name]
    assert len(matches) == 1, [op.name for op in ops]
    return matches[0]


def counted_flops(ops: list[CountedOp], names: set[str] | None = None) -> int:
    return sum(op.flops or 0 for op in ops if names is None or op.name in names)


def flop_counter_total(
    step: Callable[[], Any], context: Callable[[], AbstractContextManager[Any]]
) -> int:
    with context(), FlopCounterMode(display=False) as counter:
        step()
    return counter.get_total_flops()


def test_mm_flops_and_bytes() -> None:
    a, b = torch.randn(64, 128), torch.randn(128, 32)
    op = only(count(lambda: torch.mm(a, b), weights=[b], state=[a]), "mm")
    assert op.flops == 524288  # 2 * 64 * 128 * 32
    # a: 64*128*4 = 32768 (state), b: 128*32*4 = 16384 (weights), out: 64*32*4 = 8192
    assert op.bytes == ByteSplit(weights=16384, state=32768, activations=8192)
    assert op.input_shapes == [[64, 128], [128, 32]]
    assert op.dtype == "float32"


def test_addmm_bias_parameter_is_weights() -> None:
    lin, x = nn.Linear(128, 32), torch.randn(64, 128)
    op = only(
        count(lambda: torch.addmm(lin.bias, x, lin.weight.t()), lin.parameters(), [x]), "addmm"
    )
    assert op.flops == 524288  # 2 * 64 * 128 * 32
    # bias 32*4 = 128 + weight 32*128*4 = 16384 -> 16512; x 64*128*4 = 32768; out 64*32*4 = 8192
    assert op.bytes == ByteSplit(weights=16512, state=32768, activations=8192)
    assert op.input_shapes == [[32], [64, 128], [128, 32]]


@pytest.mark.parametrize("context", CONTEXTS)
def test_conv2d(context: Callable[[], AbstractContextManager[Any]]) -> None:
    conv, x = nn.Conv2d(3, 16, 3, padding=1), torch.randn(4, 3, 32, 32)
    op = only(count(lambda: conv(x), conv.parameters(), [x], context=context), "convolution")
    assert op.flops == 3538944  # 2 * batch 4 * c_out 16 * c_in 3 * 3*3 * 32*32
    # weight 16*3*3*3*4 = 1728 + bias 16*4 = 64; x 4*3*32*32*4 = 49152; out 4*16*32*32*4 = 262144
    assert op.bytes == ByteSplit(weights=1792, state=49152, activations=262144)


@pytest.mark.parametrize("context", CONTEXTS)
def test_a_convolution_records_the_arguments_that_call_it_again(
    context: Callable[[], AbstractContextManager[Any]],
) -> None:
    conv2d, x2 = nn.Conv2d(3, 8, 3, stride=2, padding=1), torch.randn(2, 3, 16, 16)
    op = only(count(lambda: conv2d(x2), conv2d.parameters(), [x2], context=context),
              "convolution")
    # stride, padding, dilation, transposed, output_padding, groups; the bias is a shape
    assert op.call_args == [[2, 2], [1, 1], [1, 1], False, [0, 0], 1]
    assert op.input_shapes == [[2, 3, 16, 16], [8, 3, 3, 3], [8]]
    conv1d = nn.Conv1d(4, 4, 5, stride=3, padding=2, groups=4, bias=False)
    x1 = torch.randn(2, 4, 32)
    op = only(count(lambda: conv1d(x1), conv1d.parameters(), [x1], context=context),
              "convolution")
    assert op.call_args == [[3], [2], [1], False, [0], 4]
    assert op.input_shapes == [[2, 4, 32], [4, 1, 5]]
    linear, x = nn.Linear(4, 4), torch.randn(2, 4)
    assert all(o.call_args is None
               for o in count(lambda: linear(x), linear.parameters(), [x], context=context))


def test_bmm() -> None:
    a, b = torch.randn(8, 16, 32), torch.randn(8, 32, 24)
    op = only(count(lambda: torch.bmm(a, b), state=[a, b]), "bmm")
    assert op.flops == 196608  # 2 * 8 * 16 * 32 * 24
    # a 8*16*32*4 = 16384 + b 8*32*24*4 = 24576; out 8*16*24*4 = 12288
    assert op.bytes == ByteSplit(state=40960, activations=12288)


@pytest.mark.parametrize("context", CONTEXTS)
def test_cpu_attention_inside_and_outside_inference_mode(
    context: Callable[[], AbstractContextManager[Any]],
) -> None:
    q, k, v = (torch.randn(2, 4, 16, 32) for _ in range(3))
    ops = count(lambda: F.scaled_dot_product_attention(q, k, v), state=[q, k, v], context=context)
    assert [op.name for op in ops] == [CPU_ATTENTION]
    # q @ k^T: 2 * (2*4) * 16 * 16 * 32 = 131072, then attn @ v the same: 262144
    assert ops[0].flops == 262144

    def math_attention() -> torch.Tensor:
        return torch.softmax(q @ k.transpose(-1, -2) / 32**0.5, dim=-1) @ v

    assert ops[0].flops == flop_counter_total(math_attention, context)  # the same two products
    # q, k, v 3 * 2*4*16*32*4 = 49152; out 16384 + logsumexp 2*4*16*4 = 512
    assert ops[0].bytes == ByteSplit(state=49152, activations=16896)


def test_flop_counter_mode_misses_cpu_attention() -> None:
    """Why the CPU attention formula is ours: torch's counter sees 0 for this op."""
    q = torch.randn(1, 2, 8, 16)
    assert (
        flop_counter_total(lambda: F.scaled_dot_product_attention(q, q, q), torch.enable_grad) == 0
    )


def test_broadcast_operand_counted_once_per_distinct_element() -> None:
    x, bias = torch.randn(64, 128), torch.randn(128)
    row = bias.expand(64, 128)  # stride (0, 1): 128 distinct elements, not 64 * 128
    op = only(count(lambda: torch.add(x, row), weights=[bias], state=[x]), "add")
    assert op.flops == 8192  # one per output element: 64 * 128
    # bias 128*4 = 512 (once); x 64*128*4 = 32768; out 32768
    assert op.bytes == ByteSplit(weights=512, state=32768, activations=32768)


def test_in_place_op_reads_and_writes_its_destination() -> None:
    x, y = torch.randn(32, 32), torch.randn(32, 32)
    op = only(count(lambda: x.add_(y), state=[x, y]), "add_")
    # x read 32*32*4 = 4096 and written back 4096, y read 4096
    assert op.bytes == ByteSplit(state=12288)


@pytest.mark.parametrize(
    ("name", "overwrite", "read_bytes"),
    [
        ("zero_", lambda x, y: x.zero_(), 0),
        ("fill_", lambda x, y: x.fill_(1.5), 0),
        ("normal_", lambda x, y: x.normal_(), 0),
        ("copy_", lambda x, y: x.copy_(y), 4096),  # y read 32*32*4
    ],
)
def test_overwritten_destination_is_written_once(
    name: str, overwrite: Callable[[torch.Tensor, torch.Tensor], Any], read_bytes: int
) -> None:
    x, y = torch.randn(32, 32), torch.randn(32, 32)
    op = only(count(lambda: overwrite(x, y), state=[x, y]), name)
    assert op.bytes == ByteSplit(state=4096 + read_bytes)  # x written 32*32*4, never read


def test_out_argument_is_written_once_unless_it_is_also_read() -> None:
    x, y, z = torch.randn(32, 32), torch.randn(32, 32), torch.empty(32, 32)
    fresh = only(count(lambda: torch.add(x, y, out=z), state=[x, y]), "add")
    assert fresh.bytes == ByteSplit(state=8192, activations=4096)  # x, y read 4096 each; z written
    into_x = only(count(lambda: torch.add(x, y, out=x), state=[x, y]), "add")
    assert into_x.bytes == ByteSplit(state=12288)  # x read and written (2 * 4096), y read 4096


@pytest.mark.parametrize(("accumulate", "x_bytes"), [(False, 384), (True, 768)])
def test_index_put_reads_its_destination_only_when_accumulating(
    accumulate: bool, x_bytes: int
) -> None:
    x, rows, values = torch.randn(32, 32), torch.tensor([1, 5, 7]), torch.randn(3, 32)
    step = partial(x.index_put_, (rows,), values, accumulate=accumulate)
    op = only(count(step, state=[x, rows, values]), "index_put_")
    # x: the 3 rows of 32 * 4 = 384 written (and read when adding); values 384; rows 3*8 = 24
    assert op.bytes == ByteSplit(state=x_bytes + 384 + 24)


@pytest.mark.parametrize(("training", "stats_bytes"), [(True, 256), (False, 128)])
def test_batch_norm_running_stats_are_read_and_written_in_training(
    training: bool, stats_bytes: int
) -> None:
    bn, x = nn.BatchNorm1d(16).train(training), torch.randn(8, 16)
    ops = count(lambda: bn(x), [*bn.parameters(), *bn.buffers()], [x], context=torch.enable_grad)
    op = only(ops, "native_batch_norm")
    # weight, bias 2 * 16*4 = 128 read; running mean, var 2 * 64 read (and written in training)
    # although the op's schema does not mark them written
    assert op.bytes.weights == 128 + stats_bytes


def test_adamw_step_reads_and_writes_parameters_and_moments() -> None:
    lin, x = nn.Linear(16, 8), torch.randn(4, 16)
    opt = torch.optim.AdamW(lin.parameters(), foreach=False)
    lin(x).square().mean().backward()
    opt.step()  # creates the moments and step counters
    moments = [t for s in opt.state.values() for k, t in s.items() if k != "step"]
    counters = [s["step"] for s in opt.state.values()]
    ops = count(opt.step, lin.parameters(), moments + counters)
    param_bytes = sum(p.numel() * p.element_size() for p in lin.parameters())  # (128 + 8) * 4
    counter_bytes = 3 * 4 * len(counters)  # float32 step: += 1 reads and writes it, .item() reads
    # per parameter p (m, v its moments, g its gradient, all of p's size):
    # weights: p.mul_(1 - lr * wd) reads and writes p, p.addcdiv_(m, denom) again: 4 * p
    # state: m.lerp_(g) 2, v.mul_(beta2) 2, v.addcmul_(g, g) 2, v.sqrt() 1, addcdiv_ reads m 1
    # activations: g read by lerp_ and addcmul_ 2, sqrt writes s 1, s / c reads s, writes
    #   denom 2, denom.add_(eps) 2, addcdiv_ reads denom 1
    assert sum(op.bytes.weights for op in ops) == 4 * param_bytes == 2176
    assert sum(op.bytes.state for op in ops) == 8 * param_bytes + counter_bytes == 4376
    assert sum(op.bytes.activations for op in ops) == 8 * param_bytes == 4352


def test_kv_cache_slice_read_and_write_count_the_slice_only() -> None:
    cache_k, cache_v = torch.zeros(2, 4, 64, 16), torch.zeros(2, 4, 64, 16)
    q, k_new = torch.randn(2, 4, 1, 16), torch.randn(2, 4, 1, 16)

    def step() -> torch.Tensor:
        cache_k[:, :, 10:11] = k_new
        return F.scaled_dot_product_attention(q, cache_k[:, :, :11], cache_v[:, :, :11])

    ops = count(step, state=[cache_k, cache_v, q, k_new])
    write = only(ops, "copy_")
    assert write.bytes == ByteSplit(state=1024)  # slice 2*4*1*16*4 = 512 written + k_new 512
    attention = only(ops, CPU_ATTENTION)
    # q 2*4*1*16*4 = 512 + two slices of 2*4*11*16*4 = 5632 each; not 2 * 32768 of storage
    assert attention.bytes.state == 11776
    assert attention.bytes.activations == 544  # out 512 + logsumexp 2*4*1*4 = 32
    assert all(op.bytes == ByteSplit() for op in ops if op.name == "slice")  # views move 0


def test_embedding_reads_gathered_rows_only() -> None:
    emb, ids = nn.Embedding(1000, 64), torch.tensor([[1, 5, 7], [2, 2, 9]])
    op = only(count(lambda: emb(ids), emb.parameters(), [ids]), "embedding")
    assert op.flops == 0
    # 6 rows * 64 * 4 = 1536 (not the table's 1000*64*4 = 256000); ids 6*8 = 48; out 1536
    assert op.bytes == ByteSplit(weights=1536, state=48, activations=1536)


def test_op_without_formula_is_uncounted_but_its_bytes_count() -> None:
    x = torch.randn(8, 16)
    op = only(count(lambda: torch.sort(x, dim=-1), state=[x]), "sort")
    assert op.flops is None
    # x 8*16*4 = 512; values 512 + int64 indices 8*16*8 = 1024
    assert op.bytes == ByteSplit(state=512, activations=1536)


@pytest.mark.parametrize(
    ("shape", "names"), [((6, 40), ["t", "addmm"]), ((2, 3, 40), ["view", "t", "addmm", "view"])]
)
def test_linear_decomposes_under_inference_mode(shape: tuple[int, ...], names: list[str]) -> None:
    lin, x = nn.Linear(40, 24), torch.randn(*shape)
    ops = count(lambda: lin(x), lin.parameters(), [x], root=lin)
    assert [op.name for op in ops] == names
    assert counted_flops(ops) == 11520  # 2 * b 6 * in 40 * out 24
    assert {op.module for op in ops} == {""}  # the root itself is ""


def _mlp_and_cnn() -> list[tuple[nn.Module, torch.Tensor]]:
    mlp = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 10))
    cnn = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, stride=2),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16, 5),
    )
    return [(mlp, torch.randn(4, 7, 32)), (cnn, torch.randn(3, 3, 16, 16))]


@pytest.mark.parametrize("context", CONTEXTS)
def test_matmul_and_conv_totals_match_flop_counter_mode(
    context: Callable[[], AbstractContextManager[Any]],
) -> None:
    for model, x in _mlp_and_cnn():
        step = partial(model.eval(), x)
        ops = count(step, model.parameters(), [x], root=model, context=context)
        assert counted_flops(ops, MATMUL_LIKE) == flop_counter_total(step, context) > 0


def test_training_step_counts_backward_at_about_twice_forward() -> None:
    _, (cnn, x) = _mlp_and_cnn()
    target = torch.tensor([0, 3, 1])
    opt = torch.optim.SGD(cnn.parameters(), lr=0.1)

    def step() -> None:
        opt.zero_grad()
        F.cross_entropy(cnn(x), target).backward()
        opt.step()

    ops = count(
        step,
        list(cnn.parameters()) + list(cnn.buffers()),
        [x, target],
        root=cnn,
        context=torch.enable_grad,
    )
    assert counted_flops(ops, MATMUL_LIKE) == flop_counter_total(step, torch.enable_grad)
    forward = counted_flops(ops, {"convolution", "addmm"})
    backward = counted_flops(ops, {"convolution_backward", "mm"})
    first_conv = next(op for op in ops if op.name == "convolution")
    assert first_conv.flops == 331776  # 2 * 3 * 8 * 3 * 3*3 * 16*16
    # each layer: grad_weight (1x its forward) + grad_input (1x), but x needs no grad_input
    assert backward == 2 * forward - first_conv.flops == 457152  # 2 * 394464 - 331776
    assert {
        "native_batch_norm_backward",
        "max_pool2d_with_indices_backward",
        "threshold_backward",
    } <= {op.name for op in ops if op.flops}
    assert any(op.name == "add_" and op.bytes.weights > 0 for op in ops)  # the SGD update


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.act = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.fc(x)) + x


@pytest.mark.parametrize("context", CONTEXTS)
def test_module_paths(context: Callable[[], AbstractContextManager[Any]]) -> None:
    model = nn.Sequential(_Block(), _Block())
    x = torch.randn(2, 8, requires_grad=context is torch.enable_grad)

    def step() -> None:
        out = model(x)
        if out.requires_grad:
            out.sum().backward()

    ops = count(step, model.parameters(), [x], root=model, context=context)
    assert [op.module for op in ops if op.name == "addmm"] == ["0.fc", "1.fc"]
    assert [op.module for op in ops if op.name == "relu"] == ["0.act", "1.act"]
    assert [op.module for op in ops if op.name == "add"][:2] == [
        "0",
        "1",
    ]  # the residual, in the block
    if context is torch.enable_grad:
        assert [op.module for op in ops if op.name == "threshold_backward"] == ["1.act", "0.act"]
        assert [op.module for op in ops if op.name == "mm"] == ["1.fc"] * 2 + ["0.fc"] * 2


class _TinyDecoder(nn.Module):
    """A GPT-style decoder stepping one token against a preallocated KV cache."""

    def __init__(self, vocab: int = 100, dim: int = 32, heads: int = 4, layers: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.wte = nn.Embedding(vocab, dim)
        self.qkv = nn.ModuleList(nn.Linear(dim, 3 * dim) for _ in range(layers))
        self.proj = nn.ModuleList(nn.Linear(dim, dim) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, ids: torch.Tensor, cache: torch.Tensor, pos: int) -> torch.Tensor:
        x = self.wte(ids)  # [b, 1, dim]
        b = ids.shape[0]
        for layer, (qkv, proj) in enumerate(zip(self.qkv, self.proj, strict=True)):
            q, k, v = qkv(x).view(b, 1, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
            cache[layer, 0, :, :, pos : pos + 1] = k
            cache[layer, 1, :, :, pos : pos + 1] = v
            keys, values = cache[layer, 0, :, :, : pos + 1], cache[layer, 1, :, :, : pos + 1]
            attended = F.scaled_dot_product_attention(q, keys, values)
            x = x + proj(attended.transpose(1, 2).reshape(b, 1, -1))
        return self.head(self.norm(x))


def test_decoder_state_bytes_grow_with_batch_weight_bytes_do_not() -> None:
    model = _TinyDecoder().eval()
    weights = list(model.parameters())
    totals: dict[int, tuple[int, int, int, int]] = {}
    for batch in (1, 2, 4, 8):
        ids = torch.randint(0, 100, (batch, 1))
        cache = torch.zeros(2, 2, batch, 4, 64, 8)  # [layers, k/v, b, heads, context, head_dim]
        ops = count(partial(model, ids, cache, 20), weights, [ids, cache], root=model)
        embedding = only(ops, "embedding")
        rest = [op for op in ops if op is not embedding]
        totals[batch] = (
            sum(op.bytes.state for op in ops),
            sum(op.bytes.weights for op in rest),
            embedding.bytes.weights,
            counted_flops(ops),
        )
        assert all(op.flops is not None for op in ops), [op.name for op in ops if op.flops is None]
        assert only(ops, "embedding").module == "wte"
    state_1, weights_1, _, flops_1 = totals[1]
    for batch, (state, other_weights, embedding_weights, flops) in totals.items():
        assert state == batch * state_1  # ids, cache slices read and rows written: all per row
        assert other_weights == weights_1  # each weight read once per step, whatever the batch
        assert embedding_weights == batch * 32 * 4  # one gathered row of dim 32 per token
        assert flops == pytest.approx(batch * flops_1, rel=0.01)
    # per layer, the keys and values read (21 positions) and the k, v rows written, at batch 1:
    # 2 layers * (2 * 4*21*8*4 read + 2 * 4*8*4 written (+ the same written k, v source)) + ids 8
    assert state_1 > 2 * 2 * 4 * 21 * 8 * 4


def test_state_may_be_nested_and_dtype_is_named() -> None:
    a, b = torch.randn(4, 8, dtype=torch.bfloat16), torch.randn(8, 2, dtype=torch.bfloat16)
    with torch.inference_mode():
        ops = count_step(lambda: a @ b, weights=iter([]), state={"x": [a, (b,)]})
    op = only(ops, "mm")
    assert op.dtype == "bfloat16"
    assert op.bytes == ByteSplit(state=96, activations=16)  # (4*8 + 8*2) * 2 bytes; out 4*2*2


def test_an_embedding_reads_each_row_of_its_table_once_however_often_picked() -> None:
    # issue 48: the classifier's embedding read 12.9 MB at batch 1, 79.9 MB at batch 512:
    # more picks than the table has rows read the table once
    emb, ids = nn.Embedding(10, 64), torch.randint(0, 10, (4, 100))
    op = only(count(lambda: emb(ids), emb.parameters(), [ids]), "embedding")
    assert op.bytes.weights == 10 * 64 * 4  # the whole table, not 400 rows


def _optimizer_step_flops(make: Callable[[Any], torch.optim.Optimizer]) -> int:
    torch.manual_seed(0)
    model = nn.Linear(32, 16)
    optimizer = make(model.parameters())
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    optimizer.step()  # the state exists before the counted step, as in a sweep
    state = [t for s in optimizer.state.values() for t in s.values()
             if isinstance(t, torch.Tensor)]
    ops = count(optimizer.step, [*model.parameters(), *(p.grad for p in model.parameters()),
                                 *state])
    assert all(op.flops is not None for op in ops), [op.name for op in ops if op.flops is None]
    return counted_flops(ops)


@pytest.mark.parametrize(("fused", "unfused"), [
    (partial(torch.optim.AdamW, fused=True), partial(torch.optim.AdamW, foreach=False)),
    (partial(torch.optim.Adam, fused=True, amsgrad=True),
     partial(torch.optim.Adam, foreach=False, amsgrad=True)),
    (partial(torch.optim.SGD, lr=0.1, momentum=0.9, nesterov=True, fused=True),
     partial(torch.optim.SGD, lr=0.1, momentum=0.9, nesterov=True, foreach=False)),
    (partial(torch.optim.Adagrad, fused=True), partial(torch.optim.Adagrad, foreach=False)),
])
def test_a_fused_optimizer_step_counts_what_the_unfused_step_counts(
        fused: Callable[[Any], torch.optim.Optimizer],
        unfused: Callable[[Any], torch.optim.Optimizer]) -> None:
    # issue 48: _fused_adamw_ was uncounted; its FLOPs per element are the unfused step's
    assert _optimizer_step_flops(fused) == _optimizer_step_flops(unfused)


def test_dropout_in_training_is_counted() -> None:
    drop, x = nn.Dropout(0.1).train(), torch.randn(8, 16)
    ops = count(lambda: drop(x), state=[x])
    # the mask drawn (bernoulli_, uncounted before), scaled, applied: one FLOP an element each
    assert [(op.name, op.flops) for op in ops] == [
        ("empty_like", 0), ("bernoulli_", 128), ("div_", 128), ("mul", 128)]


def test_a_dynamic_quantized_linear_counts_its_gemm_and_its_packed_weight() -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = torch.ao.quantization.quantize_dynamic(nn.Sequential(nn.Linear(64, 32)),
                                                       {nn.Linear}, dtype=torch.qint8)
    x = torch.randn(4, 64)
    op = only(count(lambda: model(x), state=[x]), "quantized::linear_dynamic")
    assert op.flops == 2 * 4 * 64 * 32 + 3 * 4 * 64  # the GEMM; quantizing x (3 an element)
    assert op.bytes.weights == 32 * 64 + 32 * 4  # int8 weight, fp32 bias: not a tensor argument


def test_weight_only_int8_matmul() -> None:
    x, w, scales = torch.randn(4, 64), torch.randint(-8, 8, (32, 64), dtype=torch.int8), \
        torch.ones(32)
    op = only(count(lambda: torch.ops.aten._weight_int8pack_mm(x, w, scales), [w, scales], [x]),
              "_weight_int8pack_mm")
    assert op.flops == 2 * 4 * 64 * 32

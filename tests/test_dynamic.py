"""Dynamic shapes: one graph for many sizes, compared with eager on real tensors.

Automatic dynamic (the default), `dynamic=True/False`, `mark_dynamic`, symbolic size arithmetic,
guards on sizes (they must reject sizes that break what the trace assumed), and the AOT stage
on symbolic graphs (inference and training)."""

from __future__ import annotations

import logging
import math
import random
import types
import warnings
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import framejit
from framejit.testing import CompileCounter


@pytest.fixture(autouse=True)
def _fresh() -> Any:
    framejit.reset()
    yield
    framejit.reset()


def counted(fn: Any, **options: Any) -> tuple[Any, CompileCounter]:
    counter = CompileCounter()
    return framejit.jit(fn, backend=counter, **options), counter


def close(got: Any, want: Any) -> None:
    if isinstance(want, torch.Tensor):
        assert got.shape == want.shape and got.dtype == want.dtype
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    elif isinstance(want, (tuple, list)):
        assert type(got) is type(want) and len(got) == len(want)
        for g, w in zip(got, want):
            close(g, w)
    else:
        assert type(got) is type(want) and got == want, (got, want)


# --- automatic dynamic ---------------------------------------------------------------------------


def scale_rows(x: torch.Tensor) -> torch.Tensor:
    b, n = x.shape
    flat = x.reshape(b * n) * 2
    return flat.view(b, n).softmax(-1) + x.mean(0)


def test_ten_batch_sizes_compile_at_most_twice() -> None:
    fn, counter = counted(scale_rows)
    for b in (3, 5, 8, 2, 13, 4, 7, 31, 6, 9):
        x = torch.randn(b, 4)
        close(fn(x), scale_rows(x))
    assert counter.frame_count == 2


def test_first_call_specializes_and_second_size_makes_the_dim_symbolic() -> None:
    fn, counter = counted(scale_rows)
    x = torch.randn(3, 4)
    close(fn(x), scale_rows(x))
    assert counter.frame_count == 1
    x = torch.randn(5, 4)
    close(fn(x), scale_rows(x))
    assert counter.frame_count == 2
    graph = counter.graphs[-1]
    placeholder = next(n for n in graph.graph.nodes if n.op == "placeholder")
    assert isinstance(placeholder.meta["val"].shape[0], torch.SymInt)
    assert not isinstance(placeholder.meta["val"].shape[1], torch.SymInt)  # 4 never changed


def test_a_static_dim_change_still_recompiles_and_stays_right() -> None:
    fn, counter = counted(scale_rows)
    for b, n in ((3, 4), (5, 4), (6, 4), (6, 7), (9, 7), (2, 9)):
        x = torch.randn(b, n)
        close(fn(x), scale_rows(x))
    assert counter.frame_count == 3  # (3,4) static; b symbolic; then b and n symbolic


def test_dynamic_false_compiles_once_per_size() -> None:
    fn, counter = counted(scale_rows, dynamic=False)
    for b in (3, 5, 8, 5, 3):
        x = torch.randn(b, 4)
        close(fn(x), scale_rows(x))
    assert counter.frame_count == 3


def test_dynamic_true_compiles_once_for_sizes_of_two_and_more() -> None:
    fn, counter = counted(scale_rows, dynamic=True)
    for b in (3, 5, 8, 2, 17):
        x = torch.randn(b, 4)
        close(fn(x), scale_rows(x))
    assert counter.frame_count == 1


def test_size_one_is_specialized_and_gets_its_own_graph() -> None:
    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x + y  # broadcasting differs when a size is 1

    jitted, counter = counted(fn, dynamic=True)
    for bx, by in ((4, 4), (6, 6), (1, 6), (6, 1), (7, 7)):
        x, y = torch.randn(bx, 3), torch.randn(by, 3)
        close(jitted(x, y), fn(x, y))
    assert counter.frame_count == 3


def test_mismatched_sizes_raise_like_eager() -> None:
    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x * y

    jitted, _ = counted(fn, dynamic=True)
    x, y = torch.randn(4), torch.randn(4)
    close(jitted(x, y), fn(x, y))
    with pytest.raises(RuntimeError, match="size of tensor"):
        jitted(torch.randn(4), torch.randn(5))


def test_mark_dynamic_makes_the_first_compile_symbolic() -> None:
    fn, counter = counted(scale_rows)
    x = torch.randn(6, 4)
    framejit.mark_dynamic(x, 0)
    close(fn(x), scale_rows(x))
    for b in (2, 3, 11):
        y = torch.randn(b, 4)
        close(fn(y), scale_rows(y))
    assert counter.frame_count == 1


def test_mark_dynamic_rejects_bad_arguments() -> None:
    with pytest.raises(TypeError, match="expects a tensor"):
        framejit.mark_dynamic([1, 2], 0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="dim must be an int"):
        framejit.mark_dynamic(torch.randn(2), "0")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="out of range"):
        framejit.mark_dynamic(torch.randn(2, 3), 2)


def test_dynamic_option_is_checked() -> None:
    with pytest.raises(TypeError, match="dynamic must be None, True or False"):
        framejit.jit(scale_rows, dynamic="yes")


# --- symbolic arithmetic and guards ---------------------------------------------------------------


def test_branch_on_a_size_guards_the_condition_not_the_value() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] > 4:
            return x * 2
        return x - 1

    jitted, counter = counted(fn, dynamic=True)
    for b in (5, 6, 9, 2, 3, 4, 12):
        x = torch.randn(b)
        close(jitted(x), fn(x))
    assert counter.frame_count == 2  # one graph per side of the condition


def test_python_needing_the_value_specializes_with_a_guard() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        out = x[0]
        for i in range(1, x.shape[0]):  # range() needs a plain int
            out = out + x[i] * i
        return out

    jitted, counter = counted(fn, dynamic=True)
    for b in (3, 4, 3, 5):
        x = torch.randn(b, 2)
        close(jitted(x), fn(x))
    assert counter.frame_count == 3


def test_size_arithmetic_stays_symbolic() -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, int, torch.Size]:
        b, t, c = x.size()
        half = t // 2
        y = x[:, :half].reshape(b, half * c)
        z = torch.zeros(b, t - half, c).flatten(1)
        n = x.numel() + len(x) - x.size(-1) % 3
        return torch.cat([y, z], dim=1) / math.sqrt(c), n, x.shape[1:]

    jitted, counter = counted(fn, dynamic=True)
    for b, t in ((2, 4), (3, 7), (5, 6), (4, 9)):  # t // 2 == 1 would be a new graph
        x = torch.randn(b, t, 3)
        close(jitted(x), fn(x))
    assert counter.frame_count == 1


def test_returned_sizes_are_computed_per_call() -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, int]:
        return x.sum(), x.shape[0] * 2 + 1

    jitted, counter = counted(fn, dynamic=True)
    for b in (3, 8, 21):
        x = torch.randn(b)
        close(jitted(x), fn(x))
    assert counter.frame_count == 1


def test_factories_and_new_tensors_take_symbolic_sizes() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        b, t = x.shape
        pos = torch.arange(t, dtype=x.dtype)
        mask = torch.ones(t, t).tril()
        pad = x.new_zeros(b, 1)
        return torch.cat([x @ mask + pos, pad], dim=1).expand(2, b, t + 1)

    jitted, counter = counted(fn, dynamic=True)
    for b, t in ((2, 3), (4, 5), (3, 8)):
        x = torch.randn(b, t)
        close(jitted(x), fn(x))
    assert counter.frame_count == 1


def test_non_contiguous_inputs_stay_static_and_right() -> None:
    fn, counter = counted(scale_rows, dynamic=True)
    for b in (3, 5, 7):
        x = torch.randn(4, b).t()
        close(fn(x), scale_rows(x))
    assert counter.frame_count == 3


def test_guards_log_prints_size_expressions(capsys: pytest.CaptureFixture[str]) -> None:
    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x + y

    framejit.set_logs(guards=True)
    try:
        jitted, _ = counted(fn, dynamic=True)
        jitted(torch.randn(4, 3), torch.randn(4, 3))
    finally:
        framejit.set_logs()
    err = capsys.readouterr().err
    assert "L['x'].size()[0] >= 2" in err
    assert "L['x'].size()[0] == L['y'].size()[0]" in err
    assert "size=(*, *), contiguous=True" in err


def test_recompiles_log_names_the_size_guard(capsys: pytest.CaptureFixture[str]) -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return x * 2 if x.shape[0] % 2 == 0 else x

    framejit.set_logs(recompiles=True)
    try:
        jitted, _ = counted(fn, dynamic=True)
        for b in (4, 5):
            x = torch.randn(b)
            close(jitted(x), fn(x))
    finally:
        framejit.set_logs()
    err = capsys.readouterr().err
    assert "% 2" in err and "actual: L['x'].size()[0] = 5" in err


# --- through the AOT stage ------------------------------------------------------------------------


class Block(torch.nn.Module):
    def __init__(self, d: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.ln = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln(x)).split(c, dim=-1)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        x = x + self.proj(y)
        return x + self.mlp(x)


SHAPES = [(2, 5), (3, 7), (4, 9), (2, 3), (5, 8), (7, 6), (3, 2), (6, 11), (2, 16), (4, 4)]


@pytest.mark.parametrize("training", [False, True], ids=["inference", "training"])
def test_transformer_over_ten_shapes_compiles_at_most_twice(training: bool) -> None:
    torch.manual_seed(0)
    model = Block()
    compiled_model = framejit.jit(model, backend="aot_eager")
    counts: list[int] = []
    for b, t in SHAPES:
        x = torch.randn(b, t, 16, requires_grad=training)
        got, want = compiled_model(x), model(x)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
        if training:
            g = torch.randn_like(want)
            got_grads = torch.autograd.grad(got, [x, *model.parameters()], g)
            want_grads = torch.autograd.grad(want, [x, *model.parameters()], g)
            for a, w in zip(got_grads, want_grads):
                torch.testing.assert_close(a, w, rtol=1e-4, atol=1e-5)
        counts.append(len(compiled_model._jit_forward.__func__.cache.entries))
    assert counts == [1] + [2] * 9, counts  # ten batch sizes and sequence lengths, two graphs
    x = torch.randn(1, 6, 16)  # size 1 is specialized: one more graph, then it is reused
    torch.testing.assert_close(compiled_model(x), model(x), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(compiled_model(x), model(x), rtol=1e-4, atol=1e-5)
    assert len(compiled_model._jit_forward.__func__.cache.entries) == 3


def test_aot_returns_sizes_and_views_with_symbolic_shapes() -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
        y = x.relu()
        return y.view(-1), x.transpose(0, 1), y.shape[0] * 3

    jitted = framejit.jit(fn, backend="aot_eager", dynamic=True)
    for b in (2, 5, 9):
        x = torch.randn(b, 3)
        close(jitted(x), fn(x))


def test_aot_mutation_of_a_symbolic_input() -> None:
    def fn(x: torch.Tensor, buf: torch.Tensor) -> torch.Tensor:
        buf.mul_(0.5).add_(x.sum(0))
        return x * buf

    jitted = framejit.jit(fn, backend="aot_eager", dynamic=True)
    for b in (2, 5, 9):
        x = torch.randn(b, 4)
        buf1, buf2 = torch.randn(b, 4), None
        buf2 = buf1.clone()
        close(jitted(x, buf1), fn(x, buf2))
        close(buf1, buf2)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 9), st.integers(1, 6)), min_size=1, max_size=6))
def test_any_sequence_of_sizes_matches_eager(sizes: list[tuple[int, int]]) -> None:
    framejit.reset()

    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        b, n = x.shape
        h = (x @ w).relu()
        if n > 3:
            h = h * n
        return h.reshape(b * w.shape[1]).view(b, -1).sum(-1) / b

    jitted = framejit.jit(fn, backend="aot_eager")
    for b, n in sizes:
        x, w = torch.randn(b, n), torch.randn(n, 3)
        close(jitted(x, w), fn(x, w))


# --- whole-script mode (the frame hook) -----------------------------------------------------------

hook = pytest.importorskip("framejit.frontend.hook")
needs_hook = pytest.mark.skipif(
    hook.unavailable_reason() != "", reason="the frame hook is not built for this Python"
)


@needs_hook
def test_hook_path_is_automatically_dynamic() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x.reshape(-1, 2).sum(1) * x.shape[0]

    counter = CompileCounter()
    with framejit.enabled(backend=counter):
        results = [(b, f(torch.ones(b, 4))) for b in (3, 5, 6, 9, 12)]
    for b, got in results:
        torch.testing.assert_close(got, torch.ones(b, 4).reshape(-1, 2).sum(1) * b)
    assert counter.frame_count == 2


@needs_hook
def test_hook_path_honours_config_dynamic(monkeypatch: pytest.MonkeyPatch) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x.cos() + x.numel()

    monkeypatch.setattr(framejit.config, "dynamic", False)
    counter = CompileCounter()
    with framejit.enabled(backend=counter):
        for b in (3, 5, 6):
            torch.testing.assert_close(f(torch.ones(b)), torch.ones(b).cos() + b)
    assert counter.frame_count == 3


# --- int arguments -------------------------------------------------------------------------------


def take_first(x: torch.Tensor, n: int) -> tuple[torch.Tensor, int]:
    y = x[:, :n] * n
    return y.sum(1) + torch.arange(n).sum(), n * 2 - 1


def test_an_int_argument_that_changes_becomes_a_graph_input() -> None:
    fn, counter = counted(take_first)
    x = torch.randn(4, 16)
    for n in (3, 5, 4, 9, 12, 2, 7):
        close(fn(x, n), take_first(x, n))
    assert counter.frame_count == 2
    placeholders = [n for n in counter.graphs[-1].graph.nodes if n.op == "placeholder"]
    assert any(isinstance(p.meta["val"], torch.SymInt) for p in placeholders)


def test_int_arguments_zero_and_one_stay_specialized() -> None:
    fn, counter = counted(take_first, dynamic=True)
    x = torch.randn(3, 6)
    for n in (4, 1, 0, 5, 1):
        close(fn(x, n), take_first(x, n))
    assert counter.frame_count == 3


def test_dynamic_false_specializes_ints() -> None:
    fn, counter = counted(take_first, dynamic=False)
    x = torch.randn(3, 8)
    for n in (4, 5, 6):
        close(fn(x, n), take_first(x, n))
    assert counter.frame_count == 3


@pytest.mark.parametrize("training", [False, True], ids=["inference", "training"])
def test_int_argument_through_the_aot_stage(training: bool) -> None:
    def fn(x: torch.Tensor, n: int, w: torch.Tensor) -> torch.Tensor:
        return (x[:, :n] @ w[:n]).relu() * n

    jitted = framejit.jit(fn, backend="aot_eager", dynamic=True)
    for n in (3, 6, 2, 5):  # n == 8 would take the whole row: another guard, another graph
        x = torch.randn(4, 8, requires_grad=training)
        w = torch.randn(8, 3, requires_grad=training)
        got, want = jitted(x, n, w), fn(x, n, w)
        close(got, want)
        if training:
            for a, b in zip(
                torch.autograd.grad(got.sum(), [x, w]), torch.autograd.grad(want.sum(), [x, w])
            ):
                close(a, b)
    assert len(jitted.cache.entries) == 1


# --- float arguments ------------------------------------------------------------------------------


def test_a_float_passed_through_stops_recompiling() -> None:
    """`return loss.item()` after a break hands the float to a resume function: once its value
    has changed, only its type is guarded while the code merely passes it on."""
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    twin = torch.nn.Linear(4, 1)
    twin.load_state_dict(model.state_dict())
    twin_opt = torch.optim.SGD(twin.parameters(), lr=0.1)

    def step(m: torch.nn.Module, o: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor):
        loss = torch.nn.functional.mse_loss(m(x), y)
        o.zero_grad()
        loss.backward()
        o.step()
        return loss.item()

    jitted = framejit.jit(step, backend="eager")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(12):
            x, y = torch.randn(8, 4), torch.randn(8, 1)
            assert jitted(model, opt, x, y) == step(twin, twin_opt, x, y)
    assert not [w for w in caught if "recompile_limit" in str(w.message)]
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(p, q)


def log_every_other_step(x: torch.Tensor, steps: int):
    total = 0.0
    for step in range(steps):
        x = x * 0.9 + 0.05
        loss = x.sum()
        if step % 2 == 0:
            print(step, round(loss.item(), 5))  # a break, then a rounded float printed
        total += loss.item()  # a break, then a running Python total
    return x, total


def test_a_running_total_and_rounded_values_read_at_breaks_need_no_guard(capsys) -> None:
    # `total + value` and `round(value, 5)` of floats read at breaks are computed by the code
    # after the graph: the loop's resume function is not recompiled for each new value (it
    # reached the recompile limit after 8 steps before), and prints and sums as eager does
    counter = CompileCounter()
    jitted = framejit.jit(log_every_other_step, backend=counter)
    for steps in (20, 20):
        got = jitted(torch.ones(3), steps)
        printed = capsys.readouterr().out
        want = log_every_other_step(torch.ones(3), steps)
        assert capsys.readouterr().out == printed
        torch.testing.assert_close(got[0], want[0])
        assert got[1] == want[1]  # the same float, bit for bit
    assert counter.frame_count <= 5


def total_then_uses(x: torch.Tensor, total: float, limit: float):
    total += (x * 2).sum().item()
    doubled = total * 2.0 - 1.0  # deferred too
    if doubled > limit:  # a condition needs the value: guarded, as without deferral
        return x * doubled, doubled, round(total)  # round() with no digits: computed now
    return x - doubled, abs(doubled), round(total, 3)


def test_deferred_floats_are_computed_where_their_value_is_needed() -> None:
    jitted = framejit.jit(total_then_uses, backend="eager")
    x = torch.randn(4)
    for total, limit in [
        (0.0, 0.0),
        (1.5, 0.0),
        (-3.25, 100.0),
        (float("inf"), float("inf")),
        (2.0, 1e9),
    ]:
        got, want = jitted(x, total, limit), total_then_uses(x, total, limit)
        torch.testing.assert_close(got[0], want[0])
        assert got[1:] == want[1:] and type(got[2]) is type(want[2])


class Accumulator:
    def __init__(self) -> None:
        self.total = 0.0
        self.history: list[float] = []


def accumulate(x: torch.Tensor, acc: Accumulator) -> torch.Tensor:
    v = (x * 2).sum().item()
    acc.total += v  # a deferred sum over the attribute's old value...
    acc.total += 1.5
    acc.history.append(acc.total * 1.0)  # ...rebuilt after the write to the attribute
    mean = x.mean().item()  # a break: the writes above are replayed here
    acc.total = acc.total - mean
    return x + 1


def total_inside_try(x: torch.Tensor, total: float):
    total += x.sum().item()
    other = total * 2.0  # reads the argument `total` after the break below rewrites its slot
    try:
        total = total - x.mean().item()  # a break inside a try: locals stored in their slots
    except ValueError:
        pass
    return total, other


def test_deferred_floats_read_the_values_from_before_the_writes() -> None:
    jitted = framejit.jit(accumulate, backend="eager")
    mine, theirs = Accumulator(), Accumulator()
    for _ in range(5):
        x = torch.randn(3)
        torch.testing.assert_close(jitted(x, mine), accumulate(x, theirs))
    assert (mine.total, mine.history) == (theirs.total, theirs.history)
    jitted = framejit.jit(total_inside_try, backend="eager")
    for k in range(5):
        x = torch.randn(3)
        assert jitted(x, k * 1.5) == total_inside_try(x, k * 1.5)


def test_a_float_the_graph_uses_is_still_guarded_by_value() -> None:
    def fn(x: torch.Tensor, scale: float, total: float) -> tuple[torch.Tensor, float]:
        return x * scale, total + 1.0

    jitted = framejit.jit(fn, backend="eager")
    x = torch.randn(3)
    for scale, total in [(2.0, 0.0), (3.0, 1.0), (3.0, 2.0), (0.5, 7.0), (2.0, 8.0)]:
        got, want = jitted(x, scale, total), fn(x, scale, total)
        torch.testing.assert_close(got[0], want[0])
        assert got[1] == want[1]


def scaled_and_clamped(x: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.clamp(x * scale + scale, max=scale).lerp(x, scale) / scale


def test_a_float_scaling_a_tensor_becomes_a_graph_input() -> None:
    """A float argument that changed between calls and is only an operand of pointwise ops is
    a symbolic graph input: one more compile serves every value (it used to recompile per
    value until the recompile limit)."""
    fn, counter = counted(scaled_and_clamped)
    x = torch.randn(5)
    for scale in [0.5, 0.75, 1.25, 2.0, 3.5, -0.25, 7.0, 1e-3]:
        close(fn(x, scale), scaled_and_clamped(x, scale))
    assert counter.frame_count == 2
    placeholders = [n for n in counter.graphs[-1].graph.nodes if n.op == "placeholder"]
    assert [type(n.meta["val"]).__name__ for n in placeholders] == ["FakeTensor", "SymFloat"]


RNN_W = torch.randn(8, 8) * 0.3


def rnn_step(h: torch.Tensor, xs: list[torch.Tensor], t: int) -> torch.Tensor:
    return torch.tanh(h @ RNN_W + xs[t]) + xs[2]


def test_a_list_indexed_by_a_symbolic_int_reads_the_item_at_each_call() -> None:
    """A step function called with t = 0, 1, 2, ... reading `xs[t]`: once `t` is symbolic the
    item is read through `L['xs'][L['t']]` at each call (guarded there, with 0 <= t < len(xs)),
    so the steps share a graph; it recompiled per `t` up to the limit, then ran eagerly."""
    fn, counter = counted(rnn_step)
    xs = [torch.randn(1, 8) for _ in range(30)]
    h = torch.ones(1, 8)
    for t in range(30):
        close(fn(h, xs, t), rnn_step(h, xs, t))
    # t = 0 and 1 (specialized), t = 2 (xs[t] is xs[2]: an identity guard), t >= 3
    assert counter.frame_count == 4
    with pytest.raises(IndexError):  # out of range: eager's error
        fn(h, xs, 30)
    other = list(xs)
    other[12] = torch.randn(3, 8)  # the item at t has another shape: its guard fails
    before = counter.frame_count
    close(fn(h, other, 12), rnn_step(h, other, 12))
    assert counter.frame_count > before
    close(fn(h, other, 13), rnn_step(h, other, 13))
    shorter = xs[:20]  # another length
    close(fn(h, shorter, 5), rnn_step(h, shorter, 5))


def rnn_step_with_neighbours(h: torch.Tensor, xs: list[torch.Tensor], t: int) -> torch.Tensor:
    return torch.tanh(h @ RNN_W + xs[t] - xs[t - 1] * 0.5) + xs[t + 1]


def unroll(h: torch.Tensor, xs: list[torch.Tensor], i: int) -> torch.Tensor:
    if i == len(xs):
        return h
    return unroll(torch.tanh(h * 0.5 + xs[i]), xs, i + 1)


def test_a_list_indexed_by_a_symbolic_int_plus_a_constant() -> None:
    """`xs[t - 1]`, `xs[t + 1]` read `L['xs'][(L['t'] + k)]` at each call; a recursion down a
    list (each inlined level reads `xs[i + k]`) then shares its graphs between calls that
    start at other `i`."""
    fn, counter = counted(rnn_step_with_neighbours)
    xs = [torch.randn(1, 8) for _ in range(20)]
    h = torch.ones(1, 8)
    for t in range(1, 19):
        close(fn(h, xs, t), rnn_step_with_neighbours(h, xs, t))
    assert counter.frame_count <= 3, counter.frame_count  # 8 (the limit) before
    with pytest.raises(IndexError):  # t + 1 out of range: eager's error
        fn(h, xs, 19)
    fn, counter = counted(unroll)
    xs = [torch.randn(3) for _ in range(200)]
    for start in (0, 1, 2, 3, 50, 120):
        close(fn(torch.zeros(3), xs, start), unroll(torch.zeros(3), xs, start))
    assert counter.frame_count <= 4, counter.frame_count  # 6 before


def negated_alpha(x: torch.Tensor, g: torch.Tensor, lr: float, wd: float) -> Any:
    return (
        x.add(g, alpha=-lr),
        x.sub(-lr),
        x.mul(1 - lr),
        x.mul(lr * wd + 0.5),
        x.clamp(max=2 * lr),
        x.add(g, alpha=abs(lr - 1)),
        x.mul(lr / 10).add(g, alpha=(1 - lr) / 4),
        1 - lr,
        lr / 3,
    )


def test_arithmetic_on_float_operands_stays_symbolic(caplog: pytest.LogCaptureFixture) -> None:
    """`alpha=-lr` (SGD's update with a scheduler's lr), `x.mul(1 - lr)`, `lr * wd + 0.5`, `abs(lr -
    1)`, `lr / 10`: arithmetic on float graph inputs is nodes of the graph, computed in Python
    floats as eager computes it, so each new value reuses the graph; the bounds eager's checked
    conversions need are guards on the inputs (`abs(lr) <= 1e+38`)."""

    def only_negated(x: torch.Tensor, g: torch.Tensor, lr: float) -> Any:
        return x.add(g, alpha=-lr), x.sub(-lr), -lr

    x, g = torch.randn(4), torch.randn(4)
    fn, counter = counted(only_negated)
    for lr in [0.1, 0.09, 0.081, 0.0729, 1e-3, 3.5]:
        got, want = fn(x, g, lr), only_negated(x, g, lr)
        close(list(got[:2]), list(want[:2]))
        assert got[2] == want[2]
    assert counter.frame_count == 2
    fn, counter = counted(negated_alpha)
    framejit.logs.add_handler(caplog.handler)  # framejit's logger does not propagate
    try:
        for lr in [0.1, 0.09, 0.081, 0.0729, 1e-3, 3.5, -2.0]:
            for wd in [0.01, 0.02]:
                got, want = fn(x, g, lr, wd), negated_alpha(x, g, lr, wd)
                for a, b in zip(got[:-2], want[:-2]):
                    assert torch.equal(a, b), (lr, wd)
                assert got[-2:] == want[-2:]
    finally:
        framejit.logs.remove_handler(caplog.handler)
    assert counter.frame_count == 3  # lr and wd by value, lr symbolic, both symbolic
    # every entry's guards held for the arguments they were built from
    assert not [r for r in caplog.records if r.name.startswith("framejit")], caplog.text


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_checked_float_expressions_raise_as_eager_beyond_their_dtype(
    backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    """`x.half().clamp(max=1 - lr)`: eager raises where `1 - lr` does not fit float16. The
    symbolic expression's inputs are bounded by a guard (`abs(lr) <= 10000.0`); a value past
    it compiles again with the input pinned (a guard `L['lr'] == 20000.3` over the float's
    symbol, which must not be read as an integer: `Eq(n, 20000.3)` of an integer `n` is False,
    a guard that failed for the value it was made from), and where it does not fit, eager
    raises."""

    def fn(x: torch.Tensor, lr: float) -> Any:
        return x.clamp(max=1 - lr), x.add(x, alpha=lr * 2)

    x = torch.randn(4).half()
    jitted = framejit.jit(fn, backend=backend)
    framejit.logs.add_handler(caplog.handler)
    try:
        for lr in [0.5, 0.25, 100.0, 20000.1 + 0.2, 20000.1 + 0.2, -70000.0, 40000.0, 0.3, 1e5]:
            try:
                want = fn(x, lr)
            except RuntimeError as exc:
                with pytest.raises(RuntimeError, match="without overflow"):
                    jitted(x, lr)
                assert "without overflow" in str(exc)
                continue
            for a, b in zip(jitted(x, lr), want):
                assert torch.equal(a, b), lr
    finally:
        framejit.logs.remove_handler(caplog.handler)
    assert not [r for r in caplog.records if r.name.startswith("framejit")], caplog.text


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_float_graph_input_trains_as_eager(backend: str) -> None:
    def fn(x: torch.Tensor, w: torch.Tensor, scale: float) -> torch.Tensor:
        return ((x @ w) * scale - scale).relu().sum()

    jitted = framejit.jit(fn, backend=backend)
    x = torch.randn(4, 3)
    for scale in [0.5, 1.5, 2.5, -1.0]:
        w1 = torch.randn(3, 2, requires_grad=True)
        w2 = w1.detach().clone().requires_grad_(True)
        got, want = jitted(x, w1, scale), fn(x, w2, scale)
        close(got, want)
        got.backward()
        want.backward()
        close(w1.grad, w2.grad)


def test_a_float_graph_input_with_view_outputs_is_compiled(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Output views of static sizes are rebuilt as views although the graph takes a
    symbolic float (only views of symbolic sizes make the AOT stage run the graph as is)."""

    def fn(x: torch.Tensor, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
        y = x * scale
        return y.t(), y[1:]

    jitted = framejit.jit(fn, backend="aot_eager")
    x = torch.randn(3, 4)
    with caplog.at_level(logging.INFO, logger="framejit.backend"):
        for scale in [0.5, 1.5, 2.5]:
            got, want = jitted(x, scale), fn(x, scale)
            close(got, want)
            assert got[0]._base is got[1]._base is not None
    assert "running the captured graph as it is" not in caplog.text


def test_a_float_graph_input_still_guards_what_python_reads() -> None:
    """The same float also read by Python (a branch, an int conversion) is pinned by a value
    guard there, and special values (inf, nan) are guarded by value."""

    def fn(x: torch.Tensor, scale: float) -> torch.Tensor:
        y = x * scale
        if scale > 1.0:
            return y + 1
        return y - int(scale * 10)

    jitted = framejit.jit(fn, backend="aot_eager")
    x = torch.randn(4)
    for scale in [0.5, 0.7, 1.5, 2.5, 0.2, math.inf, 0.3, math.nan, 1.2]:
        try:
            want = fn(x, scale)
        except (OverflowError, ValueError) as exc:  # int(inf), int(nan)
            with pytest.raises(type(exc)):
                jitted(x, scale)
            continue
        close(jitted(x, scale), want)


TEMPERATURE = 1.0


def sample_logits(x: torch.Tensor) -> torch.Tensor:
    return (x / TEMPERATURE).softmax(-1)


def test_a_global_float_or_an_optimizers_lr_becomes_a_graph_input() -> None:
    """Floats read through a global or an attribute and item chain (a scheduler's lr in
    `param_groups`) follow automatic dynamic like float arguments."""
    global TEMPERATURE
    fn, counter = counted(sample_logits)
    x = torch.randn(2, 5)
    for t in [1.0, 0.7, 0.5, 1.3, 2.0, 0.9]:
        TEMPERATURE = t
        close(fn(x), sample_logits(x))
    TEMPERATURE = 1.0
    assert counter.frame_count == 2

    opt = torch.optim.SGD([torch.nn.Parameter(torch.randn(3))], lr=0.1)

    def scaled_step(g: torch.Tensor) -> torch.Tensor:
        return g * opt.param_groups[0]["lr"]

    fn, counter = counted(scaled_step)
    g = torch.randn(3)
    for lr in [0.1, 0.09, 0.05, 0.01, 0.2]:
        opt.param_groups[0]["lr"] = lr
        close(fn(g), scaled_step(g))
    assert counter.frame_count == 2


def test_float_arguments_stay_constants_under_dynamic_false() -> None:
    fn, counter = counted(scaled_and_clamped, dynamic=False)
    x = torch.randn(5)
    for scale in [0.5, 0.75, 1.25]:
        close(fn(x, scale), scaled_and_clamped(x, scale))
    assert counter.frame_count == 3


def flip_at_random(x: torch.Tensor, p: float) -> torch.Tensor:
    r = random.random()  # a graph break: the float reaches a resume function
    return x.flip(-1) if r < p else x


def test_a_float_compared_with_a_number_is_guarded_on_the_outcome(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # augmentation and teacher forcing: only `r < p` matters, not r's value (it used to
    # recompile on every call until the recompile limit)
    jitted = framejit.jit(flip_at_random, backend="eager")
    x = torch.arange(4.0)
    framejit.set_logs(recompiles=True)
    try:
        random.seed(0)
        got = [jitted(x, 0.5) for _ in range(30)]
    finally:
        framejit.set_logs()
    random.seed(0)
    for g in got:
        torch.testing.assert_close(g, flip_at_random(x, 0.5))
    recompiles = [line for line in capsys.readouterr().err.splitlines() if "recompiling" in line]
    assert len(recompiles) <= 2, recompiles  # the value, then each outcome once
    assert "(L['___stack0'] < 0.5) is" in recompiles[-1]


class CountsCalls(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        y = self.lin(x)
        return y * 2 if self.calls % 5 == 0 else y


STEP = 0


def counts_globally(x: torch.Tensor) -> torch.Tensor:
    global STEP
    STEP += 1
    return x + STEP


@pytest.mark.parametrize("backend", ["counted", "aot_eager"])
def test_counters_in_attributes_and_globals_stop_recompiling(backend: str) -> None:
    # an int read through an attribute or a global that changes between calls becomes a
    # symbolic input, as int arguments do: 2 recompiles (0 and 1 are specialized), not 20
    global STEP
    torch.manual_seed(0)
    model, twin = CountsCalls(), CountsCalls()
    twin.load_state_dict(model.state_dict())
    counter = CompileCounter()
    jitted = framejit.jit(model, backend=counter if backend == "counted" else backend)
    x = torch.randn(2, 3)
    for _ in range(20):
        torch.testing.assert_close(jitted(x), twin(x))
    assert model.calls == twin.calls == 20
    STEP = 0
    jitted_fn = framejit.jit(counts_globally, backend=counter if backend == "counted" else backend)
    got = [jitted_fn(x) for _ in range(12)]
    assert STEP == 12
    for i, g in enumerate(got, start=1):
        torch.testing.assert_close(g, x + i)
    if backend == "counted":  # calls 1, 2, 3 and the % 5 outcome; calls 1, 2, 3
        assert counter.frame_count <= 7


def bumps_a_counter_between_breaks(state: Any, x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    print(end="")  # a graph break: what follows is a resume function doing only `+= 1`
    state.step += 1
    return y


def test_a_resume_that_only_counts_makes_no_graph() -> None:
    state = types.SimpleNamespace(step=0)
    counter = CompileCounter()
    jitted = framejit.jit(bumps_a_counter_between_breaks, backend=counter)
    x = torch.randn(3)
    for _ in range(6):
        torch.testing.assert_close(jitted(state, x), x * 2)
    assert state.step == 6
    assert counter.op_count == 1  # the multiplication; the counter is Python arithmetic


def split_heads(x, n_head):
    # the library idiom: a torch.Size plus a tuple is the new shape
    new_shape = x.size()[:-1] + (n_head, x.size(-1) // n_head)
    y = x.view(new_shape).transpose(1, 2)
    merged = (4,) + y.shape[2:]
    return y.sum(), merged


def test_size_plus_tuple_keeps_sizes_symbolic():
    counter = CompileCounter()
    jitted = framejit.jit(split_heads, backend=counter)
    for seq in (8, 12, 16, 20):
        x = torch.randn(2, seq, 8)
        got, merged = jitted(x, 2)
        want, want_merged = split_heads(x, 2)
        torch.testing.assert_close(got, want)
        assert merged == want_merged and type(merged) is torch.Size
    assert counter.frame_count == 2  # the first size, then one graph for every length


def test_a_decided_size_condition_held_by_a_variable_stays_in_the_graph() -> None:
    """`done = n >= limit` is decided by `not done` (a guard), and still used afterwards as a
    value: its node must stay in the graph (it was once dropped as soon as it was decided, and
    the graph then failed at run time and ran again eagerly)."""

    def fn(ids, limit, cap):
        n = ids.shape[1]
        done = n >= limit
        if cap is not None and not done and n >= cap:
            done = True
        return torch.full((ids.shape[0],), done, dtype=torch.bool), ids.sum(1) * n

    counter = CompileCounter()
    jitted = framejit.jit(fn, backend=counter, dynamic=True)
    for n in (6, 7, 8, 11):
        ids = torch.ones(2, n, dtype=torch.long)
        got, want = jitted(ids, 11, 2048), fn(ids, 11, 2048)
        for a, b in zip(got, want, strict=True):
            assert torch.equal(a, b)
    assert counter.frame_count <= 2


def pads_to_a_multiple_of_four(x: torch.Tensor) -> torch.Tensor:
    n = x.shape[-1]
    return torch.nn.functional.pad(x, (0, (4 - n % 4) % 4)) * 2


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_pad_computed_from_a_symbolic_size_is_captured(backend: str, capfd: Any) -> None:
    # constant_pad_nd's C++ kernel takes only concrete sizes; its Python decomposition runs
    # instead. Before, a graph break, and torch's fake-tensor logger printed a traceback.
    counter = CompileCounter()
    jitted = framejit.jit(pads_to_a_multiple_of_four, backend=counter, dynamic=True)
    expected_backend = framejit.jit(pads_to_a_multiple_of_four, backend=backend, dynamic=True)
    for n in (3, 5, 6, 8):
        x = torch.randn(2, n)
        torch.testing.assert_close(jitted(x), pads_to_a_multiple_of_four(x))
        torch.testing.assert_close(expected_backend(x), pads_to_a_multiple_of_four(x))
    assert counter.frame_count == 1
    assert "failed while attempting" not in capfd.readouterr().err


def crops_and_pads(x: torch.Tensor) -> torch.Tensor:
    return F.pad(x, (-1, 2)) * 2


def folds(x: torch.Tensor) -> torch.Tensor:
    return F.fold(x, (4, 4), (2, 2)) * 2  # col2im's C++ meta pinned the batch size


_LSTM = torch.nn.LSTM(4, 6, num_layers=2, batch_first=True, bidirectional=True)


def runs_an_lstm(x: torch.Tensor, h0: torch.Tensor) -> torch.Tensor:
    out, (h, c) = _LSTM(x, (h0, h0 * 0.5))
    return out.sum(1)[:, :6] + h[-1] + c[0]


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_kernels_that_refuse_symbolic_sizes_late_are_traced_decomposed(backend: str) -> None:
    # a negative pad (a crop) and nn.LSTM: their C++ fake kernels pin the symbolic sizes to
    # their values, then call storage_offset()/numel() and fail. It was a graph break at every
    # new size (and a recompile per size); the frame is traced again with those ops run
    # through their Python decompositions
    for fn, make in (
        (crops_and_pads, lambda n: (torch.randn(3, n),)),
        (folds, lambda n: (torch.randn(n, 12, 9),)),
        (runs_an_lstm, lambda n: (torch.randn(2, n, 4), torch.randn(4, 2, 6))),
    ):
        counter = CompileCounter()
        counted_fn = framejit.jit(fn, backend=counter)
        jitted = framejit.jit(fn, backend=backend)
        for n in (5, 7, 9, 12):
            args = make(n)
            want = fn(*args)
            close(counted_fn(*args), want)
            got = jitted(*args)
            close(got, want)
            if fn is runs_an_lstm:
                weight = _LSTM.weight_hh_l1_reverse
                (g_got,) = torch.autograd.grad(got.sum(), weight)
                (g_want,) = torch.autograd.grad(want.sum(), weight)
                close(g_got, g_want)
        assert counter.frame_count == 2, fn  # one graph per shape kind: no break


_RECURRENT = {
    "gru_batch_first_bidirectional": torch.nn.GRU(
        4, 6, num_layers=2, batch_first=True, bidirectional=True
    ),
    "gru_time_major": torch.nn.GRU(4, 6),
    "rnn_relu_batch_first": torch.nn.RNN(4, 6, num_layers=2, nonlinearity="relu", batch_first=True),
    "rnn_tanh_bidirectional": torch.nn.RNN(4, 6, bidirectional=True),
}


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("name", sorted(_RECURRENT))
def test_gru_and_rnn_keep_the_length_symbolic(backend: str, name: str) -> None:
    """nn.GRU and nn.RNN (their kernels, C++ and Python, loop over the time steps, pinning
    their number on fakes) compile once for every sequence length and batch size: the output
    shapes follow from the arguments' (rnn.py `recurrent_fake`), in eager's memory order (a
    batch-first output is a transposed view). Outputs, their strides and the gradients match
    eager; it was a graph per length."""
    module = _RECURRENT[name]
    batch_first = module.batch_first
    states = module.num_layers * (2 if module.bidirectional else 1)

    def fn(x: torch.Tensor, h0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out, h = module(x, h0)
        return out * 2, h + 1

    counter = CompileCounter()
    counted = framejit.jit(fn, backend=counter)
    jitted = framejit.jit(fn, backend=backend)
    for t, b in ((5, 2), (7, 3), (9, 4), (12, 5)):  # both dims symbolic at the 2nd call
        x = torch.randn(b, t, 4) if batch_first else torch.randn(t, b, 4)
        h0 = torch.randn(states, b, 6)
        want = fn(x, h0)
        for got in (counted(x, h0), jitted(x, h0)):
            for g, w in zip(got, want):
                close(g, w)
                assert g.stride() == w.stride()
        weight = module.weight_hh_l0
        (g_got,) = torch.autograd.grad(jitted(x, h0)[0].sum(), weight)
        (g_want,) = torch.autograd.grad(want[0].sum(), weight)
        close(g_got, g_want)
    assert counter.frame_count == 2, counter.frame_count  # static, then one symbolic graph


def raises_to_a_big_power(x: torch.Tensor, n: int) -> torch.Tensor:
    q, _ = divmod(n, 7)
    big = (n**30) * x.shape[0]  # a Python big int: beyond int64
    return x + big % 5 + q


def test_a_symbolic_int_raised_beyond_int64_is_computed_from_its_value() -> None:
    # n becomes symbolic at its second value; n ** 30 was an internal error (the ShapeEnv's
    # bound int_oo against the real value), so the frame ran eagerly with a warning
    jitted = framejit.jit(raises_to_a_big_power, backend="eager")
    for n in (10, 23, 11):
        x = torch.ones(3)
        torch.testing.assert_close(jitted(x, n), raises_to_a_big_power(x, n))


class _Env:
    def step(self, state):
        state = state + 1
        print(end="")  # a graph break: the caller's resume function gets the tuple
        return state, float(-state.pow(2).sum()), False


def test_a_float_inside_a_tuple_across_a_break_stops_recompiling():
    # `obs, reward, done = env.step(a)`: the reward changes every step; once a recompile saw
    # it change, the resume function guards only its type, as for a float argument
    env = _Env()

    def episode(x):
        rewards = []
        state = x
        for _ in range(3):
            state, reward, done = env.step(state)
            rewards.append(reward)
        return state, rewards

    jitted, counter = counted(episode)
    for k in range(12):
        x = torch.full((2,), float(k) / 7)
        got, want = jitted(x), episode(x)
        torch.testing.assert_close(got[0], want[0])
        assert got[1] == want[1]
    assert counter.frame_count <= 8, counter.frame_count


_POSITION_READS = {
    "x[t]": lambda x, t: x[t],
    "x[:, t]": lambda x, t: x[:, t],
    "x[t, 1:]": lambda x, t: x[t, 1:],
    "x[..., t]": lambda x, t: x[..., t],
    "x[None, t, ..., 0]": lambda x, t: x[None, t, ..., 0],
    "x[t, :, t]": lambda x, t: x[t, :, t],
    "x[t - 1]": lambda x, t: x[t - 1],
}


@pytest.mark.parametrize("name", list(_POSITION_READS))
def test_an_int_position_in_an_index_stays_symbolic(name: str) -> None:
    # Tensor.__getitem__ would pin the int (a graph per timestep of a scheduler, per position
    # of a static KV cache): positions become `select`s, which keep it symbolic
    fn = _POSITION_READS[name]
    jitted, counter = counted(fn)
    x = torch.randn(6, 5, 4)
    for t in range(1, 4):
        got, want = jitted(x, t), fn(x, t)
        assert torch.equal(got, want) and got.stride() == want.stride()
    assert counter.frame_count == 2  # the first value, then one symbolic graph


def test_an_int_position_written_stays_symbolic() -> None:
    def write(cache: torch.Tensor, pos: int, k: torch.Tensor) -> torch.Tensor:
        cache[:, pos] = k  # a static KV cache
        cache[pos, ..., 0] = 7.0
        return cache

    jitted, counter = counted(write)
    a, b = torch.zeros(6, 5, 4), torch.zeros(6, 5, 4)
    for pos in range(1, 5):
        k = torch.randn(1, 6, 4)  # leading ones beyond the view's dims are dropped, as in eager
        jitted(a, pos, k)
        write(b, pos, k)
        assert torch.equal(a, b)
    assert counter.frame_count == 2  # 1 (0 and 1 are specialized), then one symbolic graph


def test_an_int_position_out_of_range_raises_eagers_error() -> None:
    jitted = framejit.jit(lambda x, t: x[:, t])
    x = torch.randn(3, 4)
    jitted(x, 1), jitted(x, 2)
    for t in (4, -5, 100):
        with pytest.raises(IndexError):
            jitted(x, t)


def test_inference_tensors_get_symbolic_sizes() -> None:
    # a KV cache grown with torch.cat under torch.inference_mode(): its tensors are inference
    # tensors, which kept static sizes (a compile per decoding step until the limit)
    def step(x: torch.Tensor, cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        cache = torch.cat([cache, x], 1)
        return torch.softmax(x @ cache.transpose(1, 2), -1) @ cache, cache

    jitted, counter = counted(step)
    x = torch.randn(2, 1, 8)
    with torch.inference_mode():
        cache = want_cache = torch.randn(2, 1, 8)
        for _ in range(6):
            got, cache = jitted(x, cache)
            want, want_cache = step(x, want_cache)
            assert torch.equal(got, want) and got.is_inference()
    assert counter.frame_count == 2


_RESIZES = {
    "nearest": lambda x: F.interpolate(x, scale_factor=2, mode="nearest") + 1,
    "bilinear": lambda x: F.interpolate(x, scale_factor=1.5, mode="bilinear"),
    "size": lambda x: F.interpolate(x, size=(x.shape[2] * 2, 7), mode="nearest"),
    "unfold": lambda x: F.unfold(x, 2, stride=2).sum(1),
}


@pytest.mark.parametrize("name", list(_RESIZES))
def test_image_sizes_stay_symbolic_through_resizing(name: str) -> None:
    # the C++ kernels' composite path pinned a symbolic size to its value (a compile per image
    # size until the recompile limit); their Python decompositions keep it symbolic
    fn = _RESIZES[name]
    jitted, counter = counted(fn)
    for h in range(8, 20, 2):
        x = torch.randn(2, 3, h, h)
        got, want = jitted(x), fn(x)
        assert torch.equal(got, want) and got.stride() == want.stride()
    assert counter.frame_count == 2


# --- views of a bigger buffer: symbolic sizes, the strides they have ----------------------------


def _row_stats(x: torch.Tensor) -> Any:
    return (x * 2).sum(-1) + x[:, -1], x.softmax(-1)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_growing_slice_of_a_preallocated_buffer_compiles_twice(backend: str) -> None:
    """`buf[:, :n]` (a generated sequence, a static KV cache): non-contiguous, its strides do
    not change with n. Its sizes become symbolic with those strides guarded."""
    counter = CompileCounter()
    fn = framejit.jit(_row_stats, backend=counter if backend == "eager" else backend)
    buf = torch.randn(4, 32)
    for n in range(3, 20):
        close(fn(buf[:, :n]), _row_stats(buf[:, :n]))
    if backend == "eager":
        assert counter.frame_count == 2
        (x,) = [n for n in counter.graphs[-1].graph.nodes if n.op == "placeholder"]
        assert isinstance(x.meta["val"].shape[1], torch.SymInt) and x.meta["val"].stride() == (
            32,
            1,
        )


def test_a_slice_of_a_buffer_of_another_width_recompiles() -> None:
    fn, counter = counted(_row_stats)
    for width in (32, 32, 24, 24):
        buf = torch.randn(4, width)
        for n in (3, 5, 9):
            close(fn(buf[:, :n]), _row_stats(buf[:, :n]))
    # width 32: the first size, then symbolic; width 24: symbolic from its first call on
    assert counter.frame_count == 3


def test_a_transposed_growing_tensor_keeps_its_strides() -> None:
    fn, counter = counted(_row_stats)
    for n in range(3, 10):
        x = torch.randn(n, 4).t()  # (4, n), strides (1, 4) for every n
        close(fn(x), _row_stats(x))
    assert counter.frame_count == 2


def test_in_place_writes_to_growing_slices_reach_the_buffer() -> None:
    def scale(x: torch.Tensor) -> torch.Tensor:
        x.mul_(2)
        return x.sum()

    fn, counter = counted(scale)
    got, want = torch.randn(3, 30), None
    want = got.clone()
    for n in range(3, 12):
        close(fn(got[:, :n]), scale(want[:, :n]))
        close(got, want)
    assert counter.frame_count == 2


# --- shape guards that call functions: torch.sym_float, math.floor, math.ceil ------------------


def _length_penalty(x: torch.Tensor, cur_len: int, prompt_len: int) -> torch.Tensor:
    # beam search's score: an int that grows every step, to a float power (a negative base
    # would make it complex, so the trace guards that it is not)
    return x / ((cur_len + 1 - prompt_len) ** 1.5)


def _floor_third(x: torch.Tensor, n: int) -> torch.Tensor:
    return x[: math.floor(n / 3)] * 2


def _ceil_third(x: torch.Tensor, n: int) -> torch.Tensor:
    return x[: math.ceil(n / 3)] * 2


@pytest.mark.parametrize("fn", [_length_penalty, _floor_third, _ceil_third])
def test_shape_guards_that_call_functions_hold_on_the_next_call(fn: Any) -> None:
    """The guard of `(n - k) ** 1.5` reads `torch.sym_float(...) >= 0.0`, a slice by
    `math.floor(n / 3)` is bounded by `math.floor(...) <= len`: the guard function must see
    `torch` and `math`. It did not (a NameError, read as a failed guard): every new value of
    the int recompiled, up to the limit."""
    jitted, counter = counted(fn)
    x = torch.randn(40)
    for n in range(8, 30):
        args = (x, n, 6) if fn is _length_penalty else (x, n)
        close(jitted(*args), fn(*args))
    assert counter.frame_count == 2  # the first value, then one symbolic graph
    assert len(jitted.cache.entries) == 2


def test_guards_that_do_not_hold_for_their_own_arguments_are_an_internal_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Right after a compile its guards are checked on the arguments they were built from; a
    guard written wrong is framejit's bug: raised under raise_internal_errors (as in tests),
    otherwise said in the `guards` log, and the call still gives eager's answer."""
    from framejit.frontend import convert

    real = convert.compile_guards

    def broken(*args: Any, **kwargs: Any) -> Any:
        compiled = real(*args, **kwargs)
        monkeypatch.setattr(compiled, "check", lambda *a: False)
        return compiled

    monkeypatch.setattr(convert, "compile_guards", broken)
    fn = framejit.jit(_floor_third)
    x = torch.randn(40)
    with pytest.raises(AssertionError, match="do not hold for the arguments they were built"):
        fn(x, 9)
    framejit.reset()
    framejit.config.raise_internal_errors = False
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    framejit.logs.add_handler(handler)
    try:
        close(framejit.jit(_floor_third)(x, 9), _floor_third(x, 9))
    finally:
        framejit.logs.remove_handler(handler)
    assert any("do not hold" in r.getMessage() for r in records)


def test_nbytes_is_symbolic_with_the_sizes() -> None:
    """`x.nbytes` was read off the fake tensor as a constant: an internal error once its
    sizes were symbolic (the frame then ran eagerly)."""

    def fn(x: torch.Tensor) -> tuple:
        return x * 2, x.nbytes, x.t().nbytes

    jitted, counter = counted(fn)
    for n in (2, 4, 6, 9):
        x = torch.randn(n, 3)
        got, want = jitted(x), fn(x)
        close(got[0], want[0])
        assert got[1:] == want[1:] == (n * 12, n * 12)
    assert counter.frame_count == 2


def test_a_symbolic_size_plus_a_constant_size_stays_a_size() -> None:
    """torch.distributions' `batch_shape + event_shape` (Independent, `rsample((n,))`): a
    symbolic Size plus the constant `torch.Size([])` broke once sizes were symbolic."""
    import torch.distributions as D

    def fn(mu: torch.Tensor, s: torch.Tensor) -> tuple:
        d = D.Independent(D.Normal(mu, s, validate_args=False), 1, validate_args=False)
        shape = mu.shape + torch.Size([]) + torch.Size([2])
        return d.log_prob(mu), d.rsample((3,)).shape, shape, type(shape)

    jitted, counter = counted(fn)
    for n in (4, 6, 8, 9):
        mu, s = torch.randn(n, 2), torch.ones(n, 2)
        got, want = jitted(mu, s), fn(mu, s)
        close(got[0], want[0])
        assert got[1:] == want[1:]
    assert counter.frame_count == 2


def test_a_symbolic_size_repeated_is_a_size() -> None:
    def fn(x: torch.Tensor) -> tuple:
        return x + 1, x.shape * 2, 2 * x.shape, [x, 1] * 2

    jitted, counter = counted(fn)
    for n in (2, 3, 4, 5):
        x = torch.randn(n, 3)
        got, want = jitted(x), fn(x)
        close(got[0], want[0])
        assert got[1:3] == want[1:3] and type(got[1]) is type(got[2]) is torch.Size
        assert len(got[3]) == 4 and got[3][1] == 1
    assert counter.frame_count == 2


def _suppressed(x: torch.Tensor) -> torch.Tensor:
    import contextlib

    y = x + 1
    with contextlib.suppress(ZeroDivisionError):
        y = y * (1 / (x.shape[0] - 2))
    return y


def _caught(x: torch.Tensor, n: int) -> torch.Tensor:
    try:
        k = x.shape[0] // (n - 3) + x.shape[0] % (n - 3)
    except ZeroDivisionError as err:
        k = len(str(err))
    return x * k


def _true_division(x: torch.Tensor, n: int) -> torch.Tensor:
    return x * (1 / (n - x.shape[0]))


@pytest.mark.parametrize(
    "fn, args",
    [
        (_suppressed, [(n,) for n in (1, 2, 3, 4, 2, 5)]),
        (_caught, [(4, n) for n in (5, 3, 4, 6, 3, 7)]),
        (_true_division, [(3, n) for n in (5, 3, 4, 6, 3)]),
    ],
    ids=["suppress", "except", "raises"],
)
def test_division_by_a_symbolic_size_decides_zero_with_a_guard(fn: Any, args: list[Any]) -> None:
    # the first symbolic trace sees a divisor of 0 and takes the handler's path (or raises):
    # that entry must not serve the calls where it is not 0 (nor the other entry a 0)
    jitted = framejit.jit(fn, backend="eager")
    for size, *rest in args:
        x = torch.arange(1.0, size + 1)
        try:
            want = fn(x, *rest)
        except ZeroDivisionError as err:
            with pytest.raises(ZeroDivisionError, match=str(err)):
                jitted(x, *rest)
            continue
        torch.testing.assert_close(jitted(x, *rest), want)

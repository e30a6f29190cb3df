"""The breadth of real Python: side effects replayed after the graph, super(), grad-mode blocks,
generators, recurrent modules, hooks, recursion, and the small language features models use.

Every case compares with eager on real tensors over two calls and asserts the graph count.
"""

from __future__ import annotations

import abc
import collections
import dataclasses
import enum
import functools
import itertools
import logging
import math
import operator
import sys
import types
import typing
import warnings
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import framejit
from framejit.testing import CompileCounter


def same(a, b) -> None:
    if isinstance(a, torch.Tensor):
        torch.testing.assert_close(a, b)
        assert a.requires_grad == b.requires_grad
    elif isinstance(a, (tuple, list, collections.deque)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            same(x, y)
    elif isinstance(a, dict):
        assert type(a) is type(b) and list(a.keys()) == list(b.keys())
        for k in a:
            same(a[k], b[k])
    else:
        assert a == b


def check(fn, *args, graphs: int | None = 1, calls: int = 2):
    counter = CompileCounter()
    jitted = framejit.jit(fn, backend=counter)
    for _ in range(calls):
        same(jitted(*args), fn(*args))
    if graphs is not None:
        assert counter.frame_count == graphs
    return counter


# --- side effects -----------------------------------------------------------------------------


class State:
    def __init__(self) -> None:
        self.calls = 0
        self.last = None


def updates_state(x, state, history, stats):
    state.calls += 1
    state.last = x * 2
    history.append(state.last.sum())
    stats["max"] = x.max()
    del history[0]
    return state.last + state.calls


class _Cache(nn.Module):
    """A decoder's cache swap: returns the cache it replaces."""

    def __init__(self) -> None:
        super().__init__()
        self.cache = torch.zeros(1, 2)

    def forward(self, x):
        old = self.cache
        self.cache = torch.cat([old, x])
        return old


def _swap_item(x, lst, d):
    old_item, old_value = lst[0], d["k"]
    lst[0] = x * 3
    d["k"] = x * 4
    return old_item, old_value


def _pop_and_reverse(x, lst, d, obj):
    first, last = lst[0], lst.pop()
    lst.reverse()
    value = d.pop("a")
    gone = obj.attr
    del obj.attr
    return x + 1, first, last, value, gone


def _store_what_was_overwritten(x, lst, obj):
    a = lst[0]
    lst[0] = x
    obj.kept = a  # replayed after the list write: still the old item
    return x * 2


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_values_read_from_a_place_the_frame_overwrites_stay_what_they_were(backend) -> None:
    # the compiled code rebuilds returned inputs from their sources: loaded before the writes
    # are replayed, not after (the new value came back, or a popped key raised KeyError)
    x = torch.full((1, 2), 5.0)

    def fresh():
        return [torch.zeros(2), torch.ones(2), x], {"k": torch.ones(2), "a": torch.zeros(3)}

    for fn, make in [
        (_swap_item, lambda: fresh()),
        (_pop_and_reverse, lambda: (*fresh(), types.SimpleNamespace(attr=torch.ones(2)))),
        (_store_what_was_overwritten, lambda: (fresh()[0], types.SimpleNamespace())),
    ]:
        jitted = framejit.jit(fn, backend=backend)
        for _ in range(2):
            want_args, got_args = make(), make()
            want, got = fn(x, *want_args), jitted(x, *got_args)
            same(got, want)
            same(list(got_args[0]), list(want_args[0]))
            if fn is _store_what_was_overwritten:
                assert torch.equal(got_args[1].kept, want_args[1].kept)
    eager_model, model = _Cache(), _Cache()
    jitted_model = framejit.jit(model, backend=backend)
    for step in range(3):
        row = torch.full((1, 2), float(step))
        same(jitted_model(row), eager_model(row))
    assert torch.equal(model.cache, eager_model.cache)


def test_writes_to_objects_lists_and_dicts_passed_in_are_replayed() -> None:
    x = torch.randn(3)
    eager = (State(), [torch.zeros(())], {})
    compiled = (State(), [torch.zeros(())], {})
    counter = CompileCounter()
    jitted = framejit.jit(updates_state, backend=counter)
    for _ in range(3):
        same(jitted(x, *compiled), updates_state(x, *eager))
        assert compiled[0].calls == eager[0].calls
        same(compiled[0].last, eager[0].last)
        same(compiled[1], eager[1])
        same(compiled[2], eager[2])
    # state.calls is read (guarded) and written: each new value is a new entry
    assert counter.frame_count == 3


STEP = 0


def bumps_a_global(x):
    global STEP
    STEP = STEP + 1
    return x * STEP


def test_global_writes_are_replayed() -> None:
    global STEP
    STEP = 0
    jitted = framejit.jit(bumps_a_global, backend=CompileCounter())
    same(jitted(torch.ones(2)), torch.ones(2))
    assert STEP == 1
    same(jitted(torch.ones(2)), torch.ones(2) * 2)
    assert STEP == 2


def make_counter():
    count = 0

    def step(x):
        nonlocal count
        count += 1
        return x + count

    return step, lambda: count


def test_nonlocal_writes_are_replayed() -> None:
    step, read = make_counter()
    jitted = framejit.jit(step, backend=CompileCounter())
    same(jitted(torch.zeros(2)), torch.ones(2))
    assert read() == 1
    same(jitted(torch.zeros(2)), torch.full((2,), 2.0))
    assert read() == 2


class Cached(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.cache = None

    def forward(self, x):
        y = self.lin(x)
        self.cache = y.detach()
        return y.relu()


def test_module_attribute_writes_are_replayed() -> None:
    torch.manual_seed(0)
    model = Cached()
    jitted = framejit.jit(model, backend=CompileCounter())
    x = torch.randn(2, 3)
    out = jitted(x)
    same(out, model.lin(x).relu())
    same(model.cache, model.lin(x).detach())


log = logging.getLogger("framejit.tests.breadth")


def logs_and_warns(x):
    log.warning("input of shape %s", tuple(x.shape))
    warnings.warn("a user warning from traced code", stacklevel=1)
    return x.sin()


def test_logging_and_warnings_are_replayed_without_a_break(caplog) -> None:
    counter = CompileCounter()
    jitted = framejit.jit(logs_and_warns, backend=counter)
    x = torch.randn(2, 2)
    for _ in range(2):
        caplog.clear()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            same(jitted(x), x.sin())
        assert [r.getMessage() for r in caplog.records if r.name == log.name] == [
            "input of shape (2, 2)"
        ]
        assert [str(w.message) for w in caught] == ["a user warning from traced code"]
        assert caught[0].lineno == logs_and_warns.__code__.co_firstlineno + 2  # its own line
    assert counter.frame_count == 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert framejit.explain(logs_and_warns, x).graph_break_count == 0


class Step:
    def __init__(self) -> None:
        self.n = 0

    def __repr__(self) -> str:
        return f"Step({self.n})"


def logs_then_changes_what_it_logged(x, state, history):
    log.warning("start %r %s %s", state, history, x)
    y = x * 2
    log.warning("y=%s", y)
    state.n += 1
    history.append(state.n)
    x.mul_(0)  # the input the first call logged, written in place
    y.add_(100)
    return y


class _FormatsAtOnce(logging.Handler):
    """Keeps each message as formatted when it was logged (a LogRecord formats lazily)."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_logging_call_sees_the_state_of_its_own_line(backend: str) -> None:
    # Replayed after the graph, the calls would format the final state (`Step(1) [1]`, a zeroed
    # x): they become graph breaks that run where eager runs them.
    jitted = framejit.jit(logs_then_changes_what_it_logged, backend=backend)
    handler = _FormatsAtOnce()
    log.addHandler(handler)
    try:
        for _ in range(2):
            messages = []
            for fn in (logs_then_changes_what_it_logged, jitted):
                handler.messages.clear()
                out = fn(torch.tensor([1.0, 2.0]), Step(), [])
                messages.append(list(handler.messages))
                same(out, torch.tensor([102.0, 104.0]))
            assert messages[1] == messages[0]
            assert messages[0] == ["start Step(0) [] tensor([1., 2.])", "y=tensor([2., 4.])"]
    finally:
        log.removeHandler(handler)


def warns_under_a_filter_it_removes(x):
    warnings.filterwarnings("ignore", message="noisy")
    warnings.warn("noisy", stacklevel=1)
    warnings.filters.pop(0)
    return x + 1


def test_a_warning_sees_the_filters_of_its_own_line() -> None:
    jitted = framejit.jit(warns_under_a_filter_it_removes, backend="eager")
    x = torch.zeros(2)
    for _ in range(2):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            same(jitted(x), x + 1)
        assert [str(w.message) for w in caught] == []


def softmax_without_dim(x):
    return F.softmax(x) * 2  # torch warns: implicit dimension choice


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_torch_ops_warning_is_given_on_every_call_at_the_users_line(backend: str) -> None:
    # Given once while tracing (blamed on framejit's file), once more by the eager backend's
    # graph, and never again by aot_eager's: now replayed after the graph at the op's line.
    jitted = framejit.jit(softmax_without_dim, backend=backend)
    line = softmax_without_dim.__code__.co_firstlineno + 1
    x = torch.randn(3, 4)
    for _ in range(3):
        said = []
        for fn in (softmax_without_dim, jitted):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                same(fn(x), F.softmax(x, dim=1) * 2)
            said.append([(str(w.message)[:25], w.filename, w.lineno) for w in caught])
        assert said[1] == said[0]
        assert said[0] == [("Implicit dimension choice", __file__, line)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for fn in (softmax_without_dim, jitted, jitted):
            with pytest.raises(UserWarning, match="Implicit dimension choice"):
                fn(x)


def test_plain_string_filters_as_pythons_own_defaults_hold() -> None:
    # Python's default filters hold the module as a plain string ('__main__'), matched
    # exactly; a torch op that warns while the trace runs must read them without failing
    jitted = framejit.jit(softmax_without_dim, backend="eager")
    x = torch.randn(3, 4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filters.insert(0, ("ignore", None, UserWarning, "__main__", 0))
        warnings.filters.insert(0, ("ignore", "Implicit", UserWarning, None, 0))
        same(jitted(x), F.softmax(x, dim=1) * 2)
        breaks = framejit.explain(softmax_without_dim, x).graph_break_count
    assert breaks == 0
    assert [str(w.message)[:25] for w in caught][:1] == ["Implicit dimension choice"]


def resizes_its_out(x, out):
    return torch.add(x, 1, out=out)


def test_warnings_of_torchs_tracing_machinery_are_not_given() -> None:
    # tracing an out= resize through torch's references says `{str(shape)}`; eager's kernel
    # gives its own message, once
    jitted = framejit.jit(resizes_its_out, backend="aot_eager")
    x = torch.randn(3)
    said = []
    for fn in (resizes_its_out, jitted):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            same(fn(x, torch.empty(5)), x + 1)
        said.append([str(w.message) for w in caught])
    assert said[1] == said[0] and len(said[0]) == 1 and "{" not in said[0][0]


_SHOWN_ONCE = """
import sys, warnings, torch, torch.nn.functional as F, framejit
def f(x, g):
    return F.grid_sample(x, g) * 2  # torch warns about align_corners, once per location
def other():
    warnings.warn("unrelated warning")
x, g = torch.randn(1, 2, 4, 4), torch.zeros(1, 3, 3, 2)
run = framejit.jit(f, backend=sys.argv[1]) if sys.argv[1] != "none" else f
for _ in range(3):
    run(x, g)
    other()
"""


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_warning_shown_once_per_location_is_shown_once(backend: str) -> None:
    # silencing a graph's own warnings on each call must not reset the registries of what
    # Python has shown (catch_warnings did: each call showed both warnings again)
    import subprocess
    import sys

    def stderr(mode: str) -> str:
        run = [sys.executable, "-W", "default", "-c", _SHOWN_ONCE, mode]
        return subprocess.run(run, capture_output=True, text=True, check=True).stderr

    want, got = stderr("none"), stderr(backend)
    for text in ("UserWarning: Default grid_sample", "UserWarning: unrelated warning"):
        assert got.count(text) == want.count(text) == 1, got


# --- classes, super(), properties ------------------------------------------------------------


class Scaled(nn.Linear):
    def forward(self, x):
        return super().forward(x) * 2


class Shifted(Scaled):
    offset = 1.5

    @property
    def shift(self):
        return self.offset * 2

    @classmethod
    def double(cls, t):
        return t * 2

    @staticmethod
    def halve(t):
        return t / 2

    def forward(self, x):
        y = super().forward(x)
        return self.halve(self.double(y)) + self.shift + super(Scaled, self).forward(x)


def test_super_properties_classmethods_staticmethods() -> None:
    torch.manual_seed(0)
    model = Shifted(4, 4)
    check(model, torch.randn(2, 4))


class Table:
    def __init__(self, scale):
        self.scale = scale

    def __getitem__(self, t):
        return t * self.scale

    def __call__(self, t):
        return t + self.scale


def uses_dunder_methods(x, table):
    return table[x] + table(x)


def test_getitem_and_call_of_user_classes() -> None:
    check(uses_dunder_methods, torch.randn(3), Table(3.0))


class Mode(enum.Enum):
    ADD = 1
    MUL = 2


@dataclass
class Config:
    scale: float
    mode: Mode


def uses_enums_dataclasses_and_fstrings(x, cfg):
    name = f"{cfg.mode.name.lower()}_{cfg.scale:.1f}"
    if cfg.mode is Mode.ADD and type(x) is torch.Tensor:
        y = x + cfg.scale
    else:
        y = x * cfg.scale
    return y * math.sqrt(4) + operator.mul(len(name), 1), {name: y}


@pytest.mark.parametrize("mode", [Mode.ADD, Mode.MUL])
def test_enums_dataclasses_fstrings_math_operator(mode: Mode) -> None:
    check(uses_enums_dataclasses_and_fstrings, torch.randn(3), Config(2.0, mode))


def size_arithmetic(x):
    shape = x.shape[:-1] + (2, x.shape[-1] // 2)
    assert len(shape) == 3, "constant assert"
    return x.reshape(shape).sum(-1), torch.Size([shape[0], -1])


def test_torch_size_arithmetic_and_constant_asserts() -> None:
    check(size_arithmetic, torch.randn(3, 8))


def partial_of_a_torch_function(x):
    softmax = functools.partial(torch.softmax, dim=-1)
    return softmax(x) + sum(abs(v) for v in (1, -2, 3)) + round(2.6) + max([1, 5, 2])


def test_partial_and_builtins_on_constants() -> None:
    check(partial_of_a_torch_function, torch.randn(2, 5))


def partial_of_a_partial(x):
    add = functools.partial(torch.add, alpha=2)
    add_x = functools.partial(add, other=x)  # flattened: func is torch.add
    return add_x(x), add_x.func is torch.add, dict(add_x.keywords)


def test_partial_of_a_partial_is_flattened_like_functools() -> None:
    x = torch.randn(3)
    got = framejit.jit(partial_of_a_partial, backend="eager")(x)
    expected = partial_of_a_partial(x)
    torch.testing.assert_close(got[0], expected[0])
    assert got[1] is expected[1] is True
    assert list(got[2]) == list(expected[2]) == ["alpha", "other"]
    assert got[2]["alpha"] == 2 and got[2]["other"] is x


def reads_locals(x, scale=2):
    a = 1
    first = sorted(locals())
    b = x * scale
    text = "{a} * {scale}".format(**locals())
    print("a break")
    c = b + a

    def inner():
        return c

    return first, text, sorted(locals()), locals()["c"] + inner()


def test_locals_shows_the_functions_own_names(capsys) -> None:
    x = torch.ones(2)
    got = framejit.jit(reads_locals, backend="eager")(x)
    expected = reads_locals(x)
    assert got[:3] == expected[:3]
    assert got[0] == ["a", "scale", "x"]
    assert got[2] == ["a", "b", "c", "first", "inner", "scale", "text", "x"]
    torch.testing.assert_close(got[3], expected[3])


def reads_vars(x, log):
    y = x + 1
    log.append(sorted(vars()))  # vars() is locals()
    print("a break")
    log.append(sorted(vars()))
    return y * 2


def test_vars_shows_the_functions_own_names() -> None:
    expected: list = []
    reads_vars(torch.ones(2), expected)
    got: list = []
    framejit.jit(reads_vars, backend="eager")(torch.ones(2), got)
    # vars() ran for real in the transformed code: framejit's ___graph_out was among them
    assert got == expected == [["log", "x", "y"], ["log", "x", "y"]]


def recursive(x, depth):
    if depth == 0:
        return x
    return recursive(x * 2, depth - 1) + 1


def test_recursion_is_inlined_up_to_the_limit() -> None:
    check(recursive, torch.randn(3), 5)
    old = framejit.config.inline_depth_limit
    framejit.config.inline_depth_limit = 3
    try:
        # past the limit the call breaks the graph; the frame's own function, called
        # recursively, runs as it is (a compiled wrapper would take Python frames per level):
        # one graph before the call, one in the resume function after it
        counter = check(recursive, torch.randn(3), 6, graphs=None)
        assert counter.frame_count == 2
    finally:
        framejit.config.inline_depth_limit = old


def test_recursion_deeper_than_the_translator_can_follow_runs_like_eager() -> None:
    # Python's stack runs out while tracing (each inlined call takes several of the
    # translator's frames) long before the user's recursion would fail in eager.
    for depth in (300, 900):
        check(recursive, torch.ones(2), depth, graphs=None)


# --- grad mode, generators -------------------------------------------------------------------


def no_grad_inside(x, w):
    with torch.no_grad():
        norm = w.norm()
    return x @ w / norm


def test_no_grad_inside_keeps_gradients_right() -> None:
    x, w = torch.randn(2, 3), torch.randn(3, 3, requires_grad=True)
    jitted = framejit.jit(no_grad_inside)
    jitted(x, w).sum().backward()
    compiled = w.grad.clone()
    w.grad = None
    no_grad_inside(x, w).sum().backward()
    same(compiled, w.grad)


def squares(x, n):
    for i in range(n):
        yield x**i


def consumes_a_user_generator(x):
    return torch.stack(list(squares(x, 3))), sum(t.sum() for t in squares(x, 2))


def test_user_generators_consumed_in_the_frame() -> None:
    check(consumes_a_user_generator, torch.randn(3))


# --- modules -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: nn.LSTM(4, 6, num_layers=2, batch_first=True),
        lambda: nn.GRU(4, 6, bidirectional=True),
        lambda: nn.RNN(4, 6, nonlinearity="relu"),
    ],
    ids=["lstm", "gru", "rnn"],
)
def test_recurrent_modules_are_one_op_each(make) -> None:
    torch.manual_seed(0)
    model = make()
    x = torch.randn(2, 3, 4)
    counter = CompileCounter()
    jitted = framejit.jit(model, backend=counter)
    for _ in range(2):
        same(jitted(x), model(x))
    assert counter.frame_count == 1
    graph = counter.graphs[0]
    assert any(n.target in (torch.lstm, torch.gru, torch.rnn_relu) for n in graph.graph.nodes)


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.LSTM(4, 5, batch_first=True)
        self.head = nn.Linear(5, 2)

    def forward(self, x):
        out, (h, _) = self.rnn(x)
        return self.head(out[:, -1]) + h[-1].sum()


def test_a_recurrent_module_inside_a_model_trains_like_eager() -> None:
    torch.manual_seed(0)
    model = Encoder()
    x = torch.randn(3, 7, 4)
    jitted = framejit.jit(model)
    jitted(x).sum().backward()
    compiled = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).sum().backward()
    for a, b in zip(compiled, (p.grad for p in model.parameters())):
        same(a, b)


def test_forward_hooks_on_a_submodule_run() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 1))
    seen: list[str] = []
    model[0].register_forward_pre_hook(lambda m, args: seen.append("pre"))
    model[0].register_forward_hook(lambda m, args, out: seen.append("post") or out * 2)
    x = torch.randn(2, 3)
    counter = CompileCounter()
    jitted = framejit.jit(model, backend=counter)
    for _ in range(2):
        same(jitted(x), model(x))
    assert seen == ["pre", "post"] * 4
    assert counter.frame_count == 1  # the hooks are inlined into the graph
    handle = model[2].register_forward_hook(lambda m, args, out: out + 1)
    same(jitted(x), model(x))  # a hook added later: the guards see it
    handle.remove()
    assert counter.frame_count == 2


def test_hooks_on_the_jitted_module_itself_are_inlined() -> None:
    torch.manual_seed(0)
    model = nn.Linear(3, 3)
    model.register_forward_hook(lambda m, args, out: out.relu())
    counter = CompileCounter()
    jitted = framejit.jit(model, backend=counter)
    x = torch.randn(2, 3)
    for _ in range(2):
        same(jitted(x), model(x))
    assert counter.frame_count == 1


def asserts_then_breaks(x):
    y = x * 2
    assert y.shape == x.shape, "same shape"
    print("breaking with pytest-rewritten locals in scope")
    return y + 1


def test_a_break_in_a_function_whose_locals_have_unusual_names(capsys) -> None:
    # pytest rewrites the assert above into locals named `@py_assert...`
    check(asserts_then_breaks, torch.randn(3), graphs=2)


LOSSES: list = []


def logs_its_loss(x, w):
    loss = (x @ w).pow(2).mean()
    LOSSES.append(loss.detach())
    return loss


def test_appending_to_an_outside_list_does_not_specialize_on_its_length() -> None:
    LOSSES.clear()
    counter = CompileCounter()
    jitted = framejit.jit(logs_its_loss, backend=counter)
    x, w = torch.randn(4, 3), torch.randn(3, 2)
    for _ in range(5):
        same(jitted(x, w), logs_its_loss(x, w))
    assert len(LOSSES) == 10
    same(LOSSES[0], LOSSES[1])
    assert counter.frame_count == 1  # the list grows, the entry stays valid


def autocast_block(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = x @ w
        z = y.relu()
    return z, y.dtype, z.float().sum()


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_autocast_blocks_are_captured(backend: str) -> None:
    x, w = torch.randn(4, 4), torch.randn(4, 4)
    jitted = framejit.jit(autocast_block, backend=backend)
    for _ in range(2):
        same(jitted(x, w), autocast_block(x, w))
        assert not torch.is_autocast_enabled("cpu")
    assert framejit.explain(autocast_block, x, w).graph_count == 1


def breaks_inside_autocast(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = x @ w
        print("inside autocast")
        z = y @ w
    return z


def test_a_break_inside_an_autocast_block_runs_the_frame_correctly(capsys) -> None:
    x, w = torch.randn(4, 4), torch.randn(4, 4)
    jitted = framejit.jit(breaks_inside_autocast, backend=CompileCounter())
    for _ in range(2):
        same(jitted(x, w), breaks_inside_autocast(x, w))
        assert not torch.is_autocast_enabled("cpu")


# --- module trees, training flags, config objects ------------------------------------------------


class _Towers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.5))
        self.b = nn.Linear(3, 3)
        self.b_again = self.b  # one module under two names: listed once, as eager does
        self.register_buffer("scale", torch.tensor(2.0))


def test_module_tree_methods_are_read_while_tracing() -> None:
    model = _Towers()

    def fn(x):
        total = sum(p.sum() for p in model.parameters())
        names = [name for name, _ in model.named_parameters()]
        shapes = {name: tuple(b.shape) for name, b in model.named_buffers()}
        kinds = [type(m).__name__ for m in model.modules()]
        children = [name for name, _ in model.named_children()]
        return x * total, names, shapes, kinds, children, len(list(model.children()))

    check(fn, torch.randn(3))


def test_train_and_eval_are_captured_as_writes_of_training() -> None:
    model = _Towers().train()

    def fn(x):
        model.eval()
        y = model.a(x)  # Dropout reads the written flag: identity here
        flags = [m.training for m in model.modules()]
        model.train(True)
        return y, flags, model.a[1].training

    torch.manual_seed(0)
    check(fn, torch.randn(4, 3))
    assert all(m.training for m in model.modules())
    model.train(False)

    def bad(x):
        return model.train("yes")  # eager raises ValueError: not captured, raised for real

    with pytest.raises(ValueError):
        framejit.jit(bad, backend="eager")(torch.randn(2))


def test_hf_style_configs_and_output_tuples() -> None:
    from types import SimpleNamespace

    config = SimpleNamespace(hidden=3, output_hidden_states=True)

    def fn(x):
        dtype = x.dtype
        keep = getattr(config, "output_hidden_states", False)
        missing = getattr(config, "use_cache", None)
        hidden = () if keep else None
        for _ in range(2):
            x = x.masked_fill(x < 0, torch.finfo(dtype).min).clamp(min=-1.0)
            hidden += (x,)
        return x, hidden, missing, torch.iinfo(torch.int8).max

    check(fn, torch.randn(2, config.hidden))


def test_a_stateless_torch_module_built_in_the_frame_is_captured() -> None:
    def fn(logits, labels):
        loss_fct = nn.CrossEntropyLoss(ignore_index=-1, label_smoothing=0.1)
        loss = loss_fct(logits, labels)
        scaled = nn.MSELoss(reduction="sum")(logits, logits * 2)
        return loss, scaled, loss_fct  # escapes: rebuilt with the same settings

    counter = CompileCounter()
    jitted = framejit.jit(fn, backend=counter, fullgraph=True)
    x, y = torch.randn(4, 5), torch.tensor([1, -1, 4, 0])
    for _ in range(2):
        got, expected = jitted(x, y), fn(x, y)
        same(got[:2], expected[:2])
        assert type(got[2]) is nn.CrossEntropyLoss and got[2].label_smoothing == 0.1
    assert counter.frame_count == 1  # no guard on a new module's identity: no recompiles
    # a module holding a tensor (a class weight) is not rebuilt: still correct, at a break
    weighted = lambda x, y: nn.CrossEntropyLoss(weight=torch.ones(5))(x, y.clamp(min=0))  # noqa: E731
    check(weighted, x, y, graphs=None)


@pytest.mark.parametrize("cls", [torch.nn.LSTM, torch.nn.GRU, torch.nn.RNN])
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("with_state", [False, True])
def test_recurrent_module_on_unbatched_input(cls, batch_first: bool, with_state: bool) -> None:
    """A 2-D input (one sequence, no batch) runs as eager does: a batch of one, squeezed out
    again, in one graph."""
    torch.manual_seed(0)
    module = cls(4, 5, num_layers=2, batch_first=batch_first, bidirectional=True)
    args: tuple = (torch.randn(6, 4),)
    if with_state:
        h = torch.randn(4, 5)
        args = (args[0], (h, torch.randn(4, 5)) if cls is torch.nn.LSTM else h)
    jitted = framejit.jit(module, backend="aot_eager")
    for _ in range(2):
        torch.testing.assert_close(jitted(*args), module(*args))
    explained = framejit.explain(module, *args)
    assert explained.graph_count == 1 and explained.graph_break_count == 0


@pytest.mark.parametrize("cls", [torch.nn.LSTM, torch.nn.GRU, torch.nn.RNN])
@pytest.mark.parametrize(
    "case",
    ["input size", "input dtype", "state size", "2-D input, 3-D state", "3-D input, 2-D state"],
)
def test_recurrent_module_rejects_what_eager_rejects(cls, case: str) -> None:
    """The module's Python checks run before its aten op, which checks none of them (a wrong
    input size read past the weights): each raises eager's error, nothing runs."""
    torch.manual_seed(0)
    module = cls(4, 5)
    x = torch.randn(6, 3, 4)
    h = torch.randn(1, 3, 5)
    if case == "input size":
        x = torch.randn(6, 3, 7)
    elif case == "input dtype":
        x = x.double()
    elif case == "state size":
        h = torch.randn(1, 2, 5)
    elif case == "2-D input, 3-D state":
        x, h = torch.randn(6, 4), torch.randn(1, 1, 5)
    else:
        h = torch.randn(1, 5)
    state = (h, h.clone()) if cls is torch.nn.LSTM else h
    with pytest.raises((RuntimeError, ValueError)) as eager:
        module(x, state)
    with pytest.raises(type(eager.value)) as got:
        framejit.jit(module, backend="aot_eager")(x, state)
    assert str(got.value) == str(eager.value)


def test_sorted_orders_tensors_by_constant_keys() -> None:
    def fn(x):
        d = {"b": x * 2, "a": x + 1, "c": x}
        parts = [v for _, v in sorted(d.items())]  # keys decide: values are never compared
        by_size = sorted([x[:2], x, x[:1]], key=lambda t: t.shape[0], reverse=True)
        by_name = sorted(d.items(), key=lambda kv: kv[0], reverse=True)
        names = sorted(["z", "y", "x"])
        return torch.cat(parts), by_size[0] * len(by_size[2]), by_name[0][1], names

    explained = framejit.explain(fn, torch.randn(4))
    assert explained.graph_break_count == 0
    check(fn, torch.randn(4))


def test_sorted_of_tensors_compared_by_value_breaks() -> None:
    def fn(x):
        return sorted([x[0], x[1]])[0] + 1  # compares tensor values: data dependent

    explained = framejit.explain(fn, torch.randn(4))
    assert explained.graph_break_count == 1
    assert "sorted() of non-constant values" in str(explained.break_reasons[0])
    check(fn, torch.randn(4), graphs=None)


def test_subscripted_types_and_jit_annotate() -> None:
    # the typing forms of older model code (TorchScript-era annotations), on purpose
    from typing import Dict, List, Optional, Tuple, Union  # noqa: UP035

    def fn(x, bias=None):
        kept = torch.jit.annotate(List[torch.Tensor], [])  # noqa: UP006
        extra = torch.jit.annotate(Optional[torch.Tensor], bias)  # noqa: UP045
        table = torch.jit.annotate(Dict[str, Tuple[int, int]], {})  # noqa: UP006
        table["shape"] = (x.shape[0], x.shape[1])
        kept.append(x * 2)
        if extra is not None:
            kept.append(extra)
        kinds = (list[int], Union[int, str], tuple[int, ...])  # noqa: UP007
        return torch.cat(kept).sum(0) * len(table) * len(kinds)

    explained = framejit.explain(fn, torch.randn(2, 3))
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    check(fn, torch.randn(2, 3))
    check(fn, torch.randn(2, 3), torch.randn(1, 3))


def test_sets_of_constants() -> None:
    names = {"q", "k"}

    def fn(x, names, frozen):
        seen = set()
        seen.add("a")
        seen.update(["b", "c"], ("d",))
        alias = seen
        seen |= {"e"}
        seen -= {"a"}
        seen.discard("zz")
        popped_ok = "e" in alias and len(alias) == 4
        squares = {i * i for i in range(4)}
        both = names & {"q", "v"}
        order = [n for n in sorted(names | frozen)]
        y = x * len(seen) + len(squares) + popped_ok + len(both) + len(order)
        if names.issubset({"q", "k", "v"}) and not seen.isdisjoint({"b"}):
            y = y + 100
        return y, sorted(seen), squares, frozen | {"w"}

    x = torch.randn(3)
    frozen = frozenset({"o"})
    explained = framejit.explain(fn, x, names, frozen)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    check(fn, x, names, frozen)
    counter = CompileCounter()
    jitted = framejit.jit(fn, backend=counter)
    same(jitted(x, names, frozen), fn(x, names, frozen))
    changed = {"q", "k", "extra"}  # a set with other items: guarded, compiled again
    same(jitted(x, changed, frozen), fn(x, changed, frozen))
    assert counter.frame_count == 2


def test_writes_to_a_set_passed_in_are_replayed() -> None:
    def fn(x, tags):
        tags.add("seen")
        tags.update(["b", "c"])
        tags.discard("a")
        tags |= {"d"}
        return x * len(tags) + ("a" in tags)

    eager_tags, tags = {"a"}, {"a"}
    expected = fn(torch.ones(2), eager_tags)
    got = framejit.jit(fn, backend="eager")(torch.ones(2), tags)
    same(got, expected)
    assert tags == eager_tags == {"seen", "b", "c", "d"}
    assert framejit.explain(fn, torch.ones(2), {"a"}).graph_break_count == 0

    def pops(x, tags):
        return x * len(tags.pop())  # which item: the real set's order decides, so a break

    eager_tags, tags = {"ab"}, {"ab"}
    same(framejit.jit(pops, backend="eager")(torch.ones(2), tags), pops(torch.ones(2), eager_tags))
    assert tags == eager_tags == set()


class _Plain:
    def __init__(self) -> None:
        self.a = 1
        self.b = 2


def test_vars_reads_and_writes_the_instance_dict() -> None:
    def fn(x, obj):
        d = vars(obj)
        made = _Plain()
        vars(made)["c"] = 3  # the object made in the frame sees it
        d["a"] = d["a"] + 10  # replayed on the real object
        return x * (len(d) + made.c + obj.b), made

    eager_obj, obj = _Plain(), _Plain()
    expected, eager_made = fn(torch.ones(2), eager_obj)
    got, made = framejit.jit(fn, backend="eager")(torch.ones(2), obj)
    same(got, expected)
    assert vars(made) == vars(eager_made) and vars(obj) == vars(eager_obj) == {"a": 11, "b": 2}
    assert framejit.explain(fn, torch.ones(2), _Plain()).graph_break_count == 0


class _Stack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.seq = nn.Sequential(nn.Linear(4, 4), nn.GELU(), nn.Linear(4, 4), nn.Tanh())
        self.blocks = nn.ModuleList([nn.Linear(4, 4) for _ in range(4)])

    def forward(self, x):
        x = self.seq[:-1](x) + self.seq[1:3][0](x)  # a Sequential slice is a module
        for block in self.blocks[::-1][1:]:
            x = block(x)
        head = self.blocks[::-1][::2]
        return x * len(head) + head[0](x), type(head).__name__, head


def test_slices_of_sequential_and_module_list_are_modules() -> None:
    torch.manual_seed(0)
    model = _Stack()
    x = torch.randn(2, 4)
    expected = model(x)
    got = framejit.jit(model, backend="eager")(x)
    same(got[0], expected[0])
    assert got[1] == expected[1] == "ModuleList"
    assert type(got[2]) is nn.ModuleList and list(got[2]) == list(expected[2])
    explained = framejit.explain(model, x)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)


def test_itertools_over_containers() -> None:
    import itertools

    def fn(xs, ys):
        chained = list(itertools.chain(xs, ys, [xs[0] * 3]))
        sliced = list(itertools.islice(chained, 1, None, 2))
        sums = list(itertools.accumulate(xs))
        prods = list(itertools.accumulate(ys, lambda a, b: a * b, initial=ys[0]))
        longest = [a if b is None else a + b for a, b in itertools.zip_longest(xs, ys[:1])]
        steps = [b - a for a, b in itertools.pairwise(xs)]
        twice = list(itertools.repeat(ys[0], 2))
        return chained, sliced, sums, prods, longest, steps, twice

    xs = [torch.randn(3) for _ in range(3)]
    ys = [torch.randn(3) for _ in range(2)]
    explained = framejit.explain(fn, xs, ys)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    check(fn, xs, ys)


def test_itertools_over_a_shared_iterator_keep_its_position() -> None:
    import itertools

    def fn(xs):
        it = iter(xs)
        head = list(itertools.islice(it, 2))  # takes two items from `it`, no more
        return torch.stack(head).sum(0) + next(it)

    xs = [torch.randn(3) for _ in range(4)]
    check(fn, xs, graphs=None)


def test_tuple_keys_and_nested_constant_tuples_across_a_break() -> None:
    @framejit.disable
    def outside(t):
        return t

    def fn(x):
        table = {(1, "a"): x, "k": 2, (2, ("b", None)): 3}
        pads = ((1, 1), (2, 2))
        outside(x)  # a break: the dict reaches the resume function as an argument
        return table[(1, "a")] * table["k"] + table[(2, ("b", None))] + pads[1][0]

    assert framejit.explain(fn, torch.randn(3)).graph_break_count == 1
    check(fn, torch.randn(3), graphs=1)  # nothing to compute before the break


# --- class statements inside the function (frontend/variables/classdef.py) ---------------------


def defines_an_unused_autograd_function(x):
    class Combine(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    return x.sin() + 1


def uses_a_class_defined_in_the_function(x):
    class Scaled:
        def __init__(self, v):
            self.v = v

        def get(self):
            return self.v * 3

    y = x.cos()
    return Scaled(y).get() + 1, Scaled


def test_an_unused_class_statement_costs_no_break() -> None:
    check(defines_an_unused_autograd_function, torch.randn(4))
    explained = framejit.explain(defines_an_unused_autograd_function, torch.randn(4))
    assert explained.graph_break_count == 0


def test_a_class_made_in_the_function_is_built_at_its_first_use_once_per_call() -> None:
    x = torch.randn(4)
    jitted = framejit.jit(uses_a_class_defined_in_the_function, backend="eager")
    (a, cls_a), (b, cls_b) = jitted(x), jitted(x)
    expected, cls_e = uses_a_class_defined_in_the_function(x)
    torch.testing.assert_close(a, expected)
    torch.testing.assert_close(b, expected)
    assert cls_a is not cls_b  # a new class per call, as in Python
    assert cls_a.__qualname__ == cls_e.__qualname__ and cls_a.__module__ == cls_e.__module__
    explained = framejit.explain(uses_a_class_defined_in_the_function, x)
    assert explained.graph_count == 2 and explained.graph_break_count == 1
    assert "class `Scaled` defined in the function" in explained.break_reasons[0]


def test_masked_reductions_are_one_graph() -> None:
    def fn(x):
        mask = x > 0
        return torch.masked.sum(x, 0, mask=mask), torch.masked.softmax(x, 1, mask=mask)

    x = torch.randn(3, 5)
    check(fn, x)


def test_a_class_body_that_reads_a_changing_cell_runs_where_python_runs_it() -> None:
    def fn(x):
        k = 1

        class Holder:
            v = k

        k = 2
        return x + Holder.v + k

    check(fn, torch.randn(3), graphs=None)
    explained = framejit.explain(fn, torch.randn(3))
    assert "`class Holder` inside the function" in explained.break_reasons[0]


# --- numpy scalars, memory formats, torch's private namespaces ---------------------------------


def test_numpy_scalars_fold_and_enter_the_graph_as_python_numbers() -> None:
    np = pytest.importorskip("numpy")

    def fn(x, s):
        return x * np.sqrt(4.0) + np.pi + x * np.float32(0.1) * 3 + float(s * 3) + x * s

    x = torch.randn(4, dtype=torch.float16)
    check(fn, x, np.float32(0.25))
    check(fn, x, np.int64(3))
    # the scalar's type is guarded: float32 and float64 scalars of one value are two graphs
    counter = CompileCounter()
    jitted = framejit.jit(fn, backend=counter)
    for s in (np.float32(0.5), np.float64(0.5), np.float32(0.5)):
        same(jitted(x, s), fn(x, s))
    assert counter.frame_count == 2


def test_a_numpy_array_result_is_a_break_with_the_right_answer() -> None:
    np = pytest.importorskip("numpy")

    def fn(x):
        return x * np.array([1.0, 2.0]).sum()

    check(fn, torch.randn(3), graphs=None)


@pytest.mark.parametrize(
    "fmt", [torch.channels_last, torch.contiguous_format, torch.preserve_format]
)
def test_a_memory_format_passed_in_is_a_guarded_constant(fmt) -> None:
    def fn(x, mf):
        y = x.contiguous(memory_format=mf) if mf is not torch.preserve_format else x
        return y.double(memory_format=mf) + 1

    x = torch.randn(2, 3, 4, 5)
    counter = check(fn, x, fmt)
    out = framejit.jit(fn, backend=counter)(x, fmt)
    assert out.stride() == fn(x, fmt).stride()


def test_tensor_dunder_methods_reach_torchs_function_namespace() -> None:
    def fn(x):
        return x.__rsub__(2) + torch.Tensor.__rsub__(x, 3)

    check(fn, torch.randn(4))


def test_a_torch_python_function_given_a_callback_is_inlined() -> None:
    def fn(a, p, n, dist):
        return nn.functional.triplet_margin_with_distance_loss(a, p, n, distance_function=dist)

    a, p, n = torch.randn(5, 8), torch.randn(5, 8), torch.randn(5, 8)
    check(fn, a, p, n, nn.PairwiseDistance())
    check(fn, a, p, n, lambda u, v: (u - v).abs().sum(-1))


def test_str_of_a_caught_exception_and_stdlib_module_methods() -> None:
    import random

    def caught(x):
        try:
            raise ValueError("seven")
        except ValueError as err:
            return x + len(str(err)) + len(repr(err))

    check(caught, torch.randn(3))

    def seeds(x):
        random.seed(0)  # a method of random's hidden instance: a break, then a graph
        return x + 1

    counter = CompileCounter()
    jitted = framejit.jit(seeds, backend=counter)
    same(jitted(torch.ones(2)), seeds(torch.ones(2)))
    assert counter.frame_count == 1


def _checks_rank(x):
    if x.dim() != 3:
        raise ValueError(f"expected 3 dims, got {x.dim()} for shape {tuple(x.shape)}")
    return x


def test_a_caught_exception_carries_the_arguments_it_was_raised_with() -> None:
    def fn(x):
        try:
            return _checks_rank(x), ""
        except ValueError as err:
            return x + 1, str(err) + "|" + repr(err.args)

    check(fn, torch.randn(2, 3))

    def lookup(x, table):
        try:
            return x * table["missing"]
        except KeyError as err:  # raised by the modelled lookup, with the key as its argument
            return x + len(err.args) + len(err.args[0])

    check(lookup, torch.randn(3), {"a": 2})

    def folds(x):
        try:
            return x * int("abc")
        except ValueError as err:  # a failed fold of constants: eager's message
            return x + len(str(err))

    check(folds, torch.randn(3))


def starts_requiring_grad(x):
    y = x.detach() * 2
    y.requires_grad_(True)
    z = y.sin()
    return z, y


def starts_requiring_grad_by_attribute(x):
    y = x.detach() * 2
    y.requires_grad = True
    return y.cos().sum(), y


def already_requires_grad(x):
    x.requires_grad_()  # no change: no break
    return x * 2


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("fn", [starts_requiring_grad, starts_requiring_grad_by_attribute])
def test_a_tensor_that_starts_requiring_grad_in_the_frame_gets_gradients(fn, backend) -> None:
    """The compiled graph's outputs hang off its inputs in autograd: a tensor made a leaf in the
    middle of the graph is a break (before, the AOT backends returned outputs without grad)."""
    x = torch.randn(4)
    out, leaf = framejit.jit(fn, backend=backend)(x)
    ref_out, ref_leaf = fn(x)
    same(out, ref_out)
    assert leaf.is_leaf and leaf.requires_grad
    out.sum().backward()
    ref_out.sum().backward()
    torch.testing.assert_close(leaf.grad, ref_leaf.grad)


def test_requires_grad_on_a_tensor_that_already_requires_it_is_no_break() -> None:
    x = torch.randn(3, requires_grad=True)
    check(already_requires_grad, x)


# --- collections: deque, Counter, OrderedDict ----------------------------------------------------


def uses_a_deque(x):
    d = collections.deque([x], maxlen=3)
    for i in range(4):
        d.append(x * i)
    d.appendleft(x - 1)
    d.rotate(1)
    first = d.popleft()
    d.extendleft([x, x * 5])
    return first + sum(d) + len(d) + d[-1], d, d.maxlen


def counts_words(x):
    c = collections.Counter(["a", "b", "a"])
    c.update("aab")
    c.subtract({"b": 1})
    top = c.most_common(1)[0]
    return x * c["a"] + c["missing"] + len(c) + c.total(), top, c


def reorders(x):
    d = collections.OrderedDict(a=x, b=x + 1, c=x + 2)
    d.move_to_end("a")
    d.move_to_end("c", last=False)
    k, v = d.popitem(last=False)
    k2, v2 = d.popitem()
    plain = {"p": x, "q": x * 2}
    k3, v3 = plain.popitem()
    return v + v2 + v3, (k, k2, k3), list(d.keys()), d, plain


@pytest.mark.parametrize("fn", [uses_a_deque, counts_words, reorders])
def test_collections_made_in_the_frame_are_one_graph(fn) -> None:
    check(fn, torch.randn(3))


def test_a_deque_live_at_a_break_is_rebuilt_with_its_maxlen() -> None:
    def fn(x):
        d = collections.deque(maxlen=2)
        d.append(x + 1)
        print("", end="")
        d.append(x + 2)
        d.append(x + 3)
        return d

    out = framejit.jit(fn, backend="eager")(torch.zeros(2))
    assert isinstance(out, collections.deque) and out.maxlen == 2
    same(list(out), list(fn(torch.zeros(2))))


def test_reordering_an_ordered_dict_passed_in_is_replayed() -> None:
    def fn(x, d):
        d.move_to_end("a")
        return x + d["b"]

    a, b = collections.OrderedDict(a=1, b=2), collections.OrderedDict(a=1, b=2)
    out = framejit.jit(fn, backend="eager")(torch.zeros(2), a)
    same(out, fn(torch.zeros(2), b))
    assert list(a) == list(b) == ["b", "a"]


# --- iterators are live, as in Python ------------------------------------------------------


def worklist(x, queue):
    for item in queue:  # sees what the loop appends (a breadth-first walk)
        if item < 4:
            queue.append(item * 2)
    fresh = [x]
    it = iter(fresh)
    fresh.append(x + 1)  # after iter(): still seen
    return x * len(queue), len(list(it))


def test_a_list_iterator_sees_items_appended_while_it_runs() -> None:
    x = torch.ones(2)
    got_q, expected_q = [1, 3], [1, 3]
    got = framejit.jit(worklist, backend="eager")(x, got_q)
    expected = worklist(x, expected_q)
    same(got[0], expected[0])
    assert got[1] == expected[1] == 2
    assert got_q == expected_q == [1, 3, 2, 6, 4]


def grows_while_iterating(x, d):
    for k in d:
        d[k + "x"] = 1
    return x


def catches_the_change(x):
    d = {"a": 1}
    it = iter(d)
    next(it)
    d["b"] = 2
    try:
        return x, next(it)
    except RuntimeError as err:
        return x * 2, str(err)


def test_a_dict_that_changes_size_while_iterated_raises_like_eager() -> None:
    x = torch.ones(2)
    d_eager, d_jit = {"a": 1}, {"a": 1}
    with pytest.raises(RuntimeError, match="dictionary changed size during iteration"):
        grows_while_iterating(x, d_eager)
    with pytest.raises(RuntimeError, match="dictionary changed size during iteration"):
        framejit.jit(grows_while_iterating, backend="eager")(x, d_jit)
    assert d_jit == d_eager
    got, expected = framejit.jit(catches_the_change, backend="eager")(x), catches_the_change(x)
    same(got[0], expected[0])
    assert got[1] == expected[1] == "dictionary changed size during iteration"


def returns_a_sentinel(x):
    missing = object()
    return x + 1, missing, type(missing) is object


def test_an_object_made_in_the_frame_is_returned() -> None:
    got = framejit.jit(returns_a_sentinel, backend="eager")(torch.ones(1))
    same(got[0], torch.ones(1) + 1)
    assert type(got[1]) is object and got[2] is True


def _deprecated(t, level):
    warnings.warn("deprecated argument", DeprecationWarning, stacklevel=level)
    return t


def warns_through_a_helper(x, level):
    y = x + 1
    _deprecated(y, level)  # the line eager blames for stacklevel=2
    return y * 2


def warns_after_a_break(x):
    y = x + 1
    print("a break")
    warnings.warn("from the resumed part", stacklevel=2)  # blames the caller's line
    return y


def _where(fn, *args):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn(*args)
    return [(str(w.message), w.category, w.filename, w.lineno) for w in caught]


@pytest.mark.parametrize("level", [1, 2, 3])
def test_warnings_are_attributed_to_the_frame_eager_blames(level, capsys) -> None:
    # stacklevel counts the frames the trace inlined (gone at run time) and, above the
    # compiled frame, the caller's frames past framejit's own
    x = torch.ones(2)
    jitted = framejit.jit(warns_through_a_helper, backend="eager")

    def call_compiled():
        return jitted(x, level)

    def call_eager():
        return warns_through_a_helper(x, level)

    got, expected = _where(call_compiled), _where(call_eager)
    if level == 3:  # the test's own caller functions differ by name, not by file
        got, expected = [g[:3] for g in got], [e[:3] for e in expected]
    assert got == expected and len(got) == 1

    resumed = framejit.jit(warns_after_a_break, backend="eager")
    got = _where(lambda: resumed(x))
    expected = _where(lambda: warns_after_a_break(x))
    assert [g[:3] for g in got] == [e[:3] for e in expected]
    assert got[0][3] == expected[0][3] - 1  # each lambda's own line, one line apart


def uses_views(x, d):
    keys = d.keys()
    d["z"] = 1  # a view sees it
    seen = [k for k in keys]
    for _k, v in d.items():
        x = x + v
    return x, seen, type(keys).__name__, "z" in keys, keys & {"z", "q"}, d.values()


def test_dict_views_are_live_views() -> None:
    x = torch.ones(1)
    got_d, expected_d = {"a": 2}, {"a": 2}
    got = framejit.jit(uses_views, backend="eager")(x, got_d)
    expected = uses_views(x, expected_d)
    same(got[0], expected[0])
    assert got[1:5] == expected[1:5] == (["a", "z"], "dict_keys", True, {"z"})
    assert type(got[5]) is type(expected[5]) and list(got[5]) == list(expected[5]) == [2, 1]
    assert got_d == expected_d
    assert framejit.explain(uses_views, x, {"a": 2}).graph_break_count == 0


def comprehension_over_a_captured_name(x):
    k = 5
    g = lambda: x * k  # noqa: E731
    fns = [lambda: x + k for k in range(3)]  # noqa: B023  (3.12: its own cell for k)
    return k, g(), [f() for f in fns]


def test_a_comprehension_variable_captured_by_lambdas_keeps_the_outer_one() -> None:
    x = torch.ones(1)
    got = framejit.jit(comprehension_over_a_captured_name, backend="eager")(x)
    expected = comprehension_over_a_captured_name(x)
    assert got[0] == expected[0] == 5
    same(got[1], expected[1])
    for a, b in zip(got[2], expected[2], strict=True):
        same(a, b)


def _logs_in_a_helper(h):
    log.info("helper sees %s", tuple(h.shape))
    return h + 1


def logs_through_a_helper(x):
    log.warning("top")
    return _logs_in_a_helper(x * 2)


def test_log_records_name_the_inlined_function_and_its_line(caplog) -> None:
    x = torch.ones(3)
    with caplog.at_level(logging.INFO, logger=log.name):
        logs_through_a_helper(x)
        expected = [(r.funcName, r.lineno, r.filename, r.getMessage()) for r in caplog.records]
        caplog.clear()
        framejit.jit(logs_through_a_helper, backend="eager")(x)
        got = [(r.funcName, r.lineno, r.filename, r.getMessage()) for r in caplog.records]
    assert got == expected
    assert [g[0] for g in got] == ["logs_through_a_helper", "_logs_in_a_helper"]


# --- library-style class patterns ------------------------------------------------------------


class _TwoDMeta(type):
    def __instancecheck__(cls, inst):
        return isinstance(inst, torch.Tensor) and inst.dim() == 2


class _TwoD(metaclass=_TwoDMeta):
    pass


class _Abstract(abc.ABC):
    @abc.abstractmethod
    def go(self): ...


class _InitReturns:
    def __init__(self):
        return 5


_SENTINEL = object()


def class_patterns(x):
    flat = x.sum(0) if isinstance(x, _TwoD) else x
    same_ns = types.SimpleNamespace(a=1.0) == types.SimpleNamespace(a=1.0)
    errors = []
    for make in (_Abstract, _InitReturns):
        try:
            make()
        except TypeError as err:
            errors.append(str(err))
    try:
        setattr(_SENTINEL, "a", 1)  # noqa: B010  (the builtin, as libraries call it)
    except AttributeError as err:
        errors.append(str(err))
    return flat, same_ns, errors


def test_library_style_class_patterns_match_eager() -> None:
    x = torch.ones(2, 3)
    got = framejit.jit(class_patterns, backend="eager")(x)
    expected = class_patterns(x)
    same(got[0], expected[0])
    assert got[0].shape == (3,)
    assert got[1:] == expected[1:]
    assert got[1] is True and len(got[2]) == 3


def test_rnn_kernel_follows_its_mode_not_a_later_nonlinearity() -> None:
    # eager picks the kernel from `mode`, set in __init__; `nonlinearity` set later is ignored
    torch.manual_seed(0)
    rnn = nn.RNN(3, 4)
    rnn.nonlinearity = "relu"
    x = torch.randn(2, 1, 3)
    torch.testing.assert_close(framejit.jit(rnn, backend="aot_eager")(x), rnn(x))


class _LazyOffset(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        if not hasattr(self, "offset"):
            self.register_buffer("offset", torch.ones(3) * 10, persistent=False)
        return self.lin(x) + (self.offset if hasattr(self, "offset") else 0)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_register_buffer_in_forward_is_seen_by_the_same_call(backend) -> None:
    torch.manual_seed(0)
    eager = _LazyOffset()
    compiled = _LazyOffset()
    compiled.load_state_dict(eager.state_dict())
    jitted = framejit.jit(compiled, backend=backend)
    for _ in range(3):
        x = torch.randn(2, 3)
        torch.testing.assert_close(jitted(x), eager(x))
    assert torch.equal(compiled.offset, eager.offset)


class _Node:
    pass


def _make_pair(x):
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    a.t = x + 1
    b.t = x * 2
    return a


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_objects_made_in_the_frame_that_refer_to_each_other(backend) -> None:
    x = torch.randn(3)
    a = framejit.jit(_make_pair, backend=backend)(x)
    assert a.other.other is a and type(a) is _Node
    torch.testing.assert_close(a.t, x + 1)
    torch.testing.assert_close(a.other.t, x * 2)

    def log_normal(mu):  # a transform and its inverse refer to each other
        d = torch.distributions.LogNormal(mu, 1.0, validate_args=False)
        torch.manual_seed(0)
        sample = d.rsample()
        return d.log_prob(sample) * 2, d

    got, dist = framejit.jit(log_normal, backend=backend)(x)
    want, _ = log_normal(x)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(dist.mean, x.add(0.5).exp())


def test_functions_compare_by_identity_in_the_graph() -> None:
    class Base:
        def __init__(self):
            pass

    class Child(Base):
        def __init__(self):
            super().__init__()

    def fn(x):
        overridden = Child.__init__ != Base.__init__
        same = Base.__init__ == Base.__init__
        return x + overridden + 2 * same

    x = torch.zeros(2)
    torch.testing.assert_close(framejit.jit(fn, fullgraph=True)(x), fn(x))


class _Scale:
    def __call__(self, x):
        return x * 2


_SCALE = _Scale()


def _calls_a_callable_object(x):
    return _SCALE(x) + 1


def test_a_replaced_class_call_is_followed() -> None:
    # the class's __call__ is guarded by identity (a user's class can be patched)
    jitted = framejit.jit(_calls_a_callable_object, backend="eager")
    x = torch.ones(2)
    original = _Scale.__call__
    try:
        same(jitted(x), _calls_a_callable_object(x))
        _Scale.__call__ = lambda self, x: x * 100
        same(jitted(x), _calls_a_callable_object(x))
    finally:
        _Scale.__call__ = original


class _Criteria(list):
    """A list subclass, as transformers' StoppingCriteriaList: its C methods run for real."""


def _collects(x: torch.Tensor, n: int) -> tuple[torch.Tensor, _Criteria]:
    y = x * 2
    crit = _Criteria()
    check = crit.__contains__  # a method-wrapper bound to the instance, live across breaks
    crit.append(y.sum())  # a C method of an instance: a break, the method passed on
    crit.append(n)
    return y + len(crit) + check(n), crit


def test_c_methods_bound_to_an_instance_are_guarded_by_class_and_name() -> None:
    """A bound C method is a new object at every attribute read: it was guarded by identity,
    so the resume function's guard never held again and it recompiled on every call (the
    self-check after a compile now raises on that)."""
    counter = CompileCounter()
    jitted = framejit.jit(_collects, backend=counter)
    for n in (3, 3, 4, 3):
        x = torch.randn(5)
        got, got_crit = jitted(x, n)
        want, want_crit = _collects(x, n)
        same(got, want)
        assert type(got_crit) is _Criteria and len(got_crit) == len(want_crit)
    compiled = counter.frame_count
    for _ in range(3):
        jitted(torch.randn(5), 3)
    assert counter.frame_count == compiled  # nothing recompiles


class _Named:
    def __init__(self, name: str) -> None:
        self.name = name

    def __lt__(self, other: _Named) -> bool:
        return self.name < other.name


def _objects_returned_twice(t: torch.Tensor) -> list:
    a, b = _Named("a"), _Named("b")
    return [a, b, a, t * 2]


def _objects_across_a_break(t: torch.Tensor) -> tuple:
    a, b = _Named("a"), _Named("b")
    both = [a, b]
    first = a < b  # a user __lt__ between objects made in the frame
    print("a break")
    return a.name, b.name, both[0] is a, both[1] is b, a is b, first, t + 1


def _closure_and_its_object(t: torch.Tensor) -> tuple:
    o = _Named("o")

    def get() -> str:
        return o.name

    return get, o, t * 3


def test_objects_made_in_the_frame_keep_their_identity_when_rebuilt(capsys: Any) -> None:
    """Objects rebuilt after the graph are kept in locals for reuse; the locals were named by
    the size of a dict that could hold one object under two names, so a later object took an
    earlier one's name: `[a, b, a]` came back as `[a, b, b]`."""
    t = torch.randn(3)
    got = framejit.jit(_objects_returned_twice)(t)
    assert [x.name for x in got[:3]] == ["a", "b", "a"] and got[0] is got[2]
    same(got[3], t * 2)
    got = framejit.jit(_objects_across_a_break)(t)
    want = _objects_across_a_break(t)
    assert got[:6] == want[:6] == ("a", "b", True, True, False, True)
    same(got[6], want[6])
    get, o, y = framejit.jit(_closure_and_its_object)(t)
    assert type(o) is _Named and get() == "o" and get.__closure__[0].cell_contents is o
    same(y, t * 3)


def _grows_in_place(t: torch.Tensor, lst: list, d: dict, twice: list) -> tuple:
    alias, dalias = lst, d
    alias += [3]  # list.__iadd__ extends the list itself
    dalias |= {"b": 2}  # dict.__ior__ updates the dict itself
    twice *= 2
    mine = [1]
    same_list = mine
    same_list *= 3
    return t * len(lst) + len(d) + len(twice), lst is alias, d is dalias, mine


def test_in_place_operators_on_lists_and_dicts_change_the_object_itself() -> None:
    """`lst += [3]` with constant items was folded into a new list: an alias, or the
    caller's list, did not see the change."""
    t = torch.randn(2)
    args = ([1, 2], {"a": 1}, [5, 6])
    want_args = ([1, 2], {"a": 1}, [5, 6])
    got = framejit.jit(_grows_in_place)(t, *args)
    want = _grows_in_place(t, *want_args)
    same(got[0], want[0])
    assert got[1:] == want[1:] == (True, True, [1, 1, 1])
    assert args == want_args == ([1, 2, 3], {"a": 1, "b": 2}, [5, 6, 5, 6])


def _reseeds(t: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    return t + torch.rand(3, generator=gen.manual_seed(5))


def test_a_method_of_an_object_without_an_instance_dict_compiles_once() -> None:
    """A method looked up on a torch.Generator (no `__dict__`) was guarded by "the name is
    not in its instance dict", a guard that raised at every call: a recompile every time."""
    counter = CompileCounter()
    jitted = framejit.jit(_reseeds, backend=counter)
    t = torch.randn(3)
    for _ in range(4):
        same(jitted(t, torch.Generator()), _reseeds(t, torch.Generator()))
    assert len(jitted.cache.entries) == 1


class _CountingRead:
    """A descriptor written in Python with a side effect: each read counts."""

    def __get__(self, obj: Any, cls: type) -> Any:
        if obj is None:
            return self
        obj.log.append("read")
        obj.reads += 1
        return obj.t * obj.reads


class _HasCountingRead:
    val = _CountingRead()

    def __init__(self, t: torch.Tensor, log: list) -> None:
        self.t, self.reads, self.log = t, 0, log


def _reads_a_descriptor(t: torch.Tensor, h: _HasCountingRead) -> tuple:
    h.log.append("before")
    return h.val + t, h.reads


def test_a_python_descriptor_on_an_argument_runs_in_order_once_per_call() -> None:
    """Its `__get__` is inlined: it ran for real while tracing and again when the guards and
    graph inputs were read, out of order and several times a call."""
    jitted = framejit.jit(_reads_a_descriptor)
    got_h, want_h = _HasCountingRead(torch.ones(2), []), _HasCountingRead(torch.ones(2), [])
    for _ in range(3):
        got, want = jitted(torch.ones(2), got_h), _reads_a_descriptor(torch.ones(2), want_h)
        same(got[0], want[0])
        assert got[1] == want[1]
    assert got_h.reads == want_h.reads == 3
    assert got_h.log == want_h.log == ["before", "read"] * 3


class _EqualsAll:
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = None  # type: ignore[assignment]


def _contains(t: torch.Tensor, lst: list, probe: Any) -> tuple:
    return t + 1, probe in lst, probe in (7, t.sum()), probe not in lst


def test_in_compares_each_item_with_eq_as_python_does() -> None:
    """`x in [tensor, 5]` asks `item is x or item == x` of each item: a tensor item was
    skipped (only constants were compared), so `3 in [tensor([3.]), 5]` was False."""
    t = torch.ones(2)
    for lst, probe in (
        ([torch.tensor([3.0]), 5], 3),
        ([torch.tensor([2.0]), 5], 3),
        ([_EqualsAll()], "anything"),
        ([1, "a", None], "a"),
        ([1, "a", None], 2.5),
    ):
        got, want = framejit.jit(_contains)(t, lst, probe), _contains(t, lst, probe)
        same(got[0], want[0])
        assert got[1:] == want[1:]
    with pytest.raises(RuntimeError, match="ambiguous"):
        framejit.jit(_contains)(t, [torch.tensor([3.0, 4.0])], 3)


def _zips_an_iterator(t: torch.Tensor) -> tuple:
    it = iter([10, 11, 12, 13])
    pairs = list(zip(it, [1]))  # takes 10, then 11 (dropped, as zip does), then stops
    numbered = iter([1.0, 2.0, 3.0])
    for i, x in enumerate(numbered):  # noqa: B007 - x is used after the loop
        if i == 0:
            break
    rest = iter(range(5))
    list(zip(rest, [1]))
    return pairs, list(it), list(numbered), next(rest), t * x


def test_zip_and_enumerate_take_items_of_an_iterator_one_at_a_time() -> None:
    """They unpacked an iterator argument whole: the items they did not take were lost to
    the rest of the function (and `next` then raised StopIteration)."""
    t = torch.randn(2)
    counter = CompileCounter()
    got, want = framejit.jit(_zips_an_iterator, backend=counter)(t), _zips_an_iterator(t)
    assert got[:4] == want[:4] == ([(10, 1)], [12, 13], [2.0, 3.0], 2)
    same(got[4], want[4])
    assert counter.frame_count == 1


class _Stepper:
    def __init__(self) -> None:
        self.step = 0


def _counts_steps(x: torch.Tensor, st: _Stepper) -> tuple:
    st.step += 1
    return x, st.step


def _counts_steps_after_a_break(x: torch.Tensor, st: _Stepper) -> tuple:
    v = x.sum().item()
    st.step += 1
    return v, st.step


@pytest.mark.parametrize("fn", [_counts_steps, _counts_steps_after_a_break])
def test_an_int_attribute_counter_is_returned_as_it_was_written(fn: Any) -> None:
    """Once the counter is symbolic its new value is computed by the code from `st.step`;
    that ran after the write was replayed, so it returned one too many from the third call."""
    jitted = framejit.jit(fn, backend="eager")
    got_st, want_st = _Stepper(), _Stepper()
    got = [jitted(torch.ones(2), got_st)[1] for _ in range(5)]
    want = [fn(torch.ones(2), want_st)[1] for _ in range(5)]
    assert got == want == [1, 2, 3, 4, 5] and got_st.step == want_st.step == 5


def test_a_value_read_before_a_break_is_what_it_was_when_read() -> None:
    """`lr = opt.param_groups[0]["lr"]; sched.step()` (the break, run for real): the rest of
    the frame got the lr the scheduler wrote, because the value was loaded again from its
    place after the instruction ran (only writes the trace made were accounted for)."""

    def run(jit: bool) -> list:
        torch.manual_seed(0)
        m = nn.Linear(2, 1)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: (s + 1) / 10)

        def step(x: torch.Tensor) -> tuple:
            loss = m(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            lr = opt.param_groups[0]["lr"]
            sched.step()
            prev = m.weight.grad
            return lr, (loss * lr).item(), prev is None

        f = framejit.jit(step, backend="eager") if jit else step
        return [f(torch.ones(1, 2)) for _ in range(4)]

    assert run(True) == run(False)


_DECORATED_LINEAR = nn.Linear(8, 8)


@torch.autocast("cpu", dtype=torch.bfloat16)
def _autocast_decorated(x: torch.Tensor) -> torch.Tensor:
    return _DECORATED_LINEAR(x).relu()


def test_an_autocast_decorator_is_captured_like_a_with_block() -> None:
    """`@torch.autocast(...)` enters an autocast made outside the frame (kept in the
    decorator's closure): it broke the graph, the `with torch.autocast(...)` form did not."""

    def fn(x: torch.Tensor) -> torch.Tensor:
        return _autocast_decorated(x) * 2

    x = torch.randn(4, 8)
    explained = framejit.explain(fn, x)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    got, want = framejit.jit(fn)(x), fn(x)
    assert got.dtype == want.dtype == torch.bfloat16
    same(got, want)


def _identities(t: torch.Tensor) -> tuple:
    a, b = [1], [1]
    c = a
    x, y = _Named("x"), _Named("x")
    z = x
    d, e = {}, {}
    return t + 1, a is b, a is c, x is y, x is z, d is e, a is not b, x is None


def test_is_between_objects_the_frame_made_is_captured() -> None:
    """Two lists, dicts or objects the frame made are two objects: `a is b` broke the graph
    ("list is list is not captured")."""
    t = torch.ones(2)
    explained = framejit.explain(_identities, t)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    got, want = framejit.jit(_identities)(t), _identities(t)
    same(got[0], want[0])
    assert got[1:] == want[1:] == (False, True, False, True, False, True, False)


class _Money:
    def __init__(self, cents: int) -> None:
        self.cents = cents

    def __neg__(self) -> _Money:
        return _Money(-self.cents)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Money) and self.cents == other.cents

    def __lt__(self, other: _Money) -> bool:
        return self.cents < other.cents

    __hash__ = None  # type: ignore[assignment]


def _picks_and_orders(t: torch.Tensor, lst: list) -> tuple:
    i = max(range(len(lst)), key=lambda k: lst[k])
    j = min(lst, key=abs)
    k = max(3, 4, key=lambda q: -q)
    first = max([t, t * 2, t * 3], key=lambda _: 0)  # ties: the first item
    empty = min([], default=-1)
    rest = list(lst)
    rest.remove(3)
    rest.sort(key=lambda q: -q)
    m = -_Money(250)
    flags = (m == _Money(-250), m != _Money(-250), m != _Money(1), _Money(1) < _Money(2))
    cheapest = min([_Money(5), _Money(2), _Money(7)])
    return t + i, first, j, k, empty, rest, m.cents, flags, cheapest.cents


def test_min_max_with_a_key_list_remove_and_sort_and_user_comparisons_are_captured() -> None:
    """`max(range(n), key=...)`, `max(a, b, key=...)`, `lst.remove(x)`, `lst.sort(key=...)`,
    `-obj` and `obj == obj` with a user `__neg__` / `__eq__` broke the graph."""
    t, lst = torch.randn(2), [3, -5, 1, 4]
    explained = framejit.explain(_picks_and_orders, t, lst)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    got, want = framejit.jit(_picks_and_orders)(t, lst), _picks_and_orders(t, lst)
    same(got[0], want[0])
    same(got[1], want[1])
    assert got[2:] == want[2:]
    assert want[7] == (True, False, True, True)


@dataclass
class _Config:
    scale: int = 2
    names: list = dataclasses.field(default_factory=list)


class _Bag:
    def __init__(self, items: list) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)


class _Color(enum.Enum):
    RED = 1
    GREEN = 2


def _python_helpers(t: torch.Tensor, bag: _Bag, empty: _Bag) -> tuple:
    cfg = _Config(3)
    cfg.names.append("a")
    total = 0
    for a, b in itertools.product(range(2), range(3)):
        total += a * b
    pairs = list(itertools.permutations([1, 2, 3], 2))
    combos = list(itertools.combinations(range(4), 2)) + list(
        itertools.combinations_with_replacement("ab", 2)
    )
    twice = list(itertools.product([0, 1], repeat=2))
    y = t * cfg.scale if bag else t
    z = t if empty else -t
    colors = [c.value for c in _Color]
    return y + z + total, cfg.names, pairs, combos, twice, colors, sys.version_info >= (3, 8)


def test_dataclass_factories_object_truth_itertools_and_enums_are_captured() -> None:
    """`field(default_factory=list)`, `if obj:` with a user `__len__`, itertools' product /
    permutations / combinations, iterating an Enum class and `sys.version_info >= (3, 8)`
    broke the graph."""
    t = torch.randn(3)
    args = (t, _Bag([1]), _Bag([]))
    explained = framejit.explain(_python_helpers, *args)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    got, want = framejit.jit(_python_helpers)(*args), _python_helpers(*args)
    same(got[0], want[0])
    assert got[1:] == want[1:]


class _CachedRead:
    """A caching descriptor that stores its value in the instance dict, as lazy_property."""

    def __init__(self, f: Any) -> None:
        self.f = f

    def __get__(self, obj: Any, cls: type) -> Any:
        if obj is None:
            return self
        value = self.f(obj)
        obj.__dict__[self.f.__name__] = value
        return value


class _HasCachedRead:
    def __init__(self, t: torch.Tensor) -> None:
        self.t, self.calls = t, 0

    @_CachedRead
    def squared(self) -> torch.Tensor:
        self.calls += 1
        return self.t * self.t


def _reads_a_cached_value_twice(t: torch.Tensor, h: _HasCachedRead) -> tuple:
    a = h.squared
    b = h.squared  # from the instance dict now
    return a + b + t, h.calls, "squared" in vars(h)


def test_writes_through_the_instance_dict_and_attributes_agree() -> None:
    """A caching descriptor on an argument: its `obj.__dict__[name] = v` was not seen by the
    next `obj.name` (computed twice), and replaying the dict after the attribute writes undid
    `self.calls += 1` (the dict was read before it)."""
    t = torch.ones(2)
    got_h, want_h = _HasCachedRead(torch.full((2,), 3.0)), _HasCachedRead(torch.full((2,), 3.0))
    got = framejit.jit(_reads_a_cached_value_twice)(t, got_h)
    want = _reads_a_cached_value_twice(t, want_h)
    same(got[0], want[0])
    assert got[1:] == want[1:] == (1, True)
    assert got_h.calls == want_h.calls == 1 and sorted(vars(got_h)) == sorted(vars(want_h))


class _Celsius:
    def __init__(self) -> None:
        self._c = 0.0

    @property
    def c(self) -> float:
        return self._c

    @c.setter
    def c(self, value: float) -> None:
        if value < -273.15:
            raise ValueError("below absolute zero")
        self._c = value


class _PositiveField:
    def __set_name__(self, owner: type, name: str) -> None:
        self.private = "_" + name

    def __get__(self, obj: Any, cls: type) -> Any:
        return self if obj is None else getattr(obj, self.private)

    def __set__(self, obj: Any, value: int) -> None:
        if value <= 0:
            raise ValueError("must be positive")
        setattr(obj, self.private, value)


class _Sized:
    size = _PositiveField()

    def __init__(self) -> None:
        self.size = 1


class _Slotted:
    __slots__ = ("a", "b")

    def __init__(self) -> None:
        self.a, self.b = 1, 2


def _sets_through_setters(t: torch.Tensor, temp: _Celsius, box: _Sized, slots: _Slotted) -> tuple:
    temp.c = 25.0
    box.size = 3
    slots.a = slots.a + 10
    return t * temp.c + box.size + slots.a, temp.c, box.size, slots.a


def test_property_setters_python_descriptors_and_slots_on_arguments_are_captured() -> None:
    """Writes to an argument through a property setter, a data descriptor's Python __set__
    or a __slots__ slot broke the graph ("a custom __setattr__ or a data descriptor")."""
    t = torch.ones(2)
    explained = framejit.explain(_sets_through_setters, t, _Celsius(), _Sized(), _Slotted())
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    got_args, want_args = (_Celsius(), _Sized(), _Slotted()), (_Celsius(), _Sized(), _Slotted())
    got = framejit.jit(_sets_through_setters)(t, *got_args)
    want = _sets_through_setters(t, *want_args)
    same(got[0], want[0])
    assert got[1:] == want[1:] == (25.0, 3, 11)
    for g, w in zip(got_args, want_args):
        assert [getattr(g, n, None) for n in ("_c", "_size", "a", "b")] == [
            getattr(w, n, None) for n in ("_c", "_size", "a", "b")
        ]


class _Dynamic:
    def __init__(self, t: torch.Tensor) -> None:
        self.t = t

    def __getattr__(self, name: str) -> Any:
        if name.startswith("times"):
            return self.t * int(name[5:])
        raise AttributeError(name)


def _dynamic_attributes(t: torch.Tensor) -> tuple:
    d = _Dynamic(t)
    return d.times3 + d.t, hasattr(d, "nope"), getattr(d, "times" + "2").shape


def test_getattr_fallback_of_an_object_made_in_the_frame_is_inlined() -> None:
    t = torch.ones(2)
    explained = framejit.explain(_dynamic_attributes, t)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    got, want = framejit.jit(_dynamic_attributes)(t), _dynamic_attributes(t)
    same(got[0], want[0])
    assert got[1:] == want[1:] == (False, torch.Size([2]))


class _Base:
    pass


class _Derived(_Base):
    pass


def _reads_the_mro(t: torch.Tensor) -> tuple:
    names = [c.__name__ for c in _Derived.__mro__]
    return t + len(_Derived.__bases__), names, _Derived.__bases__[0] is _Base


def test_a_classes_mro_and_bases_are_constants() -> None:
    t = torch.ones(1)
    explained = framejit.explain(_reads_the_mro, t)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    got, want = framejit.jit(_reads_the_mro)(t), _reads_the_mro(t)
    same(got[0], want[0])
    assert got[1:] == want[1:] == (["_Derived", "_Base", "object"], True)


def _tensor_in_its_own_list(t: torch.Tensor) -> tuple:
    seen = [t, 3]
    return t + 1, t in seen, t in (t,)


def test_a_tensor_found_by_identity_in_a_list_is_no_break() -> None:
    """`t in [t, 3]`: the first item is `t` itself, so Python compares no values; it broke
    (`in` with a tensor). A tensor that must be compared by value still raises as eager."""
    t = torch.ones(2)
    explained = framejit.explain(_tensor_in_its_own_list, t)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    got, want = framejit.jit(_tensor_in_its_own_list)(t), _tensor_in_its_own_list(t)
    same(got[0], want[0])
    assert got[1:] == want[1:] == (True, True)
    with pytest.raises(RuntimeError, match="ambiguous"):
        framejit.jit(lambda a, b: b in [a, 3])(torch.ones(2), torch.zeros(2))


class _CachesAProduct:
    def __init__(self, t: torch.Tensor) -> None:
        self.t, self.calls = t, 0

    @functools.cached_property
    def squared(self) -> torch.Tensor:
        self.calls += 1
        return self.t * self.t


def _reads_a_cached_property(x: torch.Tensor, h: _CachesAProduct) -> tuple:
    return x + h.squared + h.squared, h.calls


def test_functools_cached_property_on_an_argument_is_one_graph() -> None:
    """Its value is computed once and stored in the instance dict, as its __get__ does (whose
    RLock on Python 3.11 is a `with` the translator does not model: it broke the graph)."""
    x = torch.ones(2)
    explained = framejit.explain(_reads_a_cached_property, x, _CachesAProduct(torch.ones(2)))
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    got_h, want_h = _CachesAProduct(torch.full((2,), 3.0)), _CachesAProduct(torch.full((2,), 3.0))
    got = framejit.jit(_reads_a_cached_property)(x, got_h)
    want = _reads_a_cached_property(x, want_h)
    same(got[0], want[0])
    assert got[1] == want[1] == 1 and got_h.calls == want_h.calls == 1
    same(vars(got_h)["squared"], vars(want_h)["squared"])
    got = framejit.jit(_reads_a_cached_property)(x, got_h)  # cached now: no call
    assert got[1] == 1 and got_h.calls == 1


class _Point(typing.NamedTuple):
    x: torch.Tensor
    k: int = 2

    def scaled(self, s: float) -> torch.Tensor:
        return self.x * s * self.k

    @property
    def norm(self) -> torch.Tensor:
        return self.x.abs().sum()


def _uses_named_tuple_methods(t: torch.Tensor) -> tuple:
    p = _Point(t)
    return p.scaled(3) + p.norm, p.k


def test_methods_and_properties_of_a_typing_named_tuple_are_inlined() -> None:
    t = torch.ones(2)
    explained = framejit.explain(_uses_named_tuple_methods, t)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    got, want = framejit.jit(_uses_named_tuple_methods)(t), _uses_named_tuple_methods(t)
    same(got[0], want[0])
    assert got[1] == want[1] == 2


_Pair = collections.namedtuple("_Pair", "a b")


def _makes_a_pair(t: torch.Tensor) -> tuple:
    m = _Pair._make([t * 2, 3.0])
    n = m._replace(b=4.0)
    return m.a + n.b, m.b, type(m).__name__


def test_namedtuple_make_is_captured() -> None:
    """`_make` builds through `tuple.__new__(cls, items)`, a C call that broke the graph."""
    t = torch.ones(1)
    explained = framejit.explain(_makes_a_pair, t)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    got, want = framejit.jit(_makes_a_pair)(t), _makes_a_pair(t)
    same(got[0], want[0])
    assert got[1:] == want[1:] == (3.0, "_Pair")


# --- iterator classes and the __getitem__ protocol ---------------------------------------------


class _Countdown:
    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self) -> _Countdown:
        return self

    def __next__(self) -> int:
        if self.n <= 0:
            raise StopIteration
        self.n -= 1
        return self.n


class _Rows:  # iterated by the old protocol: obj[0], obj[1], ... until IndexError
    def __init__(self, items: list) -> None:
        self.items = items
        self.reads = 0

    def __getitem__(self, i: int) -> Any:
        self.reads += 1
        return self.items[i]


class _Box:  # an __iter__ that returns a separate iterator object
    def __init__(self, tensors: list) -> None:
        self.tensors = tensors

    def __iter__(self) -> _BoxIter:
        return _BoxIter(self.tensors)


class _BoxIter:
    def __init__(self, tensors: list) -> None:
        self.tensors, self.i = tensors, 0

    def __iter__(self) -> _BoxIter:
        return self

    def __next__(self) -> torch.Tensor:
        if self.i >= len(self.tensors):
            raise StopIteration
        self.i += 1
        return self.tensors[self.i - 1]


def test_iterator_classes_and_getitem_iteration_are_traced() -> None:
    # each was a graph break ("iterating over _Rows"), and an iterator class whose __iter__
    # returns self made the translator recurse without end (an internal error)
    def counts(x):
        for i in _Countdown(3):
            x = x + i
        return x

    def rows(x):
        out = [x * v for v in _Rows([1, 2, 3])]
        a, b = _Rows([x, x + 1])
        return out, a - b

    def from_outside(x, cd, box, seq):
        total = sum(t * x for t in box)
        it = iter(cd)
        first = next(it)
        return total + first, list(it), cd.n, [v * x for v in seq], seq.reads

    check(counts, torch.randn(3))
    check(rows, torch.randn(3))
    counter = CompileCounter()
    jitted = framejit.jit(from_outside, backend=counter)
    box = _Box([torch.ones(2), torch.full((2,), 2.0)])
    for _ in range(2):
        x = torch.randn(2)
        cd_a, cd_b, seq_a, seq_b = _Countdown(4), _Countdown(4), _Rows([1, 5]), _Rows([1, 5])
        same(jitted(x, cd_a, box, seq_a), from_outside(x, cd_b, box, seq_b))
        assert (cd_a.n, seq_a.reads) == (cd_b.n, seq_b.reads) == (0, 3)
    assert counter.frame_count == 1


def test_iterator_classes_resume_after_a_break(capsys) -> None:
    # the loop's iterator reaches the code after the break: the object itself, or the rest of
    # a __getitem__ iteration (no item read twice)
    def loop(x, cd, seq):
        out = []
        for i in cd:
            out.append(x + i)
            print("i", i)
        for v in seq:
            out.append(x * v)
            print("v", v)
        return out, cd.n, seq.reads

    jitted = framejit.jit(loop, backend="eager")
    x = torch.randn(2)
    for _ in range(2):
        cd_a, cd_b, seq_a, seq_b = _Countdown(3), _Countdown(3), _Rows([2, 3]), _Rows([2, 3])
        same(jitted(x, cd_a, seq_a), loop(x, cd_b, seq_b))
        assert seq_a.reads == seq_b.reads == 3
        printed = capsys.readouterr().out.splitlines()
        assert printed[: len(printed) // 2] == printed[len(printed) // 2 :]


class _Logged:
    """An iterator class that logs each __next__, to compare when items are taken."""

    def __init__(self, n: int, log: list, tag: str = "a") -> None:
        self.n, self.i, self.log, self.tag = n, 0, log, tag

    def __iter__(self) -> _Logged:
        return self

    def __next__(self) -> int:
        if self.i >= self.n:
            raise StopIteration
        self.i += 1
        self.log.append((self.tag, self.i))
        return self.i


def test_iterator_objects_give_items_only_when_asked(capsys) -> None:
    # zip, enumerate, islice and a loop that breaks took every item first (the iterator read
    # to its end, __next__ calls out of order with the loop body)
    def zipped(x, a, b, log):
        return [x * (i + j) for i, j in zip(a, b)], a.i, b.i

    def enumerated(x, it, log):
        for k, v in enumerate(it):
            if k == 1:
                break
            x = x + v
        return x, it.i

    def with_next(x, it, log):
        first = next(it)
        return x + first + next(it, 100), it.i

    def loop_with_a_break(x, it, log):
        for v in it:
            log.append(("body", v))
            print(v)  # a graph break in the body
            x = x + v
        return x

    for fn, make in (
        (zipped, lambda log: (_Logged(5, log, "a"), _Logged(2, log, "b"))),
        (enumerated, lambda log: (_Logged(10, log),)),
        (with_next, lambda log: (_Logged(1, log),)),
        (loop_with_a_break, lambda log: (_Logged(3, log),)),
    ):
        jitted = framejit.jit(fn, backend="eager")
        for _ in range(2):
            x = torch.randn(2)
            log_a, log_b = [], []
            same(jitted(x, *make(log_a), log_a), fn(x, *make(log_b), log_b))
            assert log_a == log_b, fn.__name__
        capsys.readouterr()


def test_a_grad_mode_decorator_on_a_function_the_frame_defines() -> None:
    # `@torch.no_grad()` on a nested helper: torch's context_decorator closure held the
    # no_grad object, which could not be rebuilt (a graph break, no graph)
    def fn(x):
        @torch.no_grad()
        def frozen(t):
            return t * 2

        @torch.enable_grad()
        def tracked(t):
            return t * 3

        a = frozen(x)
        b = tracked(x)
        return a + 1, b, a.requires_grad, b.requires_grad

    x = torch.randn(3, requires_grad=True)
    check(fn, x)
    with torch.no_grad():
        check(fn, x)


def _counted(x):
    _counted.calls = getattr(_counted, "calls", 0) + 1  # a call counter kept on the function
    return x * _counted.calls


def _flag_holder():
    pass


def test_a_missing_attribute_of_a_function_is_guarded_absent() -> None:
    # getattr(f, "calls", 0) / hasattr(helper, "flag") of a function without them folded to
    # the default with no guard: the counter stayed 1, a flag set later was not seen
    def flagged(x):
        return x + (1 if hasattr(_flag_holder, "flag") else 0)

    jitted = framejit.jit(_counted, backend="eager")
    got = [jitted(torch.ones(1)).item() for _ in range(3)]
    del _counted.calls
    want = [_counted(torch.ones(1)).item() for _ in range(3)]
    assert got == want == [1.0, 2.0, 3.0]
    fast = framejit.jit(flagged, backend="eager")
    before = fast(torch.ones(1)).item()
    _flag_holder.flag = True
    try:
        assert (before, fast(torch.ones(1)).item()) == (1.0, 2.0)
    finally:
        del _flag_holder.flag


def test_dict_in_place_union_with_tensor_values() -> None:
    # `d |= {...}` with a tensor value hit an internal AttributeError (a graph break)
    def fn(x, outside):
        d = {"z": 1}
        alias = d
        d |= {"t": x * 2}
        outside |= {"u": x + 1}
        return d, alias is d, alias["t"]

    counter = CompileCounter()
    jitted = framejit.jit(fn, backend=counter)
    x = torch.randn(2)
    got_dict, want_dict = {"a": 0}, {"a": 0}
    same(jitted(x, got_dict), fn(x, want_dict))
    same(got_dict, want_dict)
    assert counter.frame_count == 1


def test_grad_fn_and_is_leaf_of_a_tensor_the_graph_makes() -> None:
    # `y.grad_fn is None` broke the graph (the grad_fn object cannot be a graph value)
    def fn(x):
        y = x * 2
        z = y.detach() + 1
        name = y.grad_fn.name() if y.grad_fn is not None else "none"
        return y, z, y.grad_fn is None, z.grad_fn is None, y.is_leaf, z.is_leaf, name

    def folds(x):
        y = x * 2
        return y, y.grad_fn is None, (y + 1).detach().grad_fn is None, bool(y.grad_fn)

    counter = check(fn, torch.randn(3, requires_grad=True), graphs=None)
    assert counter.frame_count <= 2  # `.name()` of the real grad_fn is read after the graph
    check(fn, torch.randn(3), graphs=1)
    check(folds, torch.randn(3, requires_grad=True), graphs=1)


class _Counted:
    count = 0
    step = 1.5
    scale = 2


class _CountedSub(_Counted):
    pass


def test_class_attribute_writes_and_reads_through_instances() -> None:
    # `Cls.count += 1` broke the graph; an object made in the frame read a class attribute as
    # a constant with no guard, so `Cls.scale = 3` between calls was not seen
    def fn(x, obj):
        _Counted.count += 1
        _CountedSub.step = _CountedSub.step * 2
        o = _Counted()
        total = x * _Counted.count + obj.count + o.count + _CountedSub.count
        return total * o.scale, _CountedSub.step, _Counted.step, o.step

    counter = CompileCounter()
    jitted = framejit.jit(fn, backend=counter)
    try:
        got = [jitted(torch.ones(1), _CountedSub()) for _ in range(4)]
        _Counted.scale = 3
        got.append(jitted(torch.ones(1), _CountedSub()))
        got_state = (_Counted.count, _CountedSub.step, "step" in vars(_CountedSub))
        _Counted.count, _Counted.scale = 0, 2
        del _CountedSub.step
        want = [fn(torch.ones(1), _CountedSub()) for _ in range(4)]
        _Counted.scale = 3
        want.append(fn(torch.ones(1), _CountedSub()))
        assert got_state == (_Counted.count, _CountedSub.step, "step" in vars(_CountedSub))
        same(got, want)
        assert counter.frame_count <= 5, counter.frame_count
    finally:
        _Counted.count, _Counted.scale = 0, 2
        vars(_CountedSub).get("step") is not None and delattr(_CountedSub, "step")


class _LazyBag:
    def __init__(self, items: list) -> None:
        self.items, self.reads = items, 0

    def __iter__(self):
        for item in self.items:
            self.reads += 1
            yield item


def test_in_walks_the_iteration_of_a_class_without_contains() -> None:
    # `x in obj` without __contains__ goes through __iter__ (or __getitem__) up to the first
    # match, as Python does: it broke the graph
    def fn(x, bag):
        found = (3 in bag) + (9 in _Rows([1, 9])) + (7 in bag)
        return x + found, bag.reads

    counter = CompileCounter()
    jitted = framejit.jit(fn, backend=counter)
    for _ in range(2):
        a, b = _LazyBag([1, 3, 5]), _LazyBag([1, 3, 5])
        same(jitted(torch.ones(1), a), fn(torch.ones(1), b))
        assert a.reads == b.reads == 5
    assert counter.frame_count == 1
    assert framejit.explain(fn, torch.ones(1), _LazyBag([1, 3])).graph_break_count == 0


class _Idx:
    def __init__(self, v: int) -> None:
        self.v = v

    def __index__(self) -> int:
        return self.v


def test_objects_with_a_python_index_as_list_and_tensor_indices() -> None:
    # `lst[Idx(2)]` and `x[Idx(1)]` broke the graph ("indexing a list with a _Idx")
    def fn(x, i):
        lst = [10, 20, 30]
        lst[_Idx(0)] = 5
        x[_Idx(0)] = 7.0
        return x[_Idx(1)], lst[_Idx(2)] + x, x[i, _Idx(0)], lst

    counter = CompileCounter()
    jitted = framejit.jit(fn, backend=counter)
    for _ in range(2):
        a, b = torch.zeros(3, 2), torch.zeros(3, 2)
        same(jitted(a, _Idx(2)), fn(b, _Idx(2)))
        same(a, b)
    assert counter.frame_count == 1
    assert framejit.explain(fn, torch.zeros(3, 2), _Idx(1)).graph_break_count == 0


class _Fmt:
    def __init__(self, v: int) -> None:
        self.v = v

    def __format__(self, spec: str) -> str:
        return f"F{self.v}{spec}"


class _Shown:
    def __init__(self, n: str) -> None:
        self.n = n

    def __str__(self) -> str:
        return f"<{self.n}>"

    def __repr__(self) -> str:
        return f"_Shown({self.n!r})"


def test_f_strings_of_objects_with_python_format_str_and_repr() -> None:
    # an f-string field of a user object broke the graph ("formatting a _Fmt into a string")
    def fn(x, named):
        s = f"{_Fmt(3):>3} {named} {named!r} {named!s:>10} {_Shown('q')}"
        return x * len(s), s

    check(fn, torch.ones(1), _Shown("a"))
    assert framejit.explain(fn, torch.ones(1), _Shown("a")).graph_break_count == 0


class _WithParameterList(nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.pl = nn.ParameterList([nn.Parameter(torch.randn(3)) for _ in range(n)])

    def forward(self, x):
        for p in self.pl:
            x = x * p
        return x + sum(p.sum() for p in self.pl)


def test_iterating_a_parameter_list() -> None:
    # `for p in self.pl` broke the graph ("iterating over ParameterList"); appending a
    # parameter between calls compiles again
    m = _WithParameterList(3)
    assert framejit.explain(m, torch.randn(3)).graph_break_count == 0
    jitted = framejit.jit(m)
    x = torch.randn(3)
    for grow in (False, True):
        if grow:
            m.pl.append(nn.Parameter(torch.randn(3)))
        got = jitted(x)
        torch.testing.assert_close(got, m(x))
        got.sum().backward()
        g_got = [p.grad.clone() for p in m.pl]
        m.zero_grad()
        m(x).sum().backward()
        torch.testing.assert_close(g_got, [p.grad for p in m.pl])
        m.zero_grad()


class _Registry(collections.abc.MutableMapping):
    """A Mapping written in Python, as transformers' attention-function registry is."""

    shared = {"eager": 1, "sdpa": 2}

    def __init__(self) -> None:
        self.local: dict = {}

    def __getitem__(self, k):
        return self.local[k] if k in self.local else self.shared[k]

    def __setitem__(self, k, v):
        self.local[k] = v

    def __delitem__(self, k):
        del self.local[k]

    def __iter__(self):
        return iter({**self.shared, **self.local})

    def __len__(self) -> int:
        return len(self.shared.keys() | self.local.keys())


_REGISTRY = _Registry()


def test_keys_values_items_of_a_python_mapping() -> None:
    # `Mapping.keys()` returns `KeysView(self)`, which was a graph break ("creating a
    # KeysView object": transformers' ALL_ATTENTION_FUNCTIONS.valid_keys() in whole-script)
    def fn(x):
        ks = list(_REGISTRY.keys())
        vs = list(_REGISTRY.values())
        items = dict(_REGISTRY.items())
        in_keys = "sdpa" in _REGISTRY.keys()  # noqa: SIM118 - the view's own __contains__
        return x * len(ks) + sum(vs), in_keys, len(_REGISTRY.keys()), items

    check(fn, torch.ones(1))
    assert framejit.explain(fn, torch.ones(1)).graph_break_count == 0
    jitted = framejit.jit(fn, backend="eager")
    _REGISTRY["flash"] = 5  # a new key: the guards on the mapping's dicts see it
    try:
        same(jitted(torch.ones(1)), fn(torch.ones(1)))
    finally:
        del _REGISTRY["flash"]


def _devices(x):
    here = torch.device("cpu")
    index = torch.device("cpu", 0)
    named = torch.device(type="cpu")
    moved = x.to(here) if x.device != torch.device("meta") else x
    made = torch.zeros(2, device=torch.device("cpu"))
    return moved * 2, made, here, str(index), named == x.device, here.type


def _bad_device(x):
    try:
        torch.device("nonsense")
    except RuntimeError as err:
        return x + 1, str(err)[:16]


@pytest.mark.parametrize("fn", [_devices, _bad_device])
def test_torch_device_made_from_constants_is_a_constant(fn):
    # `torch.device("cpu")` was a break ("creating a device object"): Hugging Face's
    # init_weights, `x.to(torch.device(...))`; a bad name raises eager's RuntimeError
    check(fn, torch.ones(2))


_NAMES = {"a": 1, "b": 2}


def _sets_of_views(x):
    names = ["eager", *sorted(set(_REGISTRY.keys()) | set(_NAMES.keys()))]
    values = set(_NAMES.values())
    values.add(9)
    return x * len(names), "a" in frozenset(_NAMES.keys()), sorted(values)


def test_sets_of_dict_and_mapping_views():
    # `set(ALL_FUNCTIONS.keys())` (Hugging Face's experts registry) was a break
    check(_sets_of_views, torch.ones(2))
    framejit.reset()
    assert framejit.explain(_sets_of_views, torch.ones(2)).graph_break_count == 0

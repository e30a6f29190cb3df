"""Graph breaks: what framejit cannot capture runs for real between compiled graphs.

Every case runs eagerly and through `jit` (twice or more), compares results on real tensors,
checks that the Python side effects (printing, attribute writes) happen exactly as often as in
eager, and asserts how many graphs were compiled and how many breaks `explain` reports.
"""

from __future__ import annotations

import dis
import sys
import warnings
from typing import Any

import pytest
import torch

import framejit
from framejit.testing import CompileCounter


def same(a, b) -> None:
    if isinstance(a, torch.Tensor):
        torch.testing.assert_close(a, b)
    elif isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            same(x, y)
    else:
        assert a == b


def run_both(fn, *args, calls: int = 2, capsys=None):
    """Run eagerly and compiled `calls` times; return (counter, compiled results)."""
    counter = CompileCounter()
    jitted = framejit.jit(fn, backend=counter)
    for _ in range(calls):
        expected = fn(*args)
        eager_out = capsys.readouterr().out if capsys else None
        got = jitted(*args)
        if capsys:
            assert capsys.readouterr().out == eager_out
        same(got, expected)
    return counter


def breaks_of(fn, *args) -> list[str]:
    return framejit.explain(fn, *args).break_reasons


# --- where a break can happen ---------------------------------------------------------------


def print_in_the_middle(x):
    a = x.sin() * 2
    print("a has shape", tuple(a.shape))
    return a.cos() + 1


def test_print_between_two_graphs(capsys) -> None:
    x = torch.randn(4)
    counter = run_both(print_in_the_middle, x, capsys=capsys)
    assert counter.frame_count == 2  # before and after the print; the second call hits both
    (reason,) = breaks_of(print_in_the_middle, x)
    assert "print" in reason and "test_graph_breaks.py" in reason


def branch_on_values(x):
    y = x * 3
    if y.sum() > 0:
        z = y.relu()
    else:
        z = y.sigmoid()
    return z - 1


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_if_on_a_tensor_value_takes_the_right_arm(sign: float) -> None:
    x = torch.rand(5) * sign
    counter = run_both(branch_on_values, x)
    assert counter.frame_count == 2  # the condition, then the arm that ran
    (reason,) = breaks_of(branch_on_values, x)
    assert "if tensor" in reason


def test_both_arms_compile_once_each() -> None:
    counter = CompileCounter()
    jitted = framejit.jit(branch_on_values, backend=counter)
    for sign in (1.0, -1.0, 1.0, -1.0):
        x = torch.rand(5) * sign
        same(jitted(x), branch_on_values(x))
    assert counter.frame_count == 3  # condition graph + one graph per arm


def closure_across_arms(x, scale):
    def helper(t):
        return t * scale

    y = helper(x)
    if (y > 0).any():  # a break with a closure made in the frame live: rebuilt on each arm
        y = helper(y) + 1
    else:
        y = helper(y) - 1
    return y, helper


def test_an_object_made_in_the_frame_is_rebuilt_on_either_arm_of_a_break() -> None:
    jitted = framejit.jit(closure_across_arms, backend="eager")
    for sign in (1.0, -1.0, -1.0, 1.0):  # the jump's target arm first, too
        x = torch.ones(3) * sign
        got, helper = jitted(x, 2.0)
        same(got, closure_across_arms(x, 2.0)[0])
        same(helper(x), x * 2.0)


def item_then_math(x):
    s = x.abs().max().item()
    return x / s


def test_item_reads_a_value_then_continues() -> None:
    x = torch.randn(6)
    counter = run_both(item_then_math, x)
    assert counter.frame_count == 2


def loop_with_print(xs, w):
    out = []
    for i, x in enumerate(xs):
        y = x @ w
        print("step", i)
        out.append(y.relu())
    return out


def test_break_inside_a_for_loop(capsys) -> None:
    xs, w = [torch.randn(2, 3) for _ in range(3)], torch.randn(3, 3)
    counter = run_both(loop_with_print, xs, w, capsys=capsys)
    assert counter.frame_count >= 3


def while_with_break(x, n):
    i = 0
    while i < n:
        x = x * 2
        if x.abs().sum() > 100:
            break
        i += 1
    return x, i


@pytest.mark.parametrize("scale", [0.01, 10.0])
def test_break_inside_a_while_loop(scale: float) -> None:
    run_both(while_with_break, torch.ones(3) * scale, 5)


def decode_loop(w, x, n):
    outs = []
    for i in range(n):
        x = torch.tanh(x @ w) + i
        if x.sum() > 1e9:  # a condition on values: a break in every iteration
            break
        outs.append(x * 2)
    return torch.stack(outs)


def test_a_range_loop_that_breaks_every_iteration_compiles_its_body_a_few_times() -> None:
    # The resume function of iteration 2 is the same code as that of iteration 1 (the break
    # maps back to the user's instruction) and its range's start is symbolic from the first
    # resume, so 40 iterations make 3 graphs: before the loop, the steps, the loop's exit.
    w, x = torch.randn(4, 4) * 0.3, torch.randn(1, 4)
    counter = run_both(decode_loop, w, x, 40)
    assert counter.frame_count == 3
    # another length: the loop's stop becomes symbolic too, at most one graph more
    run_both(decode_loop, w, x, 25, calls=1)
    assert counter.frame_count <= 5


class _Switch:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def decode_while_in_try(w, x, n, how):
    outs, i = [], 0
    if how == "with":
        with _Switch():
            while i < n:  # a while loop inside a `with`: resumes jump into a `try` range
                x = torch.tanh(x @ w) + 1
                if x.sum() > 1e9:
                    break
                outs.append(x)
                i += 1
    else:
        try:
            while i < n:
                x = torch.tanh(x @ w) + 1
                if x.sum() > 1e9:
                    break
                outs.append(x)
                i += 1
        finally:
            outs.append(x * 0)
    return torch.cat(outs), i


@pytest.mark.parametrize("how", ["with", "finally"])
def test_a_loop_inside_a_try_that_breaks_every_iteration_reuses_its_resume_function(how) -> None:
    # Inside a `with` or `try` the resume function's prologue jumps into a try range through
    # a stub range (no instructions): a break in it still maps back to the user's instruction,
    # so each iteration resumes in the same code (Hugging Face's decode loop under `with
    # self._optimize_model_for_decode()` compiled once per token, up to max_resume_depth).
    w, x = torch.randn(4, 4) * 0.3, torch.randn(1, 4)
    # before the loop, i == 0 and 1 (specialized), i symbolic, the last iteration (i < 40 gave
    # the symbolic i an upper bound): 5 graphs for 40 iterations (17, then Python, before)
    counter = run_both(decode_while_in_try, w, x, 40, how)
    assert counter.frame_count <= 5
    before = counter.frame_count
    run_both(decode_while_in_try, w, x, 37, how, calls=1)
    assert counter.frame_count <= before + 2


def step_loop(x, start, stop, step):
    seen = []
    for i in range(start, stop, step):
        x = x * 0.5 + i
        if x.max() > 1e9:
            break
        seen.append(i)
    else:
        seen.append("done")
    return x, seen


# (start, stop, step), most graphs. The range's bounds may be any int; the loop variable `i`,
# read after the break, is an int argument of the resume function, symbolic for values >= 2
# only (ints are sizes to torch): counting down through 1, 0 and below compiles those steps.
@pytest.mark.parametrize(
    "bounds, most",
    [((0, 30, 3), 3), ((40, 10, -2), 3), ((20, -7, -2), 6), ((5, 5, 1), 0), ((3, 4, 1), 1)],
)
def test_range_loops_resumed_with_any_step_give_eagers_values(bounds, most) -> None:
    counter = run_both(step_loop, torch.randn(3), *bounds)
    assert counter.frame_count <= most


def nested_range_loops(x, n, m):
    for i in range(n):
        for j in range(m):
            x = x + i * j
            if x.sum() > 1e12:  # a break in the inner body
                return x
    return x


def test_nested_range_loops_that_break_compile_a_few_graphs_without_warning() -> None:
    # a graph per combination of the two loops' paths (body, inner exit, outer exit), not per step
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no recompile-limit warning
        counter = run_both(nested_range_loops, torch.zeros(3), 6, 7)
    assert counter.frame_count <= 6


def loop_over_a_held_iterator(x, n):
    it = iter(range(n))
    for i in it:
        x = x + i
        print(i)  # a break while a local holds the loop's iterator too
        if i == 2:
            x = x * next(it)  # advances the loop's own iterator
    return x


def test_a_loop_over_an_iterator_a_local_holds_keeps_one_iterator(capsys) -> None:
    # the resume function gets the real iterator itself (were the loop handed its items, the
    # local would be another iterator, and next(it) would skip nothing, or raise)
    run_both(loop_over_a_held_iterator, torch.ones(2), 6, capsys=capsys)


def early_exit(x, n):
    for i in range(n):
        x = x + i
        if x.sum() > 40:  # a real `break` after a few iterations
            break
    return x, i


def test_a_range_loop_left_by_break_in_a_resume_function() -> None:
    run_both(early_exit, torch.zeros(4), 30)


def while_decode(x, n):
    steps = 0
    while steps < n:
        x = x.roll(1) * 1.01
        if bool(x.sum() > 1e9):
            break
        steps += 1
    return x, steps


def test_a_while_loop_that_breaks_every_iteration_reuses_its_resume_function() -> None:
    counter = run_both(while_decode, torch.randn(5), 30)
    assert counter.frame_count <= 5


def stack_depths(x, n):
    depths = []
    for _ in range(n):
        x = x + 1
        if x.sum() > 1e12:
            break
        depths.append(len(__import__("inspect").stack(0)))
    return x, depths


def test_resumed_iterations_do_not_nest_python_calls() -> None:
    # 1500 iterations, each resumed after a break: more than the recursion limit would allow
    # if each resume function called the next one
    jitted = framejit.jit(stack_depths, backend=CompileCounter())
    _, depths = jitted(torch.zeros(2), 1500)
    assert len(depths) == 1500
    assert len(set(depths[2:])) == 1  # one depth from the third iteration on


def test_range_loops_resume_under_dynamic_true_and_false() -> None:
    w, x = torch.randn(4, 4) * 0.3, torch.randn(1, 4)
    for dynamic, most in ((True, 4), (False, 30)):
        counter = CompileCounter()
        jitted = framejit.jit(decode_loop, backend=counter, dynamic=dynamic)
        framejit.config.recompile_limit, old = 64, framejit.config.recompile_limit
        try:
            same(jitted(w, x, 20), decode_loop(w, x, 20))
        finally:
            framejit.config.recompile_limit = old
        assert counter.frame_count <= most


def helper_that_prints(t):
    print("inside the helper")
    return t * 2


def calls_a_breaking_helper(x):
    y = x + 1
    z = helper_that_prints(y)
    return z - 3


def test_break_inside_a_callee_compiles_the_callee_on_its_own(capsys) -> None:
    x = torch.randn(3)
    counter = run_both(calls_a_breaking_helper, x, capsys=capsys)
    # caller before the call, the callee after its print, the caller after the call
    assert counter.frame_count == 3
    reasons = breaks_of(calls_a_breaking_helper, x)
    assert any("helper_that_prints" in r for r in reasons)


def nested_call_with_a_null_below(x):
    return torch.add(x, helper_that_prints(x))


def test_break_with_a_null_and_a_callable_below_on_the_stack(capsys) -> None:
    run_both(nested_call_with_a_null_below, torch.randn(3), capsys=capsys)


def print_with_keywords(x):
    y = x.exp()
    print("value", end="!\n", sep="=")
    return y.log()


def test_break_at_a_call_with_keyword_arguments(capsys) -> None:
    instructions = {i.opname for i in dis.get_instructions(print_with_keywords)}
    assert "KW_NAMES" in instructions or "CALL_KW" in instructions
    counter = run_both(print_with_keywords, torch.rand(3) + 0.5, capsys=capsys)
    assert counter.frame_count == 2


class Box:
    def __init__(self) -> None:
        self.value = None

    def describe(self, t):
        print("describing", tuple(t.shape))
        return t.mean()


class Guarded:
    """Attribute writes go through a custom __setattr__: they run for real, at a break."""

    def __setattr__(self, name, value):
        object.__setattr__(self, name, value * 1)


def writes_an_attribute(x, box):
    box.value = x * 2
    return box.value + 1


def test_break_at_an_attribute_write_that_cannot_be_replayed() -> None:
    x = torch.randn(3)
    eager_box, jit_box = Guarded(), Guarded()
    counter = CompileCounter()
    jitted = framejit.jit(writes_an_attribute, backend=counter)
    for _ in range(2):
        same(jitted(x, jit_box), writes_an_attribute(x, eager_box))
        same(jit_box.value, eager_box.value)
    assert counter.frame_count == 2
    (reason,) = breaks_of(writes_an_attribute, x, Guarded())
    assert "__setattr__" in reason


def calls_a_method_that_prints(x, box):
    m = box.describe(x * 2)
    return m + x


def test_break_inside_a_method(capsys) -> None:
    run_both(calls_a_method_that_prints, torch.randn(3), Box(), capsys=capsys)


def make_closure():
    k = 3.0

    def fn(x):
        y = x * k
        print("closure")
        return y + k

    return fn


def test_break_in_a_function_with_free_variables(capsys) -> None:
    run_both(make_closure(), torch.randn(3), capsys=capsys)


def keeps_objects_across_the_break(x):
    acc = [x]
    d = {"first": x * 2}
    print("breaking")
    acc.append(d["first"] + 1)
    return acc, d


def test_containers_made_before_the_break_are_the_same_objects_after(capsys) -> None:
    x = torch.randn(3)
    counter = CompileCounter()
    jitted = framejit.jit(keeps_objects_across_the_break, backend=counter)
    for _ in range(2):
        acc, d = jitted(x)
        capsys.readouterr()
        assert acc[0] is x  # the input itself, not a copy
        same(acc[1], d["first"] + 1)


def returns_the_input_after_a_break(x):
    print("identity")
    return x


def test_identity_survives_a_break(capsys) -> None:
    x = torch.randn(3)
    jitted = framejit.jit(returns_the_input_after_a_break, backend=CompileCounter())
    assert jitted(x) is x and jitted(x) is x


class PrintingBlock(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.b = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.a(x).relu()
        print("hidden norm computed")
        return self.b(h)


def test_break_inside_a_module_forward(capsys) -> None:
    torch.manual_seed(0)
    model = PrintingBlock().eval()
    jitted = framejit.jit(model, backend=CompileCounter())
    x = torch.randn(2, 4)
    with torch.no_grad():
        for _ in range(2):
            expected = model(x)
            eager_out = capsys.readouterr().out
            same(jitted(x), expected)
            assert capsys.readouterr().out == eager_out


def test_new_shapes_after_a_break_recompile_each_piece() -> None:
    counter = CompileCounter()
    jitted = framejit.jit(print_in_the_middle, backend=counter)
    for n in (3, 3, 5, 5):
        x = torch.randn(n)
        same(jitted(x), print_in_the_middle(x))
    assert counter.frame_count == 4


def raises_after_work(x):
    y = x * 2
    if y.sum() > 1e9:
        raise ValueError("too big")
    return y


def test_an_exception_raised_in_resumed_code_reaches_the_caller() -> None:
    jitted = framejit.jit(raises_after_work, backend=CompileCounter())
    same(jitted(torch.ones(2)), raises_after_work(torch.ones(2)))
    with pytest.raises(ValueError, match="too big"):
        jitted(torch.full((2,), 1e10))


# --- fullgraph and limits -------------------------------------------------------------------


def test_fullgraph_turns_the_first_break_into_an_error() -> None:
    jitted = framejit.jit(print_in_the_middle, fullgraph=True)
    with pytest.raises(framejit.FullGraphError) as info:
        jitted(torch.randn(3))
    message = str(info.value)
    assert "print" in message and "test_graph_breaks.py" in message


def test_a_loop_that_breaks_every_iteration_stops_compiling_after_the_limit(capsys) -> None:
    xs, w = [torch.randn(2, 3) for _ in range(12)], torch.randn(3, 3)
    old = framejit.config.max_resume_depth
    framejit.config.max_resume_depth = 4
    try:
        counter = run_both(loop_with_print, xs, w, capsys=capsys)
    finally:
        framejit.config.max_resume_depth = old
    assert counter.frame_count <= 5


def shapes_then_breaks(x, n):
    for _ in range(n):
        x = torch.cat([x, x[-1:] * 0.5])  # a new size at every step
        print(x.shape[0])
    return x


def shape_of_first(x):
    return x.reshape(-1)[: x.shape[0]] * 2


def test_the_recompile_limit_warning_names_the_users_line(capsys, monkeypatch) -> None:
    # the jitted function's warning blames the line that called it (not framejit's code); a
    # resume function (a loop's next steps after a break) that reaches the limit is said in the
    # `recompiles` log instead, as a chain past max_resume_depth is, and runs as Python
    monkeypatch.setattr(framejit.config, "recompile_limit", 2)
    jitted = framejit.jit(shape_of_first, backend="eager", dynamic=False)
    with pytest.warns(UserWarning, match="recompiled 2 times") as caught:
        for n in (2, 3, 4):
            jitted(torch.randn(n, 3))  # the line blamed
    assert [(w.filename, w.lineno) for w in caught] == [(__file__, _this_line() - 1)]
    jitted = framejit.jit(shapes_then_breaks, backend="eager", dynamic=False)
    framejit.set_logs(recompiles=True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            same(jitted(torch.ones(1, 2), 6), shapes_then_breaks(torch.ones(1, 2), 6))
    finally:
        framejit.set_logs(recompiles=False)
    err = capsys.readouterr().err
    assert "shapes_then_breaks.<resume at line" in err and "recompiled 2 times" in err


def _this_line() -> int:
    return sys._getframe(1).f_lineno


def mutates_then_breaks(x):
    items = []
    items.append(x * 2)
    items.append(helper_that_prints(x))
    return items


def test_a_break_after_mutating_a_local_list(capsys) -> None:
    run_both(mutates_then_breaks, torch.randn(3), capsys=capsys)


def break_inside_no_grad(x, w):
    with torch.no_grad():
        a = x * w
        print("inside no_grad")
        b = a + w
    return a, b, b * w


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_break_inside_a_grad_mode_block_resumes_inside_it(backend: str, capsys) -> None:
    x, w = torch.randn(3), torch.randn(3, requires_grad=True)
    counter = CompileCounter()
    inner = framejit.backend.lookup_backend(backend)

    def counting(gm, inputs):
        counter(gm, inputs)
        return inner(gm, inputs)

    jitted = framejit.jit(break_inside_no_grad, backend=counting)
    for _ in range(2):
        got, want = jitted(x, w), break_inside_no_grad(x, w)
        same(got, want)
        assert (
            [t.requires_grad for t in got]
            == [t.requires_grad for t in want]
            == [False, False, True]
        )
        assert torch.is_grad_enabled()
    assert counter.frame_count == 2


def raises_inside_no_grad(x, limit):
    with torch.no_grad():
        y = x * 2
        if y.sum() > limit:
            raise ValueError("over the limit")
    return y


def test_an_exception_in_a_resumed_grad_mode_block_restores_grad_mode() -> None:
    jitted = framejit.jit(raises_inside_no_grad, backend=CompileCounter())
    same(jitted(torch.ones(2), 100.0), raises_inside_no_grad(torch.ones(2), 100.0))
    with pytest.raises(ValueError, match="over the limit"):
        jitted(torch.ones(2), 0.0)
    assert torch.is_grad_enabled()


def work_then_try(x):
    y = (x * 2).relu()
    try:
        scale = float(y.sum())
    except ZeroDivisionError:
        scale = 1.0
    return y * scale


def test_a_break_inside_try_compiles_the_work_before_and_after_it() -> None:
    x = torch.randn(4)
    counter = run_both(work_then_try, x)
    assert counter.frame_count == 2  # before the break, and after it (in the resume function)
    assert framejit.explain(work_then_try, x).graph_count == 2


def work_then_unknown_context(x, cm):
    y = x.exp() + 1
    with cm:
        z = y.log()
    return z * 2


def test_work_before_and_inside_a_with_over_an_unknown_context_is_compiled() -> None:
    import threading

    x = torch.rand(4)
    lock = threading.Lock()  # a C context manager: not inlined
    counter = CompileCounter()
    jitted = framejit.jit(work_then_unknown_context, backend=counter)
    for _ in range(2):
        same(jitted(x, lock), work_then_unknown_context(x, lock))
    assert counter.frame_count == 3  # before, inside (entered for real), after
    assert not lock.locked()


# --- breaks inside try, with, and frames with closures ----------------------------------------


def item_then_raise_in_try(x, events):
    y = x.sin()
    try:
        v = y.sum().item()
        if v < 0:
            raise ValueError("negative")
        y = y * v
    except ValueError as err:
        events.append(f"caught {err}")
        y = y - 1
    finally:
        events.append("finally")
    return y.cos()


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_an_exception_raised_after_a_break_inside_try_reaches_its_handler(sign: float) -> None:
    x = torch.rand(4) * sign + 0.01 * sign
    counter = CompileCounter()
    jitted = framejit.jit(item_then_raise_in_try, backend=counter)
    for _ in range(2):
        want_events, got_events = [], []
        same(jitted(x, got_events), item_then_raise_in_try(x, want_events))
        assert got_events == want_events  # the handler and `finally` ran once each
    # Normal path: the work before the break and after it; exception path: the work before
    # it, then the handler and the rest of the frame run as Python.
    assert counter.frame_count == (2 if sign > 0 else 1)


class Loud:
    def __init__(self, fail: bool) -> None:
        self.fail = fail

    def __str__(self) -> str:
        if self.fail:
            raise RuntimeError("cannot format")
        return "loud"


def print_that_may_raise(x, obj):
    y = x + 1
    try:
        print("value:", obj)
        y = y * 2
    except RuntimeError:
        y = y * 3
    return y


@pytest.mark.parametrize("fail", [False, True])
def test_the_instruction_run_for_real_is_covered_by_the_handler(fail: bool, capsys) -> None:
    counter = run_both(print_that_may_raise, torch.randn(3), Loud(fail), capsys=capsys)
    assert counter.frame_count == (1 if fail else 2)  # a handler runs as Python


def raises_from_the_break(x, obj):
    y = x * 2
    print(obj)
    return y


def test_an_exception_from_the_break_instruction_has_the_users_line() -> None:
    import traceback

    jitted = framejit.jit(raises_from_the_break, backend=CompileCounter())
    with pytest.raises(RuntimeError) as info:
        jitted(torch.randn(2), Loud(True))
    frames = traceback.extract_tb(info.value.__traceback__)
    mine = [f for f in frames if f.name == "raises_from_the_break"]
    assert mine and mine[-1].line == "print(obj)"


class Recorder:
    def __init__(self) -> None:
        self.events: list = []

    def __enter__(self):
        self.events.append("enter")
        return self

    def __exit__(self, exc_type, exc, tb):
        self.events.append(("exit", exc_type.__name__ if exc_type else None))
        return False


def with_user_context(x, cm, limit):
    y = x.exp()
    with cm as entered:
        z = y.log() + len(entered.events)
        print("inside")
        if z.sum() > limit:
            raise KeyError("over")
        z = z * 2
    return z


@pytest.mark.parametrize("limit", [1e9, -1e9])
def test_a_with_over_an_unknown_context_is_entered_and_left_once(limit: float, capsys) -> None:
    x = torch.rand(3) + 0.5
    jitted = framejit.jit(with_user_context, backend=CompileCounter())
    for _ in range(2):
        want_cm, got_cm = Recorder(), Recorder()
        try:
            want = with_user_context(x, want_cm, limit)
        except KeyError:
            want = "raised"
        try:
            got = jitted(x, got_cm, limit)
        except KeyError:
            got = "raised"
        if want == "raised":
            assert got == "raised"
        else:
            same(got, want)
        assert got_cm.events == want_cm.events  # __exit__ once, with the exception it saw


def nested_with_and_try(x, cm, limit):
    y = x * 2
    try:
        with cm:  # noqa: SIM117 (two blocks on purpose)
            with torch.no_grad():
                y = y + 1
                print("deep")
                if y.sum() > limit:
                    raise ValueError("over")
                y = y * 3
    except ValueError:
        y = y - 100
    finally:
        y = y + 0.5
    return y, torch.is_grad_enabled()


@pytest.mark.parametrize("limit", [1e9, -1e9])
def test_nested_with_and_try_around_a_break(limit: float, capsys) -> None:
    import contextlib

    x = torch.randn(3, requires_grad=True)
    run_both(nested_with_and_try, x, contextlib.nullcontext(), limit, capsys=capsys)
    assert torch.is_grad_enabled()


def print_inside_autocast(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        a = x @ w
        print("in autocast", torch.is_autocast_enabled("cpu"))
        b = a @ w
    return a, b, b.float() @ w, torch.is_autocast_enabled("cpu")


def test_a_break_inside_an_autocast_block_resumes_inside_it(capsys) -> None:
    x, w = torch.randn(2, 4), torch.randn(4, 4)
    counter = run_both(print_inside_autocast, x, w, capsys=capsys)
    got = framejit.jit(print_inside_autocast, backend=CompileCounter())(x, w)
    assert [t.dtype for t in got[:3]] == [torch.bfloat16, torch.bfloat16, torch.float32]
    assert not torch.is_autocast_enabled("cpu")
    assert counter.frame_count == 3  # before the print (autocast closed in it), inside, after


def closure_sees_later_assignment(x):
    scale = x.max()

    def apply(t):
        return t * scale

    print("closure ready")
    scale = scale + 1
    return apply(x)


def nonlocal_counter(x):
    count = 0

    def bump():
        nonlocal count
        count += 1
        return count

    bump()
    print("between")
    bump()
    return x * count, bump


def test_cells_stay_shared_between_a_closure_and_the_resumed_frame(capsys) -> None:
    x = torch.randn(4)
    counter = run_both(closure_sees_later_assignment, x, capsys=capsys)
    assert counter.frame_count == 2
    jitted = framejit.jit(nonlocal_counter, backend=CompileCounter())
    for _ in range(2):
        got, bump = jitted(x)
        same(got, x * 2)
        assert bump() == 3  # the returned closure shares the frame's cell


# --- instructions the translator does not capture ---------------------------------------------

_DELETED = 0


def test_a_class_statement_is_a_break_not_an_eager_frame() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        y = x * 2

        class Local:
            scale = _DELETED + 3  # reads a global: the class statement itself runs as Python

        return y * Local.scale + 1

    explained = framejit.explain(fn, torch.ones(3))
    assert explained.graph_count == 2 and explained.graph_break_count >= 1
    assert "`class Local` inside the function" in explained.break_reasons[0]
    assert "its body reads `_DELETED`" in explained.break_reasons[0]
    jitted = framejit.jit(fn, backend="eager")
    for _ in range(2):
        x = torch.randn(3)
        torch.testing.assert_close(jitted(x), fn(x))


def test_del_of_a_global_runs_for_real_after_the_graph() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        global _DELETED
        y = x + 1
        _DELETED = 5
        del _DELETED
        return y * 2

    jitted = framejit.jit(fn, backend="eager")
    for _ in range(2):
        globals()["_DELETED"] = 0
        x = torch.randn(3)
        torch.testing.assert_close(jitted(x), (x + 1) * 2)
        assert "_DELETED" not in globals()
    globals()["_DELETED"] = 0


def long_loop_with_a_print_at_the_end(xs):
    total = xs[0] * 0
    for step, x in enumerate(xs):
        total = total + x.sin() * 2 + x.cos() * 3 + x.tanh() * 4 + x.exp() * 5 + x.abs() * 6
        total = total + x.sigmoid() * 7 + x.relu() * 8 + x.neg() * 9 + x.square() * 10
        total = total + x.sin() * 2 + x.cos() * 3 + x.tanh() * 4 + x.exp() * 5 + x.abs() * 6
        total = total + x.sigmoid() * 7 + x.relu() * 8 + x.neg() * 9 + x.square() * 10
        if step % 2 == 0:
            print(f"step={step} shape={list(x.shape)} {tuple(total.shape)}")
    return total


def test_a_break_just_before_an_extended_jump_back(capsys) -> None:
    # The loop's JUMP_BACKWARD needs an EXTENDED_ARG, so the instruction after the print's
    # POP_TOP starts at that prefix: the resume function must start there (it once raised
    # StopIteration while making it).
    code = long_loop_with_a_print_at_the_end.__code__
    names = [i.opname for i in dis.get_instructions(code)]
    assert "EXTENDED_ARG" in names
    xs = [torch.randn(3) for _ in range(3)]
    run_both(long_loop_with_a_print_at_the_end, xs, capsys=capsys)


def append_items(xs, history):
    for x in xs:
        loss = (x * 2).sum()
        history.append(loss.item())  # `history.append` is on the stack at the break
    return torch.tensor(history).mean()


def test_a_list_method_on_the_stack_at_a_break_stays_captured() -> None:
    xs = [torch.randn(3) for _ in range(2)]
    for _ in range(2):
        eager_history, history = [], []
        expected = append_items(xs, eager_history)
        same(framejit.jit(append_items, backend="eager")(xs, history), expected)
        assert history == eager_history
    reasons = breaks_of(append_items, xs, [])
    assert reasons and all("item()" in reason for reason in reasons), reasons


def test_callee_of_a_star_args_call_is_compiled_at_a_break() -> None:
    """A wrapper `return fn(*args, **kwargs)` (decorators) whose callee breaks: the call runs at
    the break and the callee is compiled on its own, as for a plain call."""

    def inner(x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        y = x.sin() * scale
        print("inside", end="")
        return y.cos()

    def wrapper(*args: Any, **kwargs: Any) -> torch.Tensor:
        return inner(*args, **kwargs)

    x = torch.randn(3)
    counter = CompileCounter()
    jitted = framejit.jit(wrapper, backend=counter)
    for scale in (1.0, 1.0):
        torch.testing.assert_close(jitted(x, scale=scale), wrapper(x, scale=scale))
    assert counter.frame_count == 2  # inner, before and after its print


def test_a_value_only_the_break_used_dies_as_in_eager() -> None:
    import weakref

    refs: list[Any] = []
    alive_after: list[bool] = []

    @framejit.disable
    def observe(t: torch.Tensor) -> None:
        refs.append(weakref.ref(t))

    @framejit.disable
    def probe() -> None:
        alive_after.append(refs[-1]() is not None)

    def fn(x: torch.Tensor) -> torch.Tensor:
        observe(x * 2)  # a temporary: nothing holds it once observe returned
        probe()
        return x + 1

    x = torch.randn(4)
    expected = fn(x)
    fast = framejit.jit(fn, backend="eager")
    for _ in range(2):
        torch.testing.assert_close(fast(x), expected)
    # the compiled frame dropped its graph's outputs before calling the code after the break
    assert alive_after == [False, False, False]


def test_root_frame_except_clause_is_traced() -> None:
    def lookup(x: torch.Tensor, d: dict) -> torch.Tensor:
        try:
            s = d["scale"]
        except KeyError:
            s = 1.5
        return (x * s).sin() + 1

    def product(x: torch.Tensor, items: list) -> torch.Tensor:
        it = iter(items)
        total = x
        while True:
            try:
                w = next(it)
            except StopIteration:
                break
            total = total * w
        return total.cos()

    x = torch.randn(4)
    for fn, args in [(lookup, (x, {})), (lookup, (x, {"scale": 2.0})), (product, (x, [1.0, 2.0]))]:
        explained = framejit.explain(fn, *args)
        assert (explained.graph_count, explained.graph_break_count) == (1, 0)
        counter = CompileCounter()
        fast = framejit.jit(fn, backend=counter)
        for _ in range(2):
            torch.testing.assert_close(fast(*args), fn(*args))
        assert counter.frame_count == 1


def test_root_frame_except_clause_that_cannot_be_traced_breaks_where_it_raised(capsys) -> None:
    misses: list[int] = []

    def fn(x: torch.Tensor, d: dict) -> torch.Tensor:
        y = x * 2
        try:
            s = d["scale"]
        except KeyError:
            misses.append(1)
            print("no scale")  # not captured: the clause is rewound
            s = 3.0
        return y * s

    x = torch.randn(4)
    explained = framejit.explain(fn, x, {})
    assert explained.graph_break_count >= 1
    assert "KeyError" in str(explained.break_reasons[0])
    misses.clear()
    capsys.readouterr()
    fast = framejit.jit(fn, backend="eager")
    for _ in range(2):
        torch.testing.assert_close(fast(x, {}), x * 6)
    assert misses == [1, 1]  # the clause ran once per call, for real
    assert capsys.readouterr().out == "no scale\n" * 2


def test_root_frame_exception_the_clause_does_not_match_propagates() -> None:
    def fn(x: torch.Tensor, d: dict) -> torch.Tensor:
        try:
            s = d["scale"]
        except IndexError:
            s = 1.0
        return x * s

    fast = framejit.jit(fn, backend="eager")
    for _ in range(2):
        with pytest.raises(KeyError, match="scale"):
            fast(torch.randn(3), {})
        torch.testing.assert_close(fast(torch.ones(3), {"scale": 2.0}), torch.full((3,), 2.0))


def test_root_frame_except_clause_with_the_exception_bound() -> None:
    def fn(x: torch.Tensor, d: dict) -> torch.Tensor:
        try:
            s = d["scale"]
        except KeyError as err:
            s = 2.0 if isinstance(err, LookupError) else 0.0
        return x * s + 1

    fast = framejit.jit(fn, backend="eager")
    x = torch.randn(3)
    for _ in range(2):
        torch.testing.assert_close(fast(x, {}), fn(x, {}))


class ShapeMismatch(ValueError):
    code = 7  # a class constant the handler reads


class WithInit(ValueError):
    def __init__(self, what: str) -> None:
        super().__init__(f"bad {what}")
        self.what = what


def _check_rows(x: torch.Tensor) -> torch.Tensor:
    if x.shape[0] != 3:
        raise ShapeMismatch("rows", x.shape[0])
    return x


def _check_cols(x: torch.Tensor) -> torch.Tensor:
    if x.shape[1] != 2:
        raise WithInit("cols")
    return x


def test_user_exception_classes_and_raise_from_are_traced() -> None:
    # a library's `class ShapeMismatch(ValueError): code = 7` raised in a callee and caught
    # by the caller, and `raise ... from err`: each was a graph break (creating the exception
    # object, the raise with a cause)
    def rows(x: torch.Tensor) -> torch.Tensor:
        try:
            y = _check_rows(x) * 2
        except ShapeMismatch as err:
            y = x * err.code + err.args[1] + len(str(err))
        return y.sin()

    def chained(x: torch.Tensor) -> torch.Tensor:
        try:
            try:
                y = _check_rows(x)
            except ShapeMismatch as err:
                raise KeyError("rows") from err
        except KeyError as outer:
            cause = outer.__cause__
            y = x + (cause.code if isinstance(cause, ShapeMismatch) else 100)
        return y.cos()

    def with_init(x: torch.Tensor) -> torch.Tensor:
        try:  # a class with its own __init__: its call runs as Python, still right
            y = _check_cols(x)
        except WithInit as err:
            y = x - len(err.what)
        return y

    for fn, traced in ((rows, True), (chained, True), (with_init, False)):
        for shape in ((3, 2), (4, 2), (4, 5)):
            x = torch.randn(shape)
            if traced:
                explained = framejit.explain(fn, x)
                assert (explained.graph_count, explained.graph_break_count) == (1, 0), fn
            fast = framejit.jit(fn, backend="eager")
            torch.testing.assert_close(fast(x), fn(x))
            torch.testing.assert_close(fast(x), fn(x))


def _validate(t):
    if t.shape[0] != 3:
        raise ValueError(f"expected 3 rows, got {t.shape[0]}")
    return t


def validates(x):
    h = x * 2
    _validate(h)  # the traceback shows this line for this frame
    return h.sum()


def reshapes_after_a_break(x):
    y = x + 1
    print("a break")
    return y.reshape(2, 2)  # raises here


def _frames(fn, *args):
    import traceback

    with pytest.raises(Exception) as info:
        fn(*args)
    return [
        (f.name, f.lineno, f.line)
        for f in traceback.extract_tb(info.value.__traceback__)
        if f.filename == __file__ and f.name != "_frames"
    ]


def test_tracebacks_show_the_users_lines(capsys) -> None:
    jitted = framejit.jit(validates, backend="eager")
    jitted(torch.ones(3))
    assert _frames(jitted, torch.ones(4)) == _frames(validates, torch.ones(4))

    jitted = framejit.jit(reshapes_after_a_break, backend="eager")
    got = _frames(jitted, torch.ones(3))
    line = reshapes_after_a_break.__code__.co_firstlineno + 3
    # the resume function is one more frame, at the same line
    assert got[0][1:] == got[-1][1:] == (line, "return y.reshape(2, 2)  # raises here")


def _accumulates_through_a_nested_function(x):
    total = 0.0

    def add(v):
        nonlocal total
        total += v.sum().item()  # a break inside the nested function: it is compiled on its own

    for v in x.unbind(0):
        add(v)
    return total


def _scales_in_a_nested_function(x, w):
    def g(t):
        y = t * w
        print(end="")  # a break
        return y

    return torch.stack([g(x[0]), g(x[1])])


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_nested_function_made_again_uses_its_own_cells(backend) -> None:
    # each call of the parent makes the nested function again, with new cells; the compiled
    # nested function and its resume functions used the first call's cells
    jitted = framejit.jit(_accumulates_through_a_nested_function, backend=backend)
    for k in (1.0, 2.0, 3.0):
        x = torch.full((3, 2), k)
        assert jitted(x) == _accumulates_through_a_nested_function(x)
    jitted = framejit.jit(_scales_in_a_nested_function, backend=backend)
    for w in (2.0, 3.0, 5.0):
        x = torch.ones(2, 2)
        torch.testing.assert_close(jitted(x, w), _scales_in_a_nested_function(x, w))


def _stops_in_the_debugger(x):
    y = x.sin()
    z = y * 2
    breakpoint()  # the debugger must see y and z, and the frame's own lines
    return z + 1


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_breakpoint_runs_the_frame_as_python_with_its_locals(backend, monkeypatch) -> None:
    seen = []

    def hook(*args, **kwargs):
        frame = sys._getframe(1)
        seen.append((frame.f_code.co_name, sorted(frame.f_locals)))

    monkeypatch.setattr(sys, "breakpointhook", hook)
    monkeypatch.delenv("PYTHONBREAKPOINT", raising=False)
    jitted = framejit.jit(_stops_in_the_debugger, backend=backend)
    x = torch.randn(3)
    for _ in range(2):
        torch.testing.assert_close(jitted(x), _stops_in_the_debugger(x))
    assert seen == [("_stops_in_the_debugger", ["x", "y", "z"])] * 4
    with pytest.raises(framejit.FullGraphError, match="debugger"):
        framejit.jit(_stops_in_the_debugger, backend=backend, fullgraph=True)(x)


def _compressed_and_quantized() -> list[tuple[str, Any, Any]]:
    dense = torch.randn(3, 4)
    return [
        ("sparse_csr", lambda s, d: (s @ d) * 2, (dense.to_sparse_csr(), torch.randn(4, 2))),
        ("sparse_csc", lambda s, d: (s @ d) * 2, (dense.to_sparse_csc(), torch.randn(4, 2))),
        (
            "quantized",
            lambda q, d: q.dequantize() + d,
            (torch.quantize_per_tensor(dense, 0.1, 0, torch.qint8), torch.randn(3, 4)),
        ),
    ]


@pytest.mark.parametrize("case", _compressed_and_quantized(), ids=lambda c: c[0])
def test_tensors_without_fakes_are_a_break_with_a_reason(case: tuple[str, Any, Any]) -> None:
    """Compressed sparse and quantized tensors have no FakeTensors: a graph break that names
    them (and FullGraphError under fullgraph), not an internal error that ignores fullgraph."""
    name, fn, args = case
    torch.testing.assert_close(framejit.jit(fn, backend="eager")(*args), fn(*args))
    with pytest.raises(framejit.FullGraphError, match=name.split("_")[-1]):
        framejit.jit(fn, backend="eager", fullgraph=True)(*args)
    explained = framejit.explain(fn, *args)
    assert explained.graph_break_count >= 1
    assert any(name.split("_")[-1] in reason for reason in explained.break_reasons)


def test_a_break_in_a_try_body_that_ends_in_raise_inside_a_loop(capsys) -> None:
    # the resume function jumps into the `try` range; its body only ends in `raise`, so the
    # stack-size analysis never reached the handler: building it failed ("negative size")
    # and the whole frame ran uncompiled
    def counts(x):
        n = 0
        for i in range(3):
            try:
                if x[i].item() < 0:
                    raise ValueError(i)
                n += 10
            except ValueError as err:
                n += err.args[0]
        return x.abs() * n, n

    def prints(x):
        n = 0
        for _ in range(2):
            try:
                print("step")
                raise KeyError
            except KeyError:
                n += 1
        return x * n

    for fn in (counts, prints):
        x = torch.tensor([1.0, -1.0, -2.0])
        explained = framejit.explain(fn, x)
        assert explained.graph_count >= 1 and all(
            "resume function" not in str(r) for r in explained.break_reasons
        )
        fast = framejit.jit(fn, backend="eager")
        for _ in range(2):
            got, want = fast(x), fn(x)
            torch.testing.assert_close(got, want)
    capsys.readouterr()


def test_a_caught_exception_kept_after_its_clause_keeps_its_traceback() -> None:
    # the exception raised in the trace was rebuilt after the graph as a new object, without
    # a traceback; it is now the real one (the frame raises it for real)
    def fn(x):
        try:
            raise ValueError("tb")
        except ValueError as e:
            err = e
        return x + 1, err.__traceback__ is not None, str(err)

    jitted = framejit.jit(fn, backend="eager")
    x = torch.ones(2)
    for _ in range(2):
        got, want = jitted(x), fn(x)
        torch.testing.assert_close(got[0], want[0])
        assert got[1:] == want[1:] == (True, "tb")

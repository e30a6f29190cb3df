"""Two things eager does at a precise moment, which the compiled frame must do at the same one.

A generator that only a `for` loop holds is closed where the loop drops it (`break`, `return`
inside the loop): its `finally` runs before the code after the loop. And gradient hooks
(`register_hook`, `retain_grad`, `requires_grad_`) called in the frame give eager's gradients
and hook calls; on tensors from outside the graph they are made after the graph, without a
break. Every test compares with eager on real tensors.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

import framejit

BACKENDS = ["eager", "aot_eager"]


def counts(fn: Any, *args: Any) -> tuple[int, int]:
    explained = framejit.explain(fn, *args)
    return explained.graph_count, explained.graph_break_count


# --- generators closed where the loop drops them ------------------------------------------------

LOG: list[str] = []


def numbers(t: torch.Tensor, n: int = 5) -> Iterator[torch.Tensor]:
    try:
        for i in range(n):
            yield t * i
    finally:
        LOG.append("gen-finally")


def breaks_out(x: torch.Tensor) -> torch.Tensor:
    acc = x
    for v in numbers(x):
        acc = acc + v
        if len(LOG) >= 0 and v.shape[0] == 2:
            break
    LOG.append("after-loop")
    return acc


def runs_to_the_end(x: torch.Tensor) -> torch.Tensor:
    acc = x
    for v in numbers(x, 3):
        acc = acc + v
    LOG.append("after-loop")
    return acc


def returns_inside(x: torch.Tensor) -> torch.Tensor:
    acc = x
    for v in numbers(x):
        acc = acc + v
        if v.shape[0] >= 1 and len(LOG) == 0:
            return acc * (len(LOG) + 1)  # computed before the generator is closed
    return acc


def closes_explicitly(x: torch.Tensor) -> torch.Tensor:
    g = numbers(x)
    first = next(g)
    g.close()
    LOG.append("after-close")
    return first + len(LOG)


def held_by_a_variable(x: torch.Tensor) -> torch.Tensor:
    g = numbers(x)
    first = x
    for v in g:  # `g` keeps it alive: closed when the frame ends, after "after-loop"
        first = v
        break
    LOG.append("after-loop")
    return first + 1


def with_its_own_cleanup(x: torch.Tensor) -> torch.Tensor:
    def pairs(t: torch.Tensor) -> Iterator[torch.Tensor]:
        try:
            try:
                yield t
                yield t * 2
            finally:
                LOG.append("inner-finally")
        finally:
            LOG.append("outer-finally")

    out = x
    for v in pairs(x):
        out = out + v
        break
    LOG.append("after-loop")
    return out


def _compare(fn: Callable[[torch.Tensor], torch.Tensor], backend: str, calls: int = 4) -> None:
    jitted = framejit.jit(fn, backend=backend)
    for i in range(calls):
        x = torch.arange(2.0 + (i % 2)) + 1
        LOG.clear()
        expected = fn(x)
        eager_log = list(LOG)
        LOG.clear()
        got = jitted(x)
        torch.testing.assert_close(got, expected)
        assert eager_log == LOG, (i, LOG, eager_log)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "fn", [breaks_out, runs_to_the_end, returns_inside, closes_explicitly, with_its_own_cleanup]
)
def test_a_generator_is_closed_where_eager_closes_it_and_traced(fn: Any, backend: str) -> None:
    framejit.reset()
    _compare(fn, backend)
    LOG.clear()
    assert counts(fn, torch.ones(2)) == (1, 0)  # its `finally` traced: no graph break


def test_the_break_order_is_eager_s() -> None:
    LOG.clear()
    breaks_out(torch.ones(2))
    assert LOG == ["gen-finally", "after-loop"]  # what the compiled frame must reproduce


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_generator_a_variable_holds_is_closed_when_the_frame_ends(backend: str) -> None:
    _closed_when_the_frame_ends(held_by_a_variable, backend)


def _closed_when_the_frame_ends(fn: Callable[[torch.Tensor], Any], backend: str) -> None:
    framejit.reset()
    _compare(fn, backend)
    LOG.clear()
    fn(torch.ones(2))
    assert LOG == ["after-loop", "gen-finally"]  # what the compiled frame must reproduce


def _ignores_exit(t: torch.Tensor) -> Iterator[torch.Tensor]:
    try:
        yield t
    except GeneratorExit:
        LOG.append("ignored")
    yield t * 2  # outside the `try`: a later close just ends it


def closes_one_that_yields_again(x: torch.Tensor) -> torch.Tensor:
    g = _ignores_exit(x)
    first = next(g)
    g.close()  # RuntimeError: generator ignored GeneratorExit
    return first


def test_close_of_a_generator_that_yields_again_raises_eager_s_error() -> None:
    framejit.reset()
    jitted = framejit.jit(closes_one_that_yields_again, backend="eager")
    for call in (closes_one_that_yields_again, jitted):
        LOG.clear()
        with pytest.raises(RuntimeError, match="ignored GeneratorExit"):
            call(torch.ones(2))
        assert LOG == ["ignored"]


def breaks_in_the_body(x: torch.Tensor) -> torch.Tensor:
    acc = x
    for v in numbers(x):
        acc = acc + v
        print("", end="")  # a graph break inside the loop: the generator runs as Python
        if v.shape[0] == 2 and v.sum() > 0:
            break
    LOG.append("after-loop")
    return acc


def held_in_a_body_that_breaks(x: torch.Tensor) -> torch.Tensor:
    g = numbers(x)
    acc = x
    for v in g:  # `g` keeps it alive past the loop: closed when the frame returns
        acc = acc + v
        print("", end="")
        if v.shape[0] == 2 and v.sum() > 0:
            break
    LOG.append("after-loop")
    return acc


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_generator_run_as_python_is_closed_at_the_break(backend: str) -> None:
    # the resume functions' arguments are owned by their frames alone (not by framejit's call
    # path): the `break` drops the last reference, as in eager
    framejit.reset()
    _compare(breaks_in_the_body, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_generator_run_as_python_and_held_is_closed_when_the_frame_ends(backend: str) -> None:
    _closed_when_the_frame_ends(held_in_a_body_that_breaks, backend)


def dropped_by_a_store(x: torch.Tensor) -> torch.Tensor:
    g = numbers(x)
    first = next(g)  # a break: the generator runs as Python
    print("", end="")
    g = None  # its last reference: closed here, before the append
    LOG.append("after")
    return first + 1


def dropped_by_del(x: torch.Tensor) -> torch.Tensor:
    g = numbers(x)
    first = next(g)
    print("", end="")
    y = first * 2
    del g
    LOG.append("after")
    return y


def replaced_by_another(x: torch.Tensor) -> torch.Tensor:
    g = numbers(x)
    first = next(g)
    print("", end="")
    y = first * 2
    g = numbers(y)  # the first one is closed here; the second when the frame returns
    LOG.append("after")
    return y + next(g)


def kept_to_the_end(x: torch.Tensor) -> torch.Tensor:
    g = numbers(x)  # held until the frame returns, as in eager
    first = next(g)
    y = first * 2
    print("", end="")
    LOG.append("after")
    return y


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "fn", [dropped_by_a_store, dropped_by_del, replaced_by_another, kept_to_the_end]
)
def test_a_generator_run_as_python_is_closed_where_the_frame_lets_go(fn: Any, backend: str) -> None:
    # compiled calls included: what the trace held of the frame's arguments is let go of
    # when the compile ends, not when the garbage collector runs
    framejit.reset()
    _compare(fn, backend)


# --- gradient hooks -----------------------------------------------------------------------------


def _inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    leaf = torch.arange(3.0, requires_grad=True)
    w = (torch.ones(3) * 1.5).requires_grad_()
    return leaf, leaf * 2, w  # the leaf, a non-leaf input made from it, a leaf input


def _run(fn: Callable[..., Any], calls: list[Any]) -> list[Any]:
    """Call `fn` on fresh inputs, run backward: what eager and the compiled frame must agree
    on (the outputs, the leaves' and the retained gradients, each hook call's argument)."""
    calls.clear()
    leaf, x, w = _inputs()
    out = fn(x, w)
    loss, *kept = out if isinstance(out, tuple) else (out,)
    loss.backward()
    grads = [leaf.grad, w.grad, x.grad if x.retains_grad else None]
    grads += [k.grad if k.requires_grad and (k.is_leaf or k.retains_grad) else None for k in kept]
    return [loss.detach(), *grads, [c.clone() for c in calls]]


def _assert_same(fn: Callable[..., Any], backend: str, calls: list[Any]) -> None:
    framejit.reset()
    jitted = framejit.jit(fn, backend=backend)
    for _ in range(2):
        expected = _run(fn, calls)
        got = _run(jitted, calls)
        assert len(got[-1]) == len(expected[-1]), (got[-1], expected[-1])
        for g, e in zip(got, expected, strict=True):
            if isinstance(e, list):
                for a, b in zip(g, e, strict=True):
                    torch.testing.assert_close(a, b)
            elif e is None:
                assert g is None
            else:
                torch.testing.assert_close(g, e)


CALLS: list[torch.Tensor] = []


def doubling_hook(g: torch.Tensor) -> torch.Tensor:
    CALLS.append(g)
    return g * 2


def hooks_its_inputs(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    scale = 3.0
    w.register_hook(lambda g: g * scale)  # a closure made in the frame
    x.register_hook(doubling_hook)  # a non-leaf input
    return (x.sin() * w).sum()


def retains_an_input_grad(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    x.retain_grad()
    w.register_hook(doubling_hook)
    w.register_hook(doubling_hook)  # twice: two calls, in order, the second sees the first's
    return (x.cos() * w).sum()


def hooks_in_a_loop(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    out = x
    for t in (x, w):
        t.register_hook(doubling_hook)
        out = out * t
    return out.sum()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [hooks_its_inputs, retains_an_input_grad, hooks_in_a_loop])
def test_hooks_on_inputs_are_made_after_the_graph_without_a_break(fn: Any, backend: str) -> None:
    _assert_same(fn, backend, CALLS)
    _, x, w = _inputs()
    assert counts(fn, x, w) == (1, 0)


def test_a_hook_on_a_parameter_without_a_break() -> None:
    def make() -> tuple[torch.nn.Linear, Any]:
        torch.manual_seed(0)
        lin = torch.nn.Linear(3, 2)

        def fn(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            lin.weight.register_hook(doubling_hook)
            return lin(x * w).sum(), lin.weight

        return lin, fn

    framejit.reset()
    expected = _run(make()[1], CALLS)  # a new module each run: hooks stay on its weight
    got = _run(framejit.jit(make()[1], backend="aot_eager"), CALLS)
    for g, e in zip(got[:-1], expected[:-1], strict=True):
        assert (g is None) == (e is None)
        if e is not None:
            torch.testing.assert_close(g, e)
    assert len(got[-1]) == len(expected[-1]) == 1
    torch.testing.assert_close(got[-1][0], expected[-1][0])
    _, x, w = _inputs()
    assert counts(make()[1], x, w) == (1, 0)


def hooks_an_intermediate(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    y = x * w
    y.register_hook(doubling_hook)  # y's gradient from `y.sin()` must pass through the hook
    return y.sin().sum()


def retains_an_intermediate_grad(x: torch.Tensor, w: torch.Tensor) -> Any:
    y = x * w
    y.retain_grad()
    return (y * y).sum(), y


def requires_grad_of_a_detached_input(x: torch.Tensor, w: torch.Tensor) -> Any:
    d = x.detach()
    d.requires_grad_()
    return (d * w).sum(), d


def requires_grad_of_an_intermediate(x: torch.Tensor, w: torch.Tensor) -> Any:
    y = x.detach() * 2
    y.requires_grad_(True)
    return (y.sin() * w).sum(), y


def hook_then_retain(x: torch.Tensor, w: torch.Tensor) -> Any:
    y = x * w
    y.register_hook(lambda g: CALLS.append(g))
    y.retain_grad()  # y is an input of the code after the break: made after its graph
    return (y * y).sum(), y


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("fn", "construct"),
    [
        (hooks_an_intermediate, "register_hook"),
        (retains_an_intermediate_grad, "retain_grad"),
        (requires_grad_of_a_detached_input, "requires_grad_"),
        (requires_grad_of_an_intermediate, "requires_grad_"),
        (hook_then_retain, "register_hook"),
    ],
)
def test_hooks_on_tensors_the_graph_computes_break_with_a_reason(
    fn: Any, construct: str, backend: str
) -> None:
    _assert_same(fn, backend, CALLS)
    _, x, w = _inputs()
    explained = framejit.explain(fn, x, w)
    assert explained.graph_break_count == 1
    assert f"Tensor.{construct}()" in explained.break_reasons[0]


def hooks_then_writes_in_place(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    x.register_hook(doubling_hook)
    x.mul_(2)  # eager's hook sees the gradient of x before this write
    return (x * w).sum()


def writes_in_place_then_hooks(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    x.add_(1)
    x.register_hook(doubling_hook)  # on x after the write, which the graph's backward skips
    return (x * w).sum()


def removes_its_hook(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    handle = w.register_hook(doubling_hook)  # the handle is used: the call runs as Python
    out = (x * w).sum()
    handle.remove()
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "fn", [hooks_then_writes_in_place, writes_in_place_then_hooks, removes_its_hook]
)
def test_hooks_that_cannot_wait_for_the_graph_end_run_where_eager_runs_them(
    fn: Any, backend: str
) -> None:
    _assert_same(fn, backend, CALLS)


def hooks_a_tensor_without_grad(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    torch.zeros(3).register_hook(doubling_hook)
    return (x * w).sum()


def test_a_hook_on_a_tensor_without_grad_raises_eager_s_error() -> None:
    framejit.reset()
    jitted = framejit.jit(hooks_a_tensor_without_grad, backend="eager")
    for call in (hooks_a_tensor_without_grad, jitted):
        _, x, w = _inputs()
        with pytest.raises(RuntimeError, match="doesn't require gradient"):
            call(x, w)

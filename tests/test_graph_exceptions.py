"""Exceptions raised by a compiled graph at run time: the frame then runs as in eager.

Errors that only real values show (an index tensor out of range, a failing kernel) happen when
the compiled graph runs, after the guards passed. The transformed code then puts the global
state back and runs the frame's own code again, uncompiled (frontend/codegen.py, `EagerRerun`),
so the function's own `except`/`finally` see the error as in eager, and an uncaught one reaches
the caller with eager's type and a traceback at the user's line. A graph that writes to one of
its inputs is the exception: it may have half-written it, so its error propagates as it is.

Every case is compared with eager on real tensors, with each input called twice.
"""

from __future__ import annotations

import traceback

import pytest
import torch
from framejit.frontend import hook

import framejit
from framejit.testing import CompileCounter

BACKENDS = ["eager", "aot_eager"]
IN_RANGE = torch.tensor([1, 3])
OUT_OF_RANGE = torch.tensor([1, 9])


def same(a, b) -> None:
    if isinstance(a, torch.Tensor):
        torch.testing.assert_close(a, b)
        assert a.requires_grad == b.requires_grad
    elif isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            same(x, y)
    else:
        assert a == b


def compare(fn, *args_list, backend="eager", calls: int = 2):
    """Run `fn` eagerly and through `jit` on each argument tuple, `calls` times each."""
    jitted = framejit.jit(fn, backend=backend)
    for args in args_list:
        for _ in range(calls):
            same(jitted(*args), fn(*args))
    return jitted


# --- the user's handlers see the graph's error ------------------------------------------------


def index_in_try(x, idx):
    try:
        y = x[idx] * 2
    except (IndexError, RuntimeError):
        y = x.sum()
    return y


@pytest.mark.parametrize("backend", BACKENDS)
def test_index_out_of_range_reaches_the_functions_except(backend: str) -> None:
    x = torch.arange(5.0)
    with pytest.raises(IndexError):
        _ = x[OUT_OF_RANGE]  # what eager does without the `try`
    compare(index_in_try, (x, IN_RANGE), (x, OUT_OF_RANGE), (x, IN_RANGE), backend=backend)


def test_the_failing_entry_is_not_recompiled_nor_reentered() -> None:
    counter = CompileCounter()
    jitted = framejit.jit(index_in_try, backend=counter)
    x = torch.arange(5.0)
    for idx in (IN_RANGE, OUT_OF_RANGE, OUT_OF_RANGE, IN_RANGE):
        same(jitted(x, idx), index_in_try(x, idx))
    assert counter.frame_count == 1  # one entry: its guards hold for both indices


def gather_in_try(x, idx):
    try:
        out = torch.gather(x, 1, idx).relu() + 1
    except RuntimeError as exc:
        out = x.new_full((x.shape[0], idx.shape[1]), float(len(str(exc)) > 0))
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_gather_out_of_range_inside_try(backend: str) -> None:
    x = torch.randn(3, 4)
    good = torch.tensor([[0, 1], [2, 3], [3, 0]])
    bad = torch.tensor([[0, 1], [2, 7], [3, 0]])
    compare(gather_in_try, (x, good), (x, bad), backend=backend)


def finally_once(x, idx, events):
    try:
        y = x[idx] + 1
    finally:
        events.append("finally")
    return y


@pytest.mark.parametrize("backend", BACKENDS)
def test_finally_runs_once_and_the_error_goes_on(backend: str) -> None:
    jitted = framejit.jit(finally_once, backend=backend)
    x = torch.arange(5.0)
    for idx in (IN_RANGE, OUT_OF_RANGE, OUT_OF_RANGE, IN_RANGE):
        eager_events: list[str] = []
        got_events: list[str] = []
        try:
            expected = finally_once(x, idx, eager_events)
        except IndexError as exc:
            with pytest.raises(IndexError, match=str(exc)):
                jitted(x, idx, got_events)
        else:
            same(jitted(x, idx, got_events), expected)
        assert got_events == eager_events == ["finally"]


def uncaught(x, idx):
    y = x.cos()
    return y[idx] * 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_uncaught_error_has_eagers_type_and_points_at_the_users_line(backend: str) -> None:
    jitted = framejit.jit(uncaught, backend=backend)
    x = torch.arange(5.0)
    same(jitted(x, IN_RANGE), uncaught(x, IN_RANGE))
    with pytest.raises(IndexError) as eager:
        uncaught(x, OUT_OF_RANGE)
    for _ in range(2):
        with pytest.raises(IndexError) as got:
            jitted(x, OUT_OF_RANGE)
        assert str(got.value) == str(eager.value)
        want, last = traceback.extract_tb(eager.tb)[-1], traceback.extract_tb(got.tb)[-1]
        assert (last.name, last.lineno) == (want.name, want.lineno) == ("uncaught", want.lineno)


# --- what the graph did before it raised ------------------------------------------------------


def mutate_then_index(x, idx):
    try:
        x.add_(1)
        y = x[idx] * 2
    except IndexError:
        y = x.sum()
    return y


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_graph_that_writes_an_input_lets_its_error_propagate(backend: str) -> None:
    """Running again would add 1 twice: the error propagates from the compiled call as it is
    (the function's own `except` does not see it; documented in the README)."""
    jitted = framejit.jit(mutate_then_index, backend=backend)
    for _ in range(2):
        same(jitted(torch.arange(5.0), IN_RANGE), mutate_then_index(torch.arange(5.0), IN_RANGE))
    eager_x = torch.arange(5.0)
    same(mutate_then_index(eager_x, OUT_OF_RANGE), torch.arange(1.0, 6.0).sum())
    for _ in range(2):
        with pytest.raises(IndexError):
            jitted(torch.arange(5.0), OUT_OF_RANGE)
    assert not torch.is_inference_mode_enabled() and torch.is_grad_enabled()


def setitem_then_index(x, idx):
    try:
        x[0] = -1.0
        y = x[idx]
    except IndexError:
        y = x.sum()
    return y


def out_then_index(x, idx):
    try:
        torch.mul(x, 2, out=x)
        y = x[idx]
    except IndexError:
        y = x.sum()
    return y


def contiguous_then_index(x, idx):
    try:
        y = x.contiguous().to(torch.float32)[idx]  # may return x itself, never writes it
    except IndexError:
        y = x.sum()
    return y


def test_which_graphs_write_their_inputs() -> None:
    from framejit.frontend.convert import _writes_inputs

    x = torch.arange(5.0)
    for fn, writes in [
        (mutate_then_index, True),
        (setitem_then_index, True),
        (out_then_index, True),
        (contiguous_then_index, False),
        (index_in_try, False),
    ]:
        graphs = framejit.explain(fn, x.clone(), IN_RANGE).graphs
        assert [_writes_inputs(gm) for gm in graphs] == [writes], fn.__name__
    compare(contiguous_then_index, (x, IN_RANGE), (x, OUT_OF_RANGE))


def write_a_temporary(x, idx):
    try:
        y = x * 2
        y.add_(1)
        z = y[idx]
    except IndexError:
        z = -x
    return z


def test_writing_a_tensor_made_in_the_graph_still_reruns() -> None:
    compare(write_a_temporary, (torch.arange(5.0), IN_RANGE), (torch.arange(5.0), OUT_OF_RANGE))


def no_grad_inside(x, idx):
    try:
        with torch.no_grad():
            y = x[idx] * 2
    except IndexError:
        y = x * 3
    return y, torch.is_grad_enabled()


@pytest.mark.parametrize("backend", BACKENDS)
def test_grad_mode_is_put_back_when_the_graph_raises_inside_no_grad(backend: str) -> None:
    x = torch.arange(5.0, requires_grad=True)
    compare(no_grad_inside, (x, IN_RANGE), (x, OUT_OF_RANGE), backend=backend)
    assert torch.is_grad_enabled()


# --- frames of every shape ---------------------------------------------------------------------


def test_argument_kinds_closures_and_cells() -> None:
    scale = torch.tensor(3.0)

    def f(x, /, idx, *rest, k=1.0, **kw):
        def inner():
            return x.sum() * k  # x and k are cells of f

        try:
            y = x[idx] * scale + sum(rest) * kw["w"]
        except IndexError:
            y = inner()
        return y

    x = torch.arange(5.0)
    for idx in (IN_RANGE, OUT_OF_RANGE):
        jitted = framejit.jit(f, backend="eager")
        for _ in range(2):
            same(jitted(x, idx, 1.0, 2.0, k=2.0, w=4.0), f(x, idx, 1.0, 2.0, k=2.0, w=4.0))
            same(jitted(x, idx, w=0.5), f(x, idx, w=0.5))


def after_a_break(x, idx):
    a = x.sin()
    print("break")
    try:
        y = (a + x)[idx]
    except IndexError:
        y = a.sum()
    return y


def test_a_resume_function_reruns_its_own_code(capsys) -> None:
    counter = CompileCounter()
    jitted = framejit.jit(after_a_break, backend=counter)
    x = torch.arange(5.0)
    for idx in (IN_RANGE, OUT_OF_RANGE, OUT_OF_RANGE, IN_RANGE):
        expected = after_a_break(x, idx)
        eager_out = capsys.readouterr().out
        same(jitted(x, idx), expected)
        assert capsys.readouterr().out == eager_out  # printed once: the rerun starts after it
    assert counter.frame_count == 2


def consume(x, idx):
    yield x[idx]
    yield x


def through_a_generator(x, idx):
    try:
        a, b = list(consume(x, idx))
        return a.sum() + b.sum()
    except IndexError:
        return x.mean()


def test_a_generator_consumed_in_the_frame() -> None:
    x = torch.arange(5.0)
    compare(through_a_generator, (x, IN_RANGE), (x, OUT_OF_RANGE))


# --- errors of the backend itself -------------------------------------------------------------


class FailingBackend:
    """Compiles to a callable that raises `error` from its second call on."""

    def __init__(self, error: BaseException) -> None:
        self.error = error
        self.calls = 0

    def __call__(self, gm, example_inputs):
        @framejit.disable  # a backend's code: never compiled by the frame hook itself
        def run(*args):
            self.calls += 1
            if self.calls > 1:
                raise self.error
            return gm(*args)

        return run


def plain(x):
    return x.sin() * 2


def test_a_kernel_error_runs_the_frame_eagerly_once() -> None:
    backend = FailingBackend(RuntimeError("kernel failed"))
    jitted = framejit.jit(plain, backend=backend)
    x = torch.randn(4)
    for _ in range(3):
        same(jitted(x), plain(x))
    assert backend.calls == 3  # no re-entry into the compiled entry from the rerun


def test_keyboard_interrupt_is_not_rerun() -> None:
    backend = FailingBackend(KeyboardInterrupt())
    jitted = framejit.jit(plain, backend=backend)
    x = torch.randn(4)
    same(jitted(x), plain(x))
    with pytest.raises(KeyboardInterrupt):
        jitted(x)
    assert backend.calls == 2


# --- whole-script mode (the frame hook) -----------------------------------------------------


@pytest.mark.skipif(not hook.available(), reason=hook.unavailable_reason())
@pytest.mark.parametrize("backend", BACKENDS)
def test_through_the_frame_hook(backend: str) -> None:
    x = torch.arange(5.0)
    events: list[str] = []
    got = []
    with framejit.enabled(backend=backend):
        for idx in (IN_RANGE, OUT_OF_RANGE, OUT_OF_RANGE, IN_RANGE):
            got.append(index_in_try(x, idx))
            got.append(after_a_break(x, idx))
            try:
                got.append(finally_once(x, idx, events))
            except IndexError:
                got.append("raised")
    want = []
    for idx in (IN_RANGE, OUT_OF_RANGE, OUT_OF_RANGE, IN_RANGE):
        want += [index_in_try(x, idx), after_a_break(x, idx)]
        try:
            want.append(finally_once(x, idx, []))
        except IndexError:
            want.append("raised")
    same(got, want)
    assert events == ["finally"] * 4
    state = hook.require().get_code_state(index_in_try.__code__)
    assert state is not None and state is not ... and state.entries  # compiled, not skipped


@pytest.mark.skipif(not hook.available(), reason=hook.unavailable_reason())
def test_the_hook_does_not_reenter_the_failing_entry() -> None:
    backend = FailingBackend(RuntimeError("kernel failed"))
    x = torch.randn(4)
    with framejit.enabled(backend=backend):
        got = [plain(x) for _ in range(3)]
    for g in got:
        same(g, plain(x))
    assert backend.calls == 3


def _times_a_half(x, y):
    x *= 0.5  # operator.imul: torch's fake mul_ does not check the cast
    return x


def _over_two(x, y):
    x /= 2
    return x + y


def _add_a_float_tensor(x, y):
    x += y * 0.5
    return x


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "call",
    [
        lambda x, y: x.logit_() + 1,
        lambda x, y: x.ldexp_(y) * 2,
        lambda x, y: torch.Tensor.logit_(x) + 1,
        lambda x, y: x.mul_(0.5),
        _times_a_half,
        _over_two,
        _add_a_float_tensor,
    ],
    ids=["logit_", "ldexp_", "Tensor.logit_", "mul_", "*=", "/=", "+="],
)
def test_in_place_result_an_integer_tensor_cannot_hold(backend: str, call) -> None:
    """Eager refuses to write a float result into a long tensor; so does framejit (fake kernels
    of some of these ops do not check, so the frontend checks the out-of-place dtype)."""
    for dtype in (torch.int64, torch.bool):
        x, y = torch.tensor([1, 2]).to(dtype), torch.tensor([1, 2])
        with pytest.raises(RuntimeError) as eager:
            call(x.clone(), y)
        with pytest.raises(RuntimeError) as got:
            framejit.jit(call, backend=backend)(x.clone(), y)
        assert type(got.value) is type(eager.value)
        if call.__name__ == "<lambda>":  # the augmented assignments word it their own way
            assert str(got.value) == str(eager.value)
    x = torch.tensor([0.25, 0.5])  # a float tensor holds the result: captured as usual
    counter = CompileCounter()
    got = framejit.jit(call, backend=counter)(x.clone(), torch.tensor([1, 2]))
    same(got, call(x.clone(), torch.tensor([1, 2])))
    assert counter.frame_count == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_in_place_op_that_would_resize_its_tensor(backend: str) -> None:
    """Eager's in-place ops keep their tensor's sizes: `x.addr_(u, v)` on a 0-d x raises, where
    torch's meta kernel resizes x to the outer product's sizes (framejit once wrote a [5, 10]
    result into x). The op is a graph break, so eager raises its own error; ops that do
    resize (`unsqueeze_`) are captured."""

    def fn(x, u, v):
        y = x * 2
        x.addr_(u, v)
        return y + 1

    u, v = torch.ones(5), torch.ones(10)
    with pytest.raises(RuntimeError) as eager:
        fn(torch.tensor(1.0), u, v)
    x = torch.tensor(1.0)
    with pytest.raises(RuntimeError) as got:
        framejit.jit(fn, backend=backend)(x, u, v)
    assert str(got.value) == str(eager.value)
    assert x.shape == ()

    def resizes(x, u, v):
        x.addr_(u, v)
        x.unsqueeze_(0)
        return x * 2

    counter = CompileCounter()
    got = framejit.jit(resizes, backend=counter)(torch.zeros(5, 10), u, v)
    same(got, resizes(torch.zeros(5, 10), u, v))
    assert counter.frame_count == 1


def user_errors(x, items):
    try:
        v = items.pop()  # IndexError, as in eager
    except IndexError as err:
        v = str(err)
    table = {}
    try:
        table[[1]] = 2  # TypeError: unhashable
    except TypeError as err:
        v = v + "; " + str(err)
    return x * 2, v


def test_python_errors_of_the_users_code_are_traced_not_internal_errors(caplog) -> None:
    x = torch.ones(2)
    counter = CompileCounter()
    got = framejit.jit(user_errors, backend=counter)(x, [])
    expected = user_errors(x, [])
    torch.testing.assert_close(got[0], expected[0])
    assert got[1] == expected[1] == "pop from empty list; unhashable type: 'list'"
    assert counter.frame_count == 1
    assert "internal error" not in caplog.text
    with pytest.raises(ValueError, match="empty"):
        framejit.jit(lambda t: t + max([]), backend="eager")(x)

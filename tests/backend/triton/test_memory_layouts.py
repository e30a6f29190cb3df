"""Outputs laid out as eager lays them out, on every backend, for the ops whose fake kernels or
decompositions choose another layout given a channels_last or transposed input
(frontend/layouts.py, backend/aot/compile.py's `_layout_fixes`), and for an `out=` tensor the
op resizes. What the program does next depends on it: `.view` succeeds or raises,
`is_contiguous()` picks a branch."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import framejit

BACKENDS = ["eager", "aot_eager", "triton"]

CASES = {
    "pad": lambda x, t: F.pad(x, (1, 1, 1, 1)),
    "roll": lambda x, t: torch.roll(x, 1, 2),
    "roll_method": lambda x, t: x.roll(1, 3),
    "channel_shuffle": lambda x, t: F.channel_shuffle(x, 3),
    "interpolate": lambda x, t: F.interpolate(x, scale_factor=0.75, mode="bilinear"),
    "batch_norm": lambda x, t: F.batch_norm(x, None, None, training=True),
    "copysign_0d": lambda x, t: torch.copysign(x, t),
    "div_floor_0d": lambda x, t: x.div(t, rounding_mode="floor"),
    "logsigmoid": lambda x, t: F.logsigmoid(x),
    "logsigmoid_then_view": lambda x, t: F.logsigmoid(x).view(2, -1),
    "pad_then_view": lambda x, t: F.pad(x, (1, 1, 1, 1)).view(2, -1),
    "roll_then_exp": lambda x, t: torch.roll(x, 1, 2).exp(),
    # operands of different layouts
    "floordiv_mixed": lambda x, t: x // (x.contiguous().abs() + 1),
    "logaddexp_mixed": lambda x, t: torch.logaddexp(x.contiguous(), x),
    "heaviside_0d": lambda x, t: torch.heaviside(x, t),
    "logical_and_mixed": lambda x, t: torch.logical_and(x.contiguous(), x),
}


def _inputs():
    channels_last = torch.randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last)
    transposed = torch.randn(5, 4, 3, 2).permute(3, 2, 1, 0)
    return {"channels_last": channels_last, "transposed": transposed}


def _run(fn, x, t):
    try:
        return fn(x, t)
    except RuntimeError as exc:
        return exc


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("layout", ["channels_last", "transposed"])
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
def test_outputs_have_eagers_strides(backend, layout, case, grad):
    fn = CASES[case]
    base = _inputs()[layout]
    t = torch.tensor(2.0)
    x_eager = base.detach().clone().requires_grad_(grad)
    x_jit = base.detach().clone().requires_grad_(grad)
    expected = _run(fn, x_eager, t)
    actual = _run(framejit.jit(fn, backend=backend), x_jit, t)
    if isinstance(expected, Exception):
        assert isinstance(actual, type(expected)), actual
        return
    assert not isinstance(actual, Exception), actual
    assert actual.stride() == expected.stride()
    torch.testing.assert_close(actual, expected, equal_nan=True)
    if grad and expected.requires_grad:
        failed = _backward(expected)  # floor_divide has no derivative: eager raises here
        assert type(_backward(actual)) is type(failed)
        if failed is None:
            torch.testing.assert_close(x_jit.grad, x_eager.grad)


def _backward(out):
    try:
        out.square().sum().backward()
    except RuntimeError as exc:
        return exc
    return None


@pytest.mark.parametrize("backend", BACKENDS)
def test_is_contiguous_takes_eagers_branch(backend):
    def fn(x):
        y = F.pad(x, (1, 1, 1, 1))
        if y.is_contiguous():
            return y.view(-1) + 1
        return y.reshape(-1) - 1

    x = torch.randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(framejit.jit(fn, backend=backend)(x), fn(x))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_break_between_the_op_and_the_view(backend):
    """The graph ends at the op (a print breaks it): the view outside runs on the compiled
    graph's output, which must be laid out as eager's is."""

    def fn(x):
        y = F.logsigmoid(x)
        print(end="")
        return y.view(2, -1)

    x = torch.randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last)
    expected = _run(lambda x, t: fn(x), x, None)
    actual = _run(lambda x, t: framejit.jit(fn, backend=backend)(x), x, None)
    if isinstance(expected, Exception):  # CUDA's logsigmoid keeps channels_last: no view
        assert isinstance(actual, type(expected)), actual
    else:
        torch.testing.assert_close(actual, expected)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_op_eager_fails_on_for_its_layout_runs_eagerly(backend, monkeypatch):
    """Where eager's kernel raises for the input's layout whatever the values (CUDA's
    channel_shuffle views a transposed input), the op is a graph break with that reason, and
    eager's own kernel runs: its result, or its error."""
    from framejit.frontend import layouts

    def failing(kind, target, args, kwargs):
        raise layouts.LayoutError("RuntimeError: view size is not compatible (as on CUDA)")

    monkeypatch.setattr(layouts, "_real_run", failing)

    def fn(x):
        return F.channel_shuffle(x, 3) * 2

    x = _inputs()["transposed"]
    expected = _run(lambda x, t: fn(x), x, None)
    if isinstance(expected, Exception):  # CUDA's kernel itself: the program raises its error
        actual = _run(lambda x, t: framejit.jit(fn, backend=backend)(x), x, None)
        assert type(actual) is type(expected) and str(actual) == str(expected), actual
        x = x.cpu()  # and where eager's kernel takes the layout, eager's result
    explained = framejit.explain(fn, x)
    assert explained.graph_break_count == 1
    assert "view size is not compatible" in str(explained.break_reasons[0])
    torch.testing.assert_close(framejit.jit(fn, backend=backend)(x), fn(x))


def _add_into_new(x):
    out = torch.empty(0)
    torch.add(x, 1, out=out)
    return out


def _sort_into_new(x):
    values, indices = torch.empty(0), torch.empty(0, dtype=torch.long)
    torch.sort(x, 1, out=(values, indices))
    return values, indices


def _branch_on_layout(x):
    out = torch.empty(0)
    torch.sin(x, out=out)
    return out + 1 if out.is_contiguous() else out - 1


def _div_then_exp(x):
    out = torch.empty(0)
    torch.div(x, 2, out=out)
    return out.exp()


def _outcome(fn, x):
    try:
        return fn(x)
    except RuntimeError as exc:
        return exc


# an `out=` tensor the op resizes takes the layout of its result (frontend/layouts.py)
RESIZED_OUT = {
    "add_given": lambda x: torch.add(x, 1, out=torch.empty(0)),
    "add_made_in_frame": _add_into_new,
    "sort_pair": _sort_into_new,
    "is_contiguous_branch": _branch_on_layout,
    "then_exp": _div_then_exp,
    "logsigmoid_given": lambda x: torch._C._nn.log_sigmoid(x, out=torch.empty(3)),
    "view_of_resized": lambda x: torch.mul(x, 2, out=torch.empty(0)).view(-1),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("layout", ["channels_last", "transposed"])
@pytest.mark.parametrize("case", sorted(RESIZED_OUT))
def test_a_resized_out_tensor_has_eagers_strides(backend, layout, case):
    fn = RESIZED_OUT[case]
    framejit.reset()
    jitted = framejit.jit(fn, backend=backend)
    for x in [_inputs()[layout], _inputs()[layout][:1]]:  # the second: sizes of their own
        expected, actual = _outcome(fn, x), _outcome(jitted, x)
        if isinstance(expected, Exception):  # the view of a resized tensor that is not dense
            assert isinstance(actual, type(expected)), actual
            continue
        expected = expected if isinstance(expected, tuple) else (expected,)
        actual = actual if isinstance(actual, tuple) else (actual,)
        assert [a.stride() for a in actual] == [e.stride() for e in expected]
        torch.testing.assert_close(actual, expected)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_out_tensor_of_the_right_size_keeps_its_strides(backend):
    """Eager restrides only what it resizes: a contiguous `out=` of the result's sizes stays
    contiguous given a channels_last input."""

    def fn(x, out):
        return torch.add(x, 1, out=out)

    x = _inputs()["channels_last"]
    out = torch.empty(x.shape)
    assert framejit.jit(fn, backend=backend)(x, out) is out
    assert out.is_contiguous() and torch.equal(out, x + 1)


@pytest.mark.parametrize("backend", ["aot_eager", "triton"])
def test_a_resized_out_tensor_in_a_training_graph(backend):
    def fn(x, w):
        out = torch.empty(0)
        torch.add(x, 1, out=out)
        return out * w

    x = _inputs()["channels_last"]
    w_eager, w_jit = (torch.randn(5, requires_grad=True) for _ in range(2))
    with torch.no_grad():
        w_jit.copy_(w_eager)
    expected, actual = fn(x, w_eager), framejit.jit(fn, backend=backend)(x, w_jit)
    assert actual.stride() == expected.stride()
    torch.testing.assert_close(actual, expected)
    expected.sum().backward()
    actual.sum().backward()
    torch.testing.assert_close(w_jit.grad, w_eager.grad)

"""The AOT stage on inference graphs: functional aten graphs that give eager's results, with
input mutations applied after the graph and aliasing outputs rebuilt as real views."""

from __future__ import annotations

import operator
import warnings

import pytest
import torch
import torch.fx
import torch.nn.functional as F
from framejit.backend import lookup_backend
from framejit.backend.aot import aot_compile
from framejit.backend.aot.analysis import analyze
from framejit.backend.aot.runtime import InferenceRunner
from helpers import aot, clone_inputs
from torch import nn

import framejit


def check(fn, *inputs):
    """Compiled `fn` equals eager on outputs and on the inputs afterwards; returns both outs."""
    compiled = aot(fn, *clone_inputs(inputs))
    eager_inputs, compiled_inputs = clone_inputs(inputs), clone_inputs(inputs)
    expected = fn(*eager_inputs)
    actual = compiled(*compiled_inputs)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        if isinstance(e, torch.Tensor):
            torch.testing.assert_close(a, e)
        else:
            assert a == e
    for a, e in zip(compiled_inputs, eager_inputs):
        if isinstance(e, torch.Tensor):
            torch.testing.assert_close(a, e)
    return actual, compiled_inputs, compiled


def test_pure_graph_runs_inference_runner():
    out, _, compiled = check(
        lambda x, y: (torch.sin(x) @ y + 1,), torch.randn(3, 4), torch.randn(4)
    )
    assert isinstance(compiled, InferenceRunner)


def test_input_mutation_is_applied_after_the_graph():
    def f(x, y):
        x.add_(1)
        y[:, 1].copy_(x[:, 0])
        return (x * y,)

    x, y = torch.randn(3, 3), torch.randn(3, 3)
    _, inputs, compiled = check(f, x, y)
    assert compiled.info.mutated == [0, 1]
    text = compiled.compiled.__self__.code  # the aten graph itself has no in-place op
    assert "add_" not in text and "copy_" not in text


def test_mutation_bumps_version_and_keeps_identity():
    def f(x):
        x.mul_(2)
        return (x,)

    x = torch.randn(4)
    compiled = aot(f, x.clone())
    before = x._version
    (out,) = compiled(x)
    assert out is x and x._version > before


def test_output_views_of_inputs_are_real_views():
    def f(x):
        return x.view(2, 3), x.t(), x[0], x

    x = torch.randn(3, 2)
    out, inputs, _ = check(f, x)
    x = inputs[0]
    assert out[3] is x
    for view in out[:3]:
        assert view._base is x and view.untyped_storage().data_ptr() == x.data_ptr()


def test_view_of_mutated_input_sees_the_new_value():
    def f(x):
        x.add_(1)
        return (x.view(-1),)

    out, inputs, _ = check(f, torch.randn(2, 2))
    assert out[0]._base is inputs[0]
    inputs[0].zero_()
    assert out[0].abs().sum() == 0


def test_outputs_aliasing_each_other_share_a_base():
    def f(x):
        y = x + 1
        return y.view(-1), y[0], y.t()

    out, _, compiled = check(f, torch.randn(2, 3))
    bases = {o._base.data_ptr() for o in out}
    assert len(bases) == 1
    out[0].zero_()
    assert out[1].abs().sum() == 0 and out[2].abs().sum() == 0


def test_output_and_its_view_both_returned():
    def f(x):
        y = x * 2
        return y, y.view(-1)

    out, _, _ = check(f, torch.randn(2, 3))
    assert out[1]._base is out[0]


def test_same_tensor_passed_twice_is_traced_once():
    def f(a, b):
        a.add_(1)
        return (a + b,)

    x = torch.randn(3)
    compiled = aot(f, x, x)
    assert compiled.info.unique == [0]
    ref = x.clone()
    ref.add_(1)
    (out,) = compiled(x, x)
    torch.testing.assert_close(out, ref + ref)
    torch.testing.assert_close(x, ref)


def test_mutated_input_overlapping_another_runs_as_captured():
    def f(a, b):
        a.add_(1)
        return (a + b,)

    base = torch.randn(4)
    compiled = aot(f, base[:3], base[1:])
    assert not isinstance(compiled, InferenceRunner)  # the captured graph as it is: still correct
    expected_base = base.clone()
    expected = f(expected_base[:3], expected_base[1:])
    (out,) = compiled(base[:3], base[1:])
    torch.testing.assert_close(out, expected[0])
    torch.testing.assert_close(base, expected_base)


def test_scalars_and_none_pass_through():
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    y = graph.call_function(operator.add, (x, 1))
    graph.output((y, None, 3, x))
    gm = torch.fx.GraphModule(nn.Module(), graph)
    t = torch.randn(2)
    out = aot(gm, t)(t)
    torch.testing.assert_close(out[0], t + 1)
    assert out[1] is None and out[2] == 3 and out[3] is t


def test_batchnorm_train_updates_running_stats():
    def f(x, mean, var, weight, bias, count):
        count.add_(1)
        return (F.batch_norm(x, mean, var, weight, bias, True, 0.1, 1e-5),)

    with torch.no_grad():
        _, inputs, compiled = check(
            f,
            torch.randn(4, 3, 5),
            torch.zeros(3),
            torch.ones(3),
            torch.randn(3),
            torch.randn(3),
            torch.tensor(0),
        )
    assert compiled.info.mutated == [1, 2, 5]
    assert inputs[5].item() == 1 and inputs[1].abs().sum() > 0


def test_metadata_mutation_runs_as_captured():
    def f(x):
        x.t_()
        return (x + 1,)

    x = torch.randn(2, 3)
    info = analyze(torch.fx.symbolic_trace(f), [x.clone()])
    assert info.fallback is not None and "sizes or strides" in info.fallback
    check(f, x)


def test_aot_graphs_log(capsys):
    framejit.set_logs(aot_graphs=True)
    aot(lambda x: (x.relu().sum(),), torch.randn(3))
    err = capsys.readouterr().err
    assert "[framejit:aot_graphs]" in err and "inference graph" in err and "aten.relu" in err


@pytest.mark.parametrize("training", [False, True], ids=["inference", "training"])
def test_auto_on_cpu_uses_aot_for_training_and_eager_for_inference(training, monkeypatch):
    import framejit.backend.aot as aot_package

    seen = []
    original = aot_package.aot_compile

    def spy(*args, **kwargs):
        seen.append(True)
        return original(*args, **kwargs)

    monkeypatch.setattr(aot_package, "aot_compile", spy)

    @framejit.jit(backend="auto")
    def f(x):
        return torch.cos(x) * 2

    x = torch.randn(5, requires_grad=training)
    out = f(x)
    torch.testing.assert_close(out, torch.cos(x) * 2)
    if training:
        (g,) = torch.autograd.grad(out.sum(), x)
        torch.testing.assert_close(g, -2 * torch.sin(x))
    assert bool(seen) is training


def test_grad_mode_switches_without_grad_go_through_the_stage(monkeypatch):
    """A `with torch.no_grad()` block in a graph where no tensor requires grad changes no value:
    the stage drops the switch and traces the graph (with grad, the joint trace runs the
    switches: test_aot_training.py)."""
    import framejit.backend.aot.compile as aot_compile_module

    traced = []
    original = aot_compile_module._compile

    def spy(*args, **kwargs):
        traced.append(True)
        return original(*args, **kwargs)

    monkeypatch.setattr(aot_compile_module, "_compile", spy)

    def fn(x, w):
        y = x @ w
        with torch.no_grad():
            z = y.relu() * 2
        return z + y

    jitted = framejit.jit(fn, backend="aot_eager")
    x, w = torch.randn(3, 4), torch.randn(4, 4)
    for _ in range(2):
        torch.testing.assert_close(jitted(x, w), fn(x, w))
    assert torch.is_grad_enabled() and traced == [True]
    w = w.requires_grad_()
    got, want = jitted(x, w), fn(x, w)
    torch.testing.assert_close(got, want)
    assert got.requires_grad and traced == [True, True]  # with grad: traced with the switch
    (g,) = torch.autograd.grad(got.sum(), w)
    (h,) = torch.autograd.grad(want.sum(), w)
    torch.testing.assert_close(g, h)


def test_out_tensor_of_another_size_is_resized():
    """A graph traced with one symbolic size for `x` and the `out=` tensor, called with an
    `out=` tensor of another size: resized as eager resizes it (warning when it had elements)."""

    def f(x, o):
        torch.sin(x, out=o)
        return o

    jitted = framejit.jit(f, backend="aot_eager")
    jitted(torch.randn(4), torch.empty(4))
    x, o = torch.randn(5), torch.empty(0)
    assert jitted(x, o) is o
    torch.testing.assert_close(o, x.sin())
    x, o = torch.randn(6), torch.empty(2)
    with pytest.warns(UserWarning, match="was resized since it had shape"):
        jitted(x, o)
    torch.testing.assert_close(o, x.sin())


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: (x.conj(),),
        lambda x: (x.mH,),
        lambda x: (x.conj().t(), x * 1),
        lambda x: ((x * 2).conj(),),
        lambda x: (torch._neg_view(x),),
    ],
    ids=["conj", "mH", "conj_t", "conj_of_computed", "neg_view"],
)
@pytest.mark.parametrize("grad", [False, True], ids=["inference", "training"])
def test_conjugate_views_keep_their_bits(fn, grad):
    x = torch.tensor([[1 + 2j, 3 - 1j], [0.5 - 2j, -1 + 1j]], requires_grad=grad)
    compiled = aot(fn, *clone_inputs((x,)))
    (x_eager,), (x_compiled,) = clone_inputs((x,)), clone_inputs((x,))
    expected, actual = fn(x_eager), compiled(x_compiled)
    weight = torch.tensor([[1 + 1j, 2 - 3j], [0.3 + 0j, -1j]])
    for a, e in zip(actual, expected):
        assert (a.is_conj(), a.is_neg()) == (e.is_conj(), e.is_neg())
        torch.testing.assert_close(a.resolve_conj().resolve_neg(), e.resolve_conj().resolve_neg())
    if grad:
        sum((e * weight).real.sum() for e in expected).backward()
        sum((a * weight).real.sum() for a in actual).backward()
        torch.testing.assert_close(x_compiled.grad, x_eager.grad)


def _copy_transpose(x):
    x.copy_(x.t())
    return (x,)


def _add_to_expanded(x):
    y = x.expand(2, 3)
    y.add_(1)
    return (y,)


@pytest.mark.parametrize(
    "fn, make",
    [
        (_copy_transpose, lambda n: torch.arange(n * n * 1.0).reshape(n, n)),
        (_add_to_expanded, torch.ones),
    ],
    ids=["partial_overlap", "internal_overlap"],
)
def test_overlapping_in_place_write_raises_as_in_eager(fn, make):
    with pytest.raises(RuntimeError, match="unsupported operation") as eager:
        fn(make(3))
    with pytest.raises(RuntimeError, match="unsupported operation") as compiled:
        framejit.jit(fn, backend="aot_eager")(make(3))
    assert str(compiled.value) == str(eager.value)


def test_writes_eager_accepts_stay_in_the_stage():
    """Full overlap (`x.mul_(x)`) and strided views eager does not check go through the stage."""

    def f(x):
        x.mul_(x)
        x[:, 0].copy_(x[:, 1])
        x[0::2, 0].add_(x[1, :2])  # byte ranges overlap, elements do not
        return (x + 1,)

    x = torch.randn(3, 3)
    assert analyze(torch.fx.symbolic_trace(f), [x.clone()]).fallback is None
    check(f, x)


@pytest.mark.parametrize("grad", [False, True])
def test_a_write_before_an_op_that_raises_is_kept_as_in_eager(grad):
    # the functional graph writes inputs only once it succeeded; eager wrote x before the
    # index failed: the captured graph runs as it is to give eager's writes and error
    def f(x, w, idx):
        x.add_(1)
        return x[idx] * w

    w = torch.ones(1, requires_grad=grad)
    jitted = framejit.jit(f, backend="aot_eager")
    jitted(torch.zeros(3), w, torch.tensor([1]))
    x, expected = torch.zeros(3), torch.zeros(3)
    with pytest.raises(IndexError) as got:
        jitted(x, w, torch.tensor([9]))
    with pytest.raises(IndexError) as want:
        f(expected, w, torch.tensor([9]))
    assert str(got.value) == str(want.value)
    torch.testing.assert_close(x, expected)


def _shift_by_setitem(x):
    x[1:] = x[:-1]
    return (x,)


def _index_put_overlapping(x):
    x[torch.tensor([1, 2])] = x[3:]
    return (x,)


@pytest.mark.parametrize(
    "fn", [_shift_by_setitem, _index_put_overlapping], ids=["slice", "advanced_index"]
)
def test_setitem_overlapping_its_value_raises_as_in_eager(fn):
    with pytest.raises(RuntimeError, match="unsupported operation") as eager:
        fn(torch.arange(5.0))
    with pytest.raises(RuntimeError, match="unsupported operation") as compiled:
        framejit.jit(fn, backend="aot_eager")(torch.arange(5.0))
    assert str(compiled.value) == str(eager.value)


def _jit_with_fallbacks(fn, *inputs):
    """`fn(*inputs)` through framejit's `aot_eager`, and the analysis's `fallback` for each
    captured graph (symbolic_trace does not capture setitem nor `+=`)."""
    fallbacks = []

    def backend(gm, example_inputs):
        fallbacks.append(analyze(gm, example_inputs).fallback)
        return lookup_backend("aot_eager")(gm, example_inputs)

    return framejit.jit(fn, backend=backend)(*inputs), fallbacks


def test_setitem_without_overlap_stays_in_the_stage():
    def f(x):
        x[1:3] = x[3:5]
        x[torch.tensor([0])] = x[4:] * 2
        x[:, 0] = x[:, 1]
        return (x * 2,)

    x = torch.randn(5, 3)
    (got,), fallbacks = _jit_with_fallbacks(f, x.clone())
    assert fallbacks == [None]
    (expected,) = f(x.clone())
    torch.testing.assert_close(got, expected)


def _add_own_column(x):
    x += x[:, :1]
    return (x,)


def _copy_shifted_columns(x):
    x[:, 1:].copy_(x[:, :-1])
    return (x,)


@pytest.mark.parametrize("fn", [_add_own_column, _copy_shifted_columns], ids=["iadd", "copy_"])
def test_in_place_op_reading_what_it_writes_runs_as_captured(fn):
    """Eager does not check these (the read view is not dense); its result depends on the
    order it writes in, so the graph runs as captured."""
    x = torch.arange(6.0).view(2, 3)
    (got,), fallbacks = _jit_with_fallbacks(fn, x.clone())
    assert len(fallbacks) == 1 and "reads elements it writes" in fallbacks[0]
    (expected,) = fn(x.clone())
    assert torch.equal(got, expected)


def test_tracing_gives_no_warnings_of_its_own():
    """The stage's runs on FakeTensors say nothing: `out=` of another size gives eager's one
    resize warning per call, not also torch's decomposition's (with a garbled message)."""

    def f(x, o):
        torch.add(x, 1, out=o)
        return (o,)

    def run(fn):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fn(torch.ones(3), torch.zeros(5))
        return [(w.category, str(w.message)) for w in caught]

    expected = run(f)
    assert len(expected) == 1
    assert run(lambda x, o: aot(f, x, o)(x, o)) == expected


def test_tracing_failure_prints_nothing(capfd):
    """A graph functionalization refuses (a write into an overlapping `unfold` view) runs as
    captured, without the traceback a GraphModule prints when its code raises."""

    def f(x):
        x.unfold(0, 2, 1).add_(1)
        return (x,)

    (got,) = framejit.jit(f, backend="aot_eager")(torch.zeros(4))
    assert got.tolist() == f(torch.zeros(4))[0].tolist()
    out, err = capfd.readouterr()
    assert err == ""


@pytest.mark.parametrize("grad_mode", [torch.no_grad, torch.inference_mode])
def test_views_of_parameters_at_inference_are_compiled(grad_mode):
    """Under no_grad a view of a parameter (`w.t()`, GPT-2's tied logits `h @ wte.weight.t()`)
    is a leaf that requires grad, like a new `requires_grad=True` tensor: it is the parameter's
    alias, so the graph is still compiled, and the view output is eager's view."""
    w = nn.Parameter(torch.randn(6, 4))  # the frontend passes parameters as graph inputs

    def f(h, w):
        return h @ w.t(), w.T, w[1:3], w.t() * 2

    h = torch.randn(2, 4)
    with grad_mode():
        compiled = aot(f, h, w)
        assert isinstance(compiled, InferenceRunner)
        got, expected = compiled(h, w), f(h, w)
    for a, e in zip(got, expected):
        torch.testing.assert_close(a, e)
        assert (a.requires_grad, a.is_leaf, a._is_view()) == (
            e.requires_grad,
            e.is_leaf,
            e._is_view(),
        )
    assert got[1]._base is w and got[2]._base is w


def test_tied_logits_at_inference_run_compiled():
    """Through the frontend: `ln(x) @ emb.weight.t()` under no_grad reaches the inner backend."""
    emb, ln = nn.Embedding(50, 8), nn.LayerNorm(8)
    seen = []

    def inner(gm, example_inputs):
        seen.append(gm)
        return gm.forward

    def backend(gm, example_inputs):
        return aot_compile(gm, example_inputs, inner)

    def logits(ids):
        return ln(emb(ids)) @ emb.weight.t()

    ids = torch.randint(0, 50, (2, 5))
    with torch.no_grad():
        got = framejit.jit(logits, backend=backend)(ids)
    torch.testing.assert_close(got, logits(ids))
    assert len(seen) == 1


# --- found by fuzzing: aliasing, overlap and view rules with symbolic sizes ------------------


def _mutates_a_view_input(x, y):
    y.mul_(10)
    return x + 0


@pytest.mark.parametrize("dynamic", [None, True])
def test_a_mutated_input_viewing_another_input_with_symbolic_sizes(dynamic):
    # symbolic fakes are made one per input: `f(t, t[1:])` looked like two storages, so the
    # mutation of y was applied to a copy and x + 0 read stale values from the second size on
    jitted = framejit.jit(_mutates_a_view_input, backend="aot_eager", dynamic=dynamic)
    for n in (4, 5, 3, 6):
        t, expected_t = torch.arange(float(n)), torch.arange(float(n))
        expected = _mutates_a_view_input(expected_t, expected_t[1:])
        torch.testing.assert_close(jitted(t, t[1:]), expected)
        torch.testing.assert_close(t, expected_t)


@pytest.mark.parametrize(
    "fn", [_shift_by_setitem, _add_own_column, _copy_transpose], ids=["shift", "column", "t"]
)
def test_overlapping_writes_with_symbolic_sizes_give_eagers_result_or_error(fn):
    # the overlap checks were skipped for symbolic sizes: the input was silently rewritten
    # where eager raises, and `x += x[:, :1]` gave another result
    jitted = framejit.jit(fn, backend="aot_eager", dynamic=True)
    for n in (4, 5, 7):
        x = torch.arange(float(n * n)).reshape(n, n) if fn is not _shift_by_setitem else None
        x = torch.arange(float(n)) if x is None else x
        expected_x, got_x = x.clone(), x.clone()
        try:
            expected = fn(expected_x)
        except RuntimeError as exc:
            with pytest.raises(RuntimeError) as got:
                jitted(got_x)
            assert str(got.value) == str(exc)
            continue
        torch.testing.assert_close(jitted(got_x), expected)
        torch.testing.assert_close(got_x, expected_x)


@pytest.mark.parametrize("backend", ["aot_eager", "triton"])
@pytest.mark.parametrize("index", [False, True])
def test_a_write_through_unfold_windows_keeps_what_no_window_covers(backend, index):
    # functionalization writes an unfold view back with unfold_backward, which zero-filled
    # x[6] (no window covers it); the graph runs as captured
    def f(x):
        if index:
            x.unfold(0, 3, 3)[:, 1] = 0
        else:
            x.unfold(0, 2, 2).zero_()
        return x * 1

    x, expected_x = torch.arange(1.0, 8.0), torch.arange(1.0, 8.0)
    expected = f(expected_x)
    torch.testing.assert_close(framejit.jit(f, backend=backend)(x), expected)
    torch.testing.assert_close(x, expected_x)


@pytest.mark.parametrize("backend", ["aot_eager", "triton"])
def test_detach_of_a_graph_value_shares_its_memory(backend):
    # `y.detach()` is no view (no _base) but y's memory: it came back a separate tensor, so
    # writing it did not change y
    def f(x):
        y = x * 2
        return y.detach(), y

    x = torch.ones(3, requires_grad=True)
    d, y = framejit.jit(f, backend=backend)(x)
    assert not d.requires_grad and y.requires_grad
    assert d.untyped_storage().data_ptr() == y.untyped_storage().data_ptr()
    d.zero_()
    torch.testing.assert_close(y.detach(), torch.zeros(3))


@pytest.mark.parametrize("backend", ["aot_eager", "triton"])
def test_writing_a_split_output_raises_as_in_eager(backend):
    # the outputs of split are rebuilt as views, and lost autograd's rule against writing an
    # output of a function that returns several views
    def f(x):
        a, b = (x * 1).split(2)
        return a, b

    x = torch.randn(4, requires_grad=True)
    a, _ = framejit.jit(f, backend=backend)(x)
    with pytest.raises(RuntimeError, match="returns multiple views"):
        a.mul_(2)


def test_no_grad_writes_through_views_of_a_parameter_go_through_the_stage():
    # a hand-written update of one row under no_grad: the analysis read `is_leaf` of the
    # written view, which raises for a no_grad view written in place (internal error)
    def f(w):
        with torch.no_grad():
            w[0].zero_()
            w[1:].mul_(0.5)
        return w * 1

    w = torch.ones(3, 2, requires_grad=True)
    expected_w = w.detach().clone().requires_grad_()
    got, fallbacks = _jit_with_fallbacks(f, w)
    expected = f(expected_w)
    assert fallbacks == [None]
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(w, expected_w)


def test_random_from_to_is_traced_with_eagers_numbers():
    # aten.random.from (`x.random_(low, high)`): fx cannot print an op named `from`
    def f(x, y):
        return x.random_(3, 10), y.random_(-5, 5)

    def inputs():
        return torch.empty(6), torch.empty(6, dtype=torch.int64)

    torch.manual_seed(0)
    expected = f(*inputs())
    torch.manual_seed(0)
    got = framejit.jit(f, backend="aot_eager")(*inputs())
    for g, e in zip(got, expected):
        assert torch.equal(g, e)


def test_a_backward_that_eager_would_refuse_still_runs_the_forward():
    # a saved tensor written in place later: eager's forward succeeds and its backward
    # raises; the joint trace raised at the call
    def f(x):
        y = x * 1
        y.mul_(y)
        y[0] = 0
        return y

    x = torch.randn(4, requires_grad=True)
    out = framejit.jit(f, backend="aot_eager")(x)
    torch.testing.assert_close(out, f(x))
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


def test_an_input_squeezed_in_place_with_symbolic_sizes_runs_as_captured():
    # the trace's squeeze_ changed the frontend's fake of the input itself, so the stage built
    # its symbolic input already squeezed: no metadata change seen, a resize warning, and
    # the graph went through the functional path
    def f(x):
        x.squeeze_(1)
        return x * 2

    jitted = framejit.jit(f, backend="aot_eager")
    for n in (3, 5, 6):
        x = torch.randn(n, 1, 2)
        expected_x = x.clone()
        expected = f(expected_x)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            got = jitted(x)
        torch.testing.assert_close(got, expected)
        assert x.shape == expected_x.shape == (n, 2)


@pytest.mark.parametrize("loss", [F.huber_loss, F.soft_margin_loss])
def test_losses_keep_the_inputs_dtype_as_in_eager(loss):
    # a bfloat16 input with a float32 target: eager's result is bfloat16; the decompositions
    # promoted it to float32 (kept whole now); gradients as eager's
    a = torch.linspace(-2, 2, 7, dtype=torch.bfloat16).requires_grad_()
    b = torch.linspace(1, -1, 7)
    want = loss(a, b)
    got = framejit.jit(lambda x, y: loss(x, y), backend="aot_eager")(a, b)
    assert got.dtype == want.dtype == torch.bfloat16
    torch.testing.assert_close(got, want)
    try:  # eager's huber_loss backward refuses the mix of dtypes: so must ours
        (g_want,) = torch.autograd.grad(want, a)
    except RuntimeError as exc:
        with pytest.raises(RuntimeError, match=str(exc)[:30]):
            torch.autograd.grad(got, a)
    else:
        torch.testing.assert_close(torch.autograd.grad(got, a)[0], g_want)


@pytest.mark.parametrize("value", [0.5, -1.7, 2.9, 3])
def test_addcmul_of_integers_by_a_float_value_truncates_it_as_eager(value):
    # eager converts the value to the tensors' dtype; torch's reference refused a float
    # (ValueError at the trace, so the graph ran uncompiled)
    def f(a, b, c):
        return torch.addcmul(a, b, c, value=value), a.clone().addcmul_(b, c, value=value)

    a, b, c = torch.tensor([1, 2, 3]), torch.tensor([1, -2, 3]), torch.tensor([4, 5, 6])
    (got, got_inplace), _, _ = check(f, a, b, c)
    assert torch.equal(got, f(a, b, c)[0]) and torch.equal(got_inplace, got)


@pytest.mark.parametrize(
    "dtypes", [("int64", "float32", "bfloat16"), ("int32", "int64", "float16")]
)
def test_addcmul_of_an_integer_tensor_with_floating_factors_keeps_a_float_value(dtypes):
    # the result is floating point: eager multiplies by 0.5 as it is (a truncated value gave
    # x + 0 * a * b: hF seed 7143)
    def f(a, b, c):
        return (torch.addcmul(a, b, c, value=0.5),)

    a = torch.tensor([[1, -2, 3]], dtype=getattr(torch, dtypes[0]))
    b = torch.tensor([[0.5], [-1.25]]).to(getattr(torch, dtypes[1]))
    c = torch.tensor([[3.0, -2.0, 1.5]]).to(getattr(torch, dtypes[2]))
    (got,), _, _ = check(f, a, b, c)
    (want,) = f(a, b, c)
    assert got.dtype == want.dtype and torch.equal(got, want)


def test_addcmul_with_a_value_out_of_the_dtypes_range_raises_eagers_error():
    def f(a):
        return torch.addcmul(a, a, a, value=300.0)

    a = torch.tensor([100, 2], dtype=torch.int8)
    with pytest.raises(RuntimeError, match="without overflow"):
        f(a)
    with pytest.raises(RuntimeError, match="without overflow"):
        aot(f, a)(a)

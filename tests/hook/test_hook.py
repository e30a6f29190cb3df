"""The frame hook in this process: what it compiles, what it leaves alone, and that results,
exceptions, tracers, profilers and threads behave exactly as without it."""

from __future__ import annotations

import asyncio
import cProfile
import os
import pstats
import subprocess
import sys
import threading
import traceback
import warnings

import pytest
import torch
from framejit.frontend import hook

import framejit
from framejit.testing import CompileCounter

pytestmark = pytest.mark.skipif(not hook.available(), reason=hook.unavailable_reason())


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _state(fn):
    """The code's state in the hook: ... not seen, None skipped, else its CodeCache."""
    return hook.require().get_code_state(fn.__code__)


def _compiled(fn) -> bool:
    state = _state(fn)
    return state is not None and state is not ... and bool(state.entries)


def test_compiles_a_tensor_function_and_reuses_it():
    def f(x, y):
        return torch.relu(x) * 2 + y

    x, y = torch.randn(4), torch.randn(4)
    counter = CompileCounter()
    with framejit.enabled(backend=counter):
        results = [f(x, y) for _ in range(5)]
    assert counter.frame_count == 1
    assert _compiled(f)
    for r in results:
        torch.testing.assert_close(r, torch.relu(x) * 2 + y)
    assert f(x, y) is not None  # outside the region: runs as plain Python
    assert counter.frame_count == 1


def test_a_graph_break_resumes_in_a_compiled_frame(capsys):
    """A break in a hooked frame compiles the graph before it and a resume function after it
    (the hook compiles that function's frame when it runs), not the whole frame eagerly."""

    def f(x, log):
        y = x.sin() * 2
        print("between")  # a break
        log.append(y.shape[0])
        for i in range(3):
            if i == 1:
                print("again")  # a break in a loop: one resume function per iteration
            y = y + i
        return y.cos() + 1

    x = torch.randn(4)
    eager_log: list[int] = []
    expected = f(x, eager_log)
    eager_out = capsys.readouterr().out
    counter = CompileCounter()
    log: list[int] = []
    with framejit.enabled(backend=counter):
        results = [f(x, log) for _ in range(3)]
    for r in results:
        torch.testing.assert_close(r, expected)
    assert capsys.readouterr().out == eager_out * 3 and log == eager_log * 3
    assert counter.frame_count == 3  # before the print, between the prints, after
    assert _compiled(f)


def test_a_decode_loop_that_breaks_every_step_compiles_its_body_a_few_times():
    """A greedy decoding loop as model libraries write it: a `while` loop that grows its
    sequence and stops on a value (`bool(tensor)`, a break in every step). The break in step 2
    resumes in step 1's resume function, whose sizes become symbolic: a few graphs for 30
    steps, not one per step."""

    def generate(w, ids, steps):
        done, n = False, 0
        while not done:
            h = torch.nn.functional.one_hot(ids, 8).float() @ w
            nxt = h[:, -1].argmax(-1, keepdim=True)
            ids = torch.cat([ids, nxt], dim=1)
            n += 1
            done = bool((nxt == 99).all()) or n >= steps
        return ids

    w, ids = torch.randn(8, 8), torch.tensor([[1, 2, 3]])
    counter = CompileCounter()
    with framejit.enabled(backend=counter):
        got = generate(w, ids, 30)
    torch.testing.assert_close(got, generate(w, ids, 30))
    assert got.shape == (1, 33)
    assert counter.frame_count <= 6


class _Gated(torch.nn.Module):
    """A layer whose forward breaks the graph (`nonzero`: a shape from the values)."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        h = self.fc(x)
        rows = torch.nonzero(h[:, 0] > 0).flatten()
        return x + h.index_fill(0, rows, 0.0).tanh()


class _Deep(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.layers = torch.nn.ModuleList(_Gated() for _ in range(n))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


@pytest.mark.parametrize("share", [True, False])
def test_the_layers_of_a_model_share_their_forwards_entries(share, monkeypatch):
    """Each of 12 layers breaks: the model's frame calls every layer for real and the hook
    compiles its forward. With config.share_module_graphs the second instance makes the entry
    shared by class (frontend/dynamic.py); without it every layer compiles its own, and past
    config.recompile_limit (8) the rest run eagerly."""
    monkeypatch.setattr(framejit.config, "share_module_graphs", share)
    torch.manual_seed(0)
    model = _Deep(12).eval()
    x = torch.randn(6, 8)
    counter = CompileCounter()
    with torch.no_grad(), framejit.enabled(backend=counter):
        got = [model(x) for _ in range(2)]
    with torch.no_grad():
        want = model(x)
    for g in got:
        torch.testing.assert_close(g, want)
    state = _state(type(model.layers[0]).forward)
    if share:
        assert len(state.entries) == 2
    else:  # an entry per layer up to the limit, then the code is skipped (None)
        assert state is None or len(state.entries) == framejit.config.recompile_limit


def test_recompiles_on_new_shapes_and_after_reset():
    def f(x):
        return x.sin() + 1

    counter = CompileCounter()
    with framejit.enabled(backend=counter):
        for n in (3, 4, 3, 4):
            torch.testing.assert_close(f(torch.ones(n)), torch.ones(n).sin() + 1)
        assert counter.frame_count == 2
        framejit.reset()
        torch.testing.assert_close(f(torch.ones(3)), torch.ones(3).sin() + 1)
    assert counter.frame_count == 3


def test_argument_kinds_and_closures():
    k = torch.tensor(3.0)

    def f(a, /, b, *rest, c=1.0, d, **kw):
        return a * b + sum(rest) * c + d * kw["e"] + k

    def eager():
        return (
            torch.ones(2) * 2 + (torch.ones(2) + 1) * 4.0 + torch.ones(2) * 5 + k,
            torch.ones(2) * 2 + 0 * 1.0 + 3 * 5 + k,
        )

    with framejit.enabled(backend="eager"):
        got = (
            f(torch.ones(2), 2, torch.ones(2), 1, c=4.0, d=torch.ones(2), e=5),
            f(torch.ones(2), 2, d=3, e=5),
        )
    for g, e in zip(got, eager()):
        torch.testing.assert_close(g, e)


def test_module_forward_is_compiled():
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU())

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = model

        def forward(self, x):
            return self.body(x).sum(dim=-1)

    net, x = Net(), torch.randn(2, 4)
    with framejit.enabled(), torch.no_grad():
        got = [net(x) for _ in range(3)]
    with torch.no_grad():
        expected = net(x)
    assert _compiled(Net.forward)
    for g in got:
        torch.testing.assert_close(g, expected)


def test_skip_rules():
    import json

    def pure(a, b):
        return a + b

    def no_tensor_work(x):
        return x.shape[0] * 2

    @framejit.disable
    def off(x):
        return x + 1

    with framejit.enabled(backend="eager"):
        assert pure(2, 3) == 5 and pure(torch.ones(1), 1).item() == 2
        assert no_tensor_work(torch.ones(3)) == 6
        assert off(torch.ones(1)).item() == 2
        json.dumps({"a": [1, 2]})
    assert _state(pure) is None  # first call had no tensor argument: skipped for good
    assert _state(no_tensor_work) is None  # traced, no graph: skipped once, free afterwards
    assert _state(off) is None
    assert _state(json.dumps) is None  # standard library
    assert _state(torch.nn.functional.relu) in (None, ...)  # torch: never compiled


def test_skipped_code_costs_no_callback():
    def pure(a):
        return a + 1

    mod = hook.require()
    with framejit.enabled():
        pure(1)
        before = mod.stats()["callbacks"]
        for i in range(1000):
            pure(i)
        after = mod.stats()["callbacks"]
    assert after == before


def test_reset_forgets_skip_marks():
    """A function first called without tensors is marked skip; after framejit.reset() it is
    looked at again, and compiled when it now gets tensors."""

    def scale(a):
        return a * 2

    counter = CompileCounter()
    with framejit.enabled(backend=counter):
        assert scale(3) == 6
        assert _state(scale) is None  # marked skip: no tensor argument
        assert float(scale(torch.ones(())).sum()) == 2.0  # still skipped: runs uncompiled
        assert counter.frame_count == 0
        framejit.reset()
        assert _state(scale) is ...  # not seen any more
        torch.testing.assert_close(scale(torch.ones(3)), torch.full((3,), 2.0))
        assert counter.frame_count == 1


def test_generators_and_coroutines_run_uncompiled():
    def gen(x):
        for i in range(3):
            x = x + i
            got = yield x
            if got is not None:
                x = x * got

    async def coro(x):
        await asyncio.sleep(0)
        return x * 2

    def use_gen(x):
        g = gen(x)
        out = [next(g), g.send(torch.tensor(2.0)), next(g)]
        try:
            g.throw(ValueError("into the generator"))
        except ValueError as exc:
            out.append(str(exc))
        return out

    x = torch.tensor(1.0)
    with framejit.enabled(backend="eager"):
        got = use_gen(x)
        res = asyncio.run(coro(x))
    assert [float(v) for v in got[:3]] == [1.0, 3.0, 5.0] and got[3] == "into the generator"
    assert got[:3] == use_gen(x)[:3]
    assert float(res) == 2.0
    assert _state(gen) is ...  # never looked at
    assert _state(coro) is ...


def test_exception_in_a_hooked_frame_points_at_user_lines():
    def inner(x):
        if x.shape[0] == 3:
            raise ValueError("bad size")  # the line the traceback must show
        return x + 1

    def outer(x):
        return inner(x) * 2

    with framejit.enabled(backend="eager"):
        for _ in range(2):
            with pytest.raises(ValueError, match="bad size") as info:
                outer(torch.ones(3))
        torch.testing.assert_close(outer(torch.ones(2)), (torch.ones(2) + 1) * 2)
    frames = traceback.extract_tb(info.value.__traceback__)
    assert frames[-1].name == "inner" and frames[-1].filename == __file__
    assert "raise ValueError" in frames[-1].line
    assert any(f.name == "outer" and f.filename == __file__ for f in frames)


def test_exception_from_compiled_graph_propagates():
    def mm(a, b):
        return (a @ b).relu()

    with framejit.enabled(backend="eager"):
        mm(torch.ones(2, 3), torch.ones(3, 2))
        with pytest.raises(RuntimeError):
            mm(torch.ones(2, 3), torch.ones(4, 2))
        torch.testing.assert_close(mm(torch.ones(2, 3), torch.ones(3, 2)), torch.full((2, 2), 3.0))


def test_recursion():
    def tsum(x, n):
        return x if n == 0 else tsum(x, n - 1) + 1

    def depth(n):
        return 0 if n == 0 else 1 + depth(n - 1)

    with framejit.enabled(backend="eager"):
        assert float(tsum(torch.zeros(()), 30)) == 30.0
        # Past a depth the hook steps aside (see test_deep_recursion_as_eager_does).
        assert depth(900) == 900
        with pytest.raises(RecursionError):
            depth(sys.getrecursionlimit() + 10)
        assert depth(10) == 10  # still healthy after the overflow


_DEEP = """
import sys
import torch
import framejit

def depth(n):
    return 0 if n == 0 else 1 + depth(n - 1)

def tsum(x, n):
    return x if n == 0 else tsum(x, n - 1) + 1

sys.setrecursionlimit(60_000)
with framejit.enabled(backend="eager"):
    print(depth(50_000), float(tsum(torch.zeros(()), 3_000)), depth(20))
"""


def test_deep_recursion_as_eager_does() -> None:
    """Every frame nests a C call while an evaluator is installed: past a depth the hook steps
    aside, so recursion that eager Python runs (with a raised recursion limit) neither overflows
    the C stack nor hits 3.12's C recursion limit; it comes back when the recursion unwinds."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=path)
    result = subprocess.run(
        [sys.executable, "-c", _DEEP], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["50000", "3000.0", "20"]


def test_enable_state_is_per_thread():
    def f(x):
        return x.cos() * 3

    def g(x):
        return x.sin() * 3

    seen = {}

    def other():
        seen["on"] = hook.require().thread_enabled()
        seen["g"] = g(torch.ones(2))

    counter = CompileCounter()
    with framejit.enabled(backend=counter):
        f(torch.ones(2))
        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert seen["on"] is False
    torch.testing.assert_close(seen["g"], torch.ones(2).sin() * 3)
    assert _compiled(f) and _state(g) is ...
    assert counter.frame_count == 1


def test_threads_hooked_together():
    def f(x, k):
        return x * k + 1

    errors: list[BaseException] = []

    def work(k):
        try:
            with framejit.enabled(backend="eager"):
                for _ in range(50):
                    torch.testing.assert_close(f(torch.ones(3), k), torch.ones(3) * k + 1)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert _compiled(f)


def test_settrace_sees_user_frames_and_results_hold():
    def f(x):
        y = x + 1
        return y * 2

    calls = []

    def tracer(frame, event, arg):
        if event == "call" and frame.f_code is f.__code__:
            calls.append(frame.f_lineno)
        return None

    with framejit.enabled(backend="eager"):
        f(torch.ones(2))  # compiled
        sys.settrace(tracer)
        try:
            got = f(torch.ones(2))
        finally:
            sys.settrace(None)
    torch.testing.assert_close(got, (torch.ones(2) + 1) * 2)
    assert calls, "the traced call ran the original frame"


@pytest.mark.skipif(not hasattr(sys, "monitoring"), reason="sys.monitoring is 3.12+")
def test_sys_monitoring_sees_every_line_of_the_users_code():
    # a debugger or coverage in sysmon mode: while a tool has events set, frames run uncompiled
    def f(x):
        y = x + 1
        print("a break")
        return y * 2

    mon = sys.monitoring
    tool = mon.COVERAGE_ID
    lines: list[int] = []

    def on_line(code, line):
        if code is f.__code__:
            lines.append(line - f.__code__.co_firstlineno)

    mon.use_tool_id(tool, "framejit-test")
    try:
        mon.register_callback(tool, mon.events.LINE, on_line)
        with framejit.enabled(backend="eager"):
            f(torch.ones(2))  # compiled
            mon.set_events(tool, mon.events.LINE)
            try:
                got = f(torch.ones(2))
            finally:
                mon.set_events(tool, 0)
            assert _compiled(f)
        torch.testing.assert_close(got, (torch.ones(2) + 1) * 2)
        assert lines == [1, 2, 3]
    finally:
        mon.register_callback(tool, mon.events.LINE, None)
        mon.free_tool_id(tool)


def test_cprofile_still_works():
    def f(x):
        return (x + 1).exp()

    prof = cProfile.Profile()
    with framejit.enabled(backend="eager"):
        f(torch.ones(2))
        prof.enable()
        got = [f(torch.ones(2)) for _ in range(3)]
        prof.disable()
    for g in got:
        torch.testing.assert_close(g, (torch.ones(2) + 1).exp())
    names = {key[2] for key in pstats.Stats(prof).stats}
    assert "f" in names


def test_compiler_frames_are_not_hooked():
    def helper(x):
        return x * 5

    def f(x):
        return x - 1

    def backend(gm, example_inputs):
        helper(example_inputs[0])  # user code run while compiling: must not be intercepted
        return gm.forward

    with framejit.enabled(backend=backend):
        torch.testing.assert_close(f(torch.ones(2)), torch.zeros(2))
    assert _compiled(f)
    assert _state(helper) is ...


def test_jit_and_hook_together():
    @framejit.jit(backend="eager")
    def f(x):
        return x.tanh() + 2

    counter = CompileCounter()
    with framejit.enabled(backend=counter):
        for _ in range(3):
            torch.testing.assert_close(f(torch.ones(2)), torch.ones(2).tanh() + 2)
    assert counter.frame_count == 0  # the decorated function's transformed code is not hooked


def test_disable_env_wins(monkeypatch):
    def f(x):
        return x + 7

    monkeypatch.setattr(framejit.config, "disable", True)
    with framejit.enabled():
        f(torch.ones(1))
    assert _state(f) is ...


def test_hook_is_removed_when_no_thread_wants_it():
    mod = hook.require()
    assert mod.stats()["installed"] == 0
    with framejit.enabled():
        assert mod.stats()["installed"] == 1
        with hook.disabled():
            assert not mod.thread_enabled()
        assert mod.thread_enabled()
    assert mod.stats()["installed"] == 0


def test_frame_stack_stays_consistent_across_chunks():
    # Compiled calls at many depths and frame sizes: on 3.12 some intercepted frames sit at the
    # start of a data-stack chunk, which the hook must free when it pops them.
    def f(x, *pad):
        return x + 1

    @framejit.disable
    def down(n, x, *pad):
        return x if n == 0 else down(n - 1, f(x, *pad), *pad)

    x = torch.zeros(())
    with framejit.enabled(backend="eager"):
        for p in range(0, 40, 6):
            pad = tuple(range(p))
            for d in range(1, 250, 13):
                assert float(down(d, x, *pad)) == d
    assert _compiled(f)
    assert hook.require().stats()["not_top"] == 0


def _accumulates_through_a_nested_function(x):
    total = 0.0

    def add(v):
        nonlocal total
        total += v.sum().item()  # a break inside the nested function

    for v in x.unbind(0):
        add(v)
    return total


def test_a_nested_function_made_again_uses_its_own_cells():
    # `add` is made again at each call of its parent, with a new cell for `total`: its compiled
    # code (and its resume functions) must write that cell, not the first call's
    counter = CompileCounter()
    with framejit.enabled(backend=counter):
        got = [
            _accumulates_through_a_nested_function(torch.full((3, 2), k)) for k in (1.0, 2.0, 3.0)
        ]
    assert got == [6.0, 12.0, 18.0]


def _train_over_a_loader(model, loader, opt):
    losses = []
    for x, y in loader:  # a DataLoader: this frame runs as Python
        loss = ((model(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_an_nn_sequential_model_called_from_an_uncaptured_loop_is_compiled():
    # torch's code is not compiled by the hook, but nn.Sequential's forward is a whole model
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    twin = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    twin.load_state_dict(model.state_dict())
    data = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
    want = _train_over_a_loader(
        twin, DataLoader(data, batch_size=8), torch.optim.SGD(twin.parameters(), lr=0.1)
    )
    counter = CompileCounter()
    with framejit.enabled(backend=counter):
        got = _train_over_a_loader(
            model, DataLoader(data, batch_size=8), torch.optim.SGD(model.parameters(), lr=0.1)
        )
    assert got == want
    assert counter.frame_count == 1  # Sequential.forward, reused for every batch


class _Traced(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        return torch.tanh(self.fc(x)) * 2


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("warm", [False, True])
def test_torch_jit_trace_records_the_users_ops(backend, warm):
    """Under torch.jit.trace the model's frames run as they are, compiled before or not: the
    tracer must record the program's own ops, once each (its check run failed on framejit's
    guards and graphs; aot_eager's under the tracer crashed the process)."""
    torch.manual_seed(0)
    model, x = _Traced().eval(), torch.randn(2, 4)
    with framejit.enabled(backend=backend):
        if warm:
            model(x)
            assert _compiled(_Traced.forward)
        traced = torch.jit.trace(model, x)  # check_trace: traces again and compares
        got = traced(x + 1)
    plain = torch.jit.trace(model, x)
    assert [n.kind() for n in traced.graph.nodes()] == [n.kind() for n in plain.graph.nodes()]
    torch.testing.assert_close(got, model(x + 1))


def test_a_jit_function_under_torch_jit_trace_runs_as_python():
    calls = []

    def f(x):
        calls.append(1)
        return x.sin() + 1

    jf = framejit.jit(f, backend="eager")
    jf(torch.ones(3))
    traced = torch.jit.trace(jf, torch.ones(3))
    assert [n.kind() for n in traced.graph.nodes()][-2:] == ["prim::Constant", "aten::add"]
    torch.testing.assert_close(traced(torch.zeros(3)), torch.ones(3))


def test_torch_compile_inside_the_hook_region_compiles_its_own_frames(caplog):
    """torch.compile's evaluator, installed over the hook while its compiled function runs,
    calls the hook for the frames it evaluates: the hook steps aside for them (it compiled
    them and its own compiler's frames went through torch.compile, with warnings), and comes
    back after."""

    def inner(x):
        return torch.relu(x) + 1

    def after(x):
        return x * 3

    x = torch.randn(2, 4)
    counter = CompileCounter()
    with framejit.enabled(backend=counter):
        compiled = torch.compile(inner, backend="eager")
        got = compiled(x)
        after(x)
    torch.testing.assert_close(got, torch.relu(x) + 1)
    assert not _compiled(inner)
    assert _compiled(after) and counter.frame_count == 1
    assert "frame hook error" not in caplog.text


def _fails_after_a_break(x):
    y = x * 2
    print("loss", y.sum().item())  # a break: the rest runs in a resume function
    return y @ torch.ones(3, 3)  # the line the traceback must show, once


def _calls_it(x):
    return _fails_after_a_break(x) + 1


def _user_frames(error: BaseException) -> list[tuple[str, str, int]]:
    """The frames below the test's own (whose line differs between its two calls)."""
    frames = traceback.extract_tb(error.__traceback__)[1:]
    return [(f.filename, f.name, f.lineno) for f in frames]


def test_an_uncaught_error_after_a_break_has_eagers_traceback(capsys):
    """An exception leaving a compiled frame through its resume function has eager's traceback:
    the frame once, at the line that raised, and none of framejit's call path (run_resumes,
    call_taking: a script's uncaught error showed them, and the frame twice)."""
    with pytest.raises(RuntimeError) as eager:
        _calls_it(torch.ones(2))
    want = _user_frames(eager.value)
    with framejit.enabled(backend="eager"):
        for _ in range(2):  # compiling, then compiled
            with pytest.raises(RuntimeError) as info:
                _calls_it(torch.ones(2))
            assert _user_frames(info.value) == want
    assert _compiled(_fails_after_a_break)
    raising_line = _fails_after_a_break.__code__.co_firstlineno + 3
    assert want[-1][1:] == ("_fails_after_a_break", raising_line)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_non_leaf_argument_compiles_under_warnings_as_errors(backend):
    """framejit's FakeTensor of a non-leaf tensor reads its .grad, which warns; under -W error
    that warning failed the compile (an internal error: the frame ran eagerly, said on stderr)."""

    def f(h):
        return (h * 2).sum()

    w = torch.ones(3, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with framejit.enabled(backend=backend):
            for _ in range(2):
                got = f(w * 3)  # a non-leaf argument
    assert _compiled(f)
    torch.testing.assert_close(got, torch.tensor(18.0))


def _warns(x):
    warnings.warn("slow path", stacklevel=1)  # replayed after the graph, at this line
    return x * 2


def test_a_replayed_warning_that_warnings_as_errors_raises_ends_at_the_users_line():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with framejit.enabled(backend="eager"):
            for _ in range(2):
                with pytest.raises(UserWarning, match="slow path") as info:
                    _warns(torch.ones(2))
    assert _compiled(_warns)
    last = traceback.extract_tb(info.value.__traceback__)[-1]
    assert (last.filename, last.name) == (__file__, "_warns"), last


def _reads_locals_in_a_python_resume(x, log):
    y = x + 1
    frame = sys._getframe()  # a break; the rest does no tensor work: it runs as Python
    log.append(sorted(locals()))
    return y, frame is not None


def test_locals_of_a_resume_function_run_as_python():
    expected: list = []
    _reads_locals_in_a_python_resume(torch.ones(2), expected)
    got: list = []
    with framejit.enabled(backend="eager"):
        _reads_locals_in_a_python_resume(torch.ones(2), got)
    assert _compiled(_reads_locals_in_a_python_resume)
    assert got == expected == [["frame", "log", "x", "y"]]


def _reads_locals_in_loops(x, log):
    y = x * 2
    for k in range(3):  # a range loop that breaks: its resume function gets the range left
        frame = sys._getframe()
        log.append((k, sorted(locals())))
    for name in ["a", "b"]:  # a loop over known items: the items left, as a tuple
        frame = sys._getframe()
        log.append((name, sorted(locals())))
    with torch.no_grad():
        frame = sys._getframe()  # a break inside a `with`: its exit is a saved stack item
        log.append(sorted(locals()))
    return y, frame is not None


def test_locals_of_resume_functions_show_the_users_names_only():
    # each break's resume function gets saved stack items (the range left, the items left,
    # the `with` block's exit) in slots its prologue empties: locals() shows none of them
    expected: list = []
    want = _reads_locals_in_loops(torch.ones(2), expected)
    got: list = []
    with framejit.enabled(backend="eager"):
        out = _reads_locals_in_loops(torch.ones(2), got)
    assert _compiled(_reads_locals_in_loops)
    assert got == expected
    assert torch.equal(out[0], want[0])

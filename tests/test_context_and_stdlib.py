"""contextlib's suppress and ExitStack, globals(), iter(fn, sentinel), operator's methodcaller,
attrgetter and itemgetter, functools.singledispatch, collections.ChainMap and id(), each traced
without a graph break (frontend/variables/stdlib.py; a `with` block's exit entered by
Translator._catch and called by WITH_EXCEPT_START) and compared with eager on real tensors: the
results, the exceptions raised, the lists and dicts passed in afterwards and the order of calls
that wrote into them."""

from __future__ import annotations

import collections
import contextlib
import copy
import dis
import functools
import operator

import pytest
import torch

import framejit
from framejit.testing import CompileCounter

SCALE = 3.0
HALVE = operator.methodcaller("div", 2)


def _assert_same(got, want) -> None:
    if isinstance(want, torch.Tensor):
        torch.testing.assert_close(got, want)
    elif isinstance(want, (tuple, list)):
        assert type(got) is type(want) and len(got) == len(want), (got, want)
        for g, w in zip(got, want):
            _assert_same(g, w)
    elif isinstance(want, dict):
        assert type(got) is type(want) and list(got) == list(want), (got, want)
        for k in want:
            _assert_same(got[k], want[k])
    else:
        assert got == want, (got, want)


def _call(fn, args):
    """fn on fresh copies of `args` (lists and dicts copied): (result or exception, args)."""
    copied = [copy.deepcopy(a) if isinstance(a, (list, dict)) else a for a in args]
    try:
        return fn(*copied), copied
    except Exception as exc:  # noqa: BLE001 - compared with eager's
        return exc, copied


def _same(fn, *args, graphs: int = 1, breaks: int = 0) -> None:
    """eager's results (or exception, type and message), and the arguments after, over two
    calls; `graphs` graphs compiled and `breaks` graph breaks."""
    counter = CompileCounter()
    jitted = framejit.jit(fn, backend=counter)
    for _ in range(2):
        want, want_args = _call(fn, args)
        got, got_args = _call(jitted, args)
        if isinstance(want, Exception):
            assert type(got) is type(want) and str(got) == str(want), (got, want)
        else:
            _assert_same(got, want)
        _assert_same(got_args, want_args)
    assert counter.frame_count == graphs
    explained = framejit.explain(fn, *[copy.deepcopy(a) for a in args])
    assert explained.graph_break_count == breaks, explained.break_reasons


def _has_opcode(fn, opname: str) -> bool:
    return any(i.opname == opname for i in dis.get_instructions(fn))


# --- contextlib.suppress ------------------------------------------------------------------------


def test_suppress_with_no_exception_in_the_block() -> None:
    def fn(x, log):
        with contextlib.suppress(KeyError):
            x = x + 1
            log.append("body")
        log.append("after")
        return x * 2

    _same(fn, torch.randn(3), [])
    framejit.jit(fn, fullgraph=True)(torch.randn(3), [])


def test_suppress_swallows_an_exception_the_block_raises() -> None:
    """A KeyError of a dict lookup in the block: the rest of the block is skipped, the code
    after it runs, the lists written before the raise keep their writes; in one graph."""

    def fn(x, d, log):
        with contextlib.suppress(IndexError, KeyError):
            x = x + 1
            log.append("before")
            x = x * d["missing"]
            log.append("never")
        log.append("after")
        return x * 2

    assert _has_opcode(fn, "WITH_EXCEPT_START")
    _same(fn, torch.randn(3), {"a": 2}, [])
    got = framejit.jit(fn, fullgraph=True)(torch.ones(2), {}, [])
    torch.testing.assert_close(got, torch.full((2,), 4.0))


def test_suppress_of_a_raise_in_a_called_function() -> None:
    """`raise ValueError(...)` in Python code the block calls, in a loop: suppressed for the
    items that raise, the others summed."""

    def check(v):
        if v > 2:
            raise ValueError(f"{v} is too big")
        return v

    def fn(x, items):
        total = x
        for v in items:
            with contextlib.suppress(ValueError):
                total = total + check(v)
        return total

    _same(fn, torch.randn(3), [1, 5, 2, 7])


def test_suppress_of_another_type_lets_the_exception_through() -> None:
    """The exit does not match: the KeyError leaves the block, with the writes made before it,
    as in eager (here a break, where the raise runs for real)."""

    def fn(x, d, log):
        with contextlib.suppress(IndexError):
            log.append("before")
            x = x + d["missing"]
        return x

    counter = CompileCounter()
    jitted = framejit.jit(fn, backend=counter)
    for f in (fn, jitted):
        log: list[str] = []
        with pytest.raises(KeyError, match="missing"):
            f(torch.randn(2), {}, log)
        assert log == ["before"]


def test_exception_leaving_a_with_block_is_caught_by_the_caller() -> None:
    """The exit (not suppressing) is traced, so the root frame's own `except KeyError` takes
    the exception that left a called function's `with` block: no break."""

    def inner(d, log):
        with contextlib.suppress(IndexError):
            log.append("in")
            return d["missing"]

    def fn(x, d, log):
        try:
            x = x * inner(d, log)
        except KeyError as err:
            log.append(("caught", err.args))
            x = x + 1
        return x

    _same(fn, torch.randn(3), {}, [])


def test_user_context_sees_the_exception_and_suppresses_it() -> None:
    """A context written in Python receives the exception's class and object; what it returns
    decides, and it may record what it saw."""

    class Recorder:
        def __init__(self, log):
            self.log = log

        def __enter__(self):
            self.log.append("enter")
            return self

        def __exit__(self, cls, exc, tb):
            self.log.append(None if cls is None else cls.__name__)
            return cls is not None and issubclass(cls, LookupError)

    def fn(x, d, log):
        with Recorder(log):
            x = x + d["k"]
        with Recorder(log):
            x = x + d["missing"]
        return x

    _same(fn, torch.randn(3), {"k": 1.5}, [])


# --- contextlib.ExitStack -------------------------------------------------------------------------


def test_exit_stack_runs_callbacks_last_in_first_out() -> None:
    def fn(x, log):
        with contextlib.ExitStack() as stack:
            stack.enter_context(contextlib.nullcontext())
            stack.enter_context(contextlib.suppress(KeyError))
            stack.callback(log.append, "first")
            stack.callback(log.append, "second")
            x = x + 1
            log.append("body")
        log.append("after")
        return x * 2

    _same(fn, torch.randn(3), [])
    framejit.jit(fn, fullgraph=True)(torch.randn(3), [])


def test_exit_stack_suppresses_through_an_entered_suppress() -> None:
    """The KeyError reaches the stack's exit, which pops the suppress (it swallows it), then
    calls the callback as after a normal end."""

    def fn(x, d, log):
        with contextlib.ExitStack() as stack:
            stack.callback(log.append, "cleanup")
            stack.enter_context(contextlib.suppress(KeyError))
            log.append("body")
            x = x + d["missing"]
            log.append("never")
        return x + 1

    _same(fn, torch.randn(3), {}, [])


def test_exit_stack_callbacks_run_before_an_exception_leaves() -> None:
    """The exception leaves the frame: its stack's exit (which popped its callbacks) cannot be
    rewound to a break at the raise, so the frame is traced again with the break at the raise
    itself. The graph before it is compiled; the raise and the real exit run as Python."""

    def fn(x, d, log):
        y = x.sin()
        with contextlib.ExitStack() as stack:
            stack.callback(log.append, "cleanup")
            log.append("body")
            x = y * 2 + d["missing"]
        return x

    for backend in ("eager", "aot_eager"):
        framejit.reset()
        jitted = framejit.jit(fn, backend=backend)
        for f in (fn, jitted, fn, jitted):
            log: list[str] = []
            with pytest.raises(KeyError, match="missing"):
                f(torch.randn(2), {}, log)
            assert log == ["body", "cleanup"]
    counter = CompileCounter()
    with pytest.raises(KeyError):
        framejit.jit(fn, backend=counter)(torch.randn(2), {}, [])
    assert counter.frame_count == 1  # x.sin(), before the break


def test_exit_stack_close_and_keyword_callbacks() -> None:
    def fn(x, log):
        stack = contextlib.ExitStack()
        stack.callback(log.append, "closed")
        stack.callback(log.insert, 0, "first")
        stack.close()
        return x.sin()

    _same(fn, torch.randn(3), [])


# --- globals() ------------------------------------------------------------------------------------


def test_globals_reads_by_name_and_is_guarded(monkeypatch: pytest.MonkeyPatch) -> None:
    def fn(x):
        g = globals()
        shift = g.get("_NOT_DEFINED_YET", 1.0)
        return x * g["SCALE"] + shift, "SCALE" in globals(), "_NOT_DEFINED_YET" in g

    x = torch.randn(3)
    _same(fn, x)
    counter = CompileCounter()
    jitted = framejit.jit(fn, backend=counter)
    _assert_same(jitted(x), fn(x))
    monkeypatch.setattr(__import__(__name__), "SCALE", 5.0)
    _assert_same(jitted(x), fn(x))
    monkeypatch.setitem(globals(), "_NOT_DEFINED_YET", 10.0)
    _assert_same(jitted(x), fn(x))
    assert counter.frame_count == 3


def test_globals_missing_name_raises_key_error_caught_in_the_frame() -> None:
    def fn(x):
        try:
            return x * globals()["_NEVER_DEFINED"]
        except KeyError as err:
            return x + len(str(err))

    _same(fn, torch.randn(3))


COUNT = 0


def _stores_by_name(x):
    g = globals()
    g["COUNT"] += 1
    g["_MADE_BY_THE_FRAME"] = x.shape[0]
    return x * COUNT + _MADE_BY_THE_FRAME, g["COUNT"]  # noqa: F821 - made by the line above


def _stores_after_a_global_statement(x):
    global COUNT
    COUNT = 5
    globals()["COUNT"] = COUNT + 2
    return x + COUNT


def _other_writes(x):
    g = globals()
    g.update(_MADE_BY_THE_FRAME=2)
    g.setdefault("_MADE_BY_THE_FRAME", 7)
    before = g.pop("_MADE_BY_THE_FRAME")
    return x * before, "_MADE_BY_THE_FRAME" in g


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize(
    ("fn", "breaks"),
    [(_stores_by_name, 0), (_stores_after_a_global_statement, 0), (_other_writes, 1)],
)
def test_globals_writes_are_eager_s(fn, breaks: int, backend: str) -> None:
    """`globals()["x"] = v` is a store of the global (replayed after the graph, read back by
    the rest of the trace); other writes to the module dict are breaks."""
    module = globals()

    def run(f, x):
        module["COUNT"] = 0
        module.pop("_MADE_BY_THE_FRAME", None)
        out = f(x)
        return out, module["COUNT"], module.pop("_MADE_BY_THE_FRAME", None)

    framejit.reset()
    jitted = framejit.jit(fn, backend=backend)
    for n in (2, 2, 3):
        x = torch.randn(n)
        _assert_same(run(jitted, x), run(fn, x))
    module["COUNT"] = 0
    explained = framejit.explain(fn, torch.randn(2))
    assert explained.graph_break_count == breaks, explained.break_reasons
    module["COUNT"] = 0
    module.pop("_MADE_BY_THE_FRAME", None)


# --- iter(fn, sentinel) ---------------------------------------------------------------------------


def test_iter_with_sentinel_pops_a_list_until_the_sentinel() -> None:
    """`iter(queue.pop, 0)`: items popped from the end until a 0; the list left behind is
    eager's (the pops are replayed on it)."""

    def fn(x, queue):
        total = x
        for v in iter(queue.pop, 0):
            total = total * v
        return total

    assert _has_opcode(fn, "FOR_ITER")
    _same(fn, torch.randn(3), [0, 5, 0, 2, 3])
    framejit.jit(fn, fullgraph=True)(torch.randn(3), [0, 2])


def test_iter_with_sentinel_over_a_closure_and_next() -> None:
    """A counting closure: called only for the items taken (next() twice, then the loop), and
    never again once the sentinel came."""

    def fn(x):
        calls = []

        def step():
            calls.append(len(calls) + 1)
            return len(calls)

        it = iter(step, 5)
        first, second = next(it), next(it)
        rest = [k for k in it]
        return x * first + second, rest, next(it, "done"), list(calls)

    _same(fn, torch.randn(3))


def test_iter_with_sentinel_of_something_not_callable_raises() -> None:
    def fn(x):
        try:
            iter(5, 0)
        except TypeError as err:
            return x + 1, str(err)
        return x, ""

    _same(fn, torch.randn(3))


# --- operator.methodcaller / attrgetter / itemgetter ---------------------------------------------


def test_methodcaller_attrgetter_itemgetter() -> None:
    def fn(x, d):
        add = operator.methodcaller("add", 1, alpha=3)
        sums = operator.methodcaller("sum", dim=0)
        upper = operator.methodcaller("upper")
        first = operator.itemgetter(0)
        names = operator.itemgetter("a", "b")
        shape = operator.attrgetter("shape", "dtype")
        return HALVE(add(x)), sums(x), first(x), names(d), shape(x), upper("ab")

    _same(fn, torch.randn(2, 3), {"a": 1, "b": 2})


def test_methodcaller_applied_in_map_and_sorted() -> None:
    def fn(x, words):
        lower = list(map(operator.methodcaller("lower"), words))
        by_len = sorted(words, key=operator.methodcaller("__len__"))
        return x * len(lower[0]), lower, by_len

    _same(fn, torch.randn(3), ["Bb", "A", "CCC"])


# --- functools.singledispatch ---------------------------------------------------------------------


def test_singledispatch_picks_the_implementation_and_recompiles_on_register() -> None:
    @functools.singledispatch
    def combine(v, x):
        return x * 2

    @combine.register
    def _(v: int, x):
        return x * v

    @combine.register
    def _(v: torch.Tensor, x):
        return x + v

    def fn(x):
        return combine(3, x), combine(x, x), combine("s", x), combine(True, x)

    x = torch.randn(3)
    _same(fn, x)
    counter = CompileCounter()
    jitted = framejit.jit(fn, backend=counter)
    _assert_same(jitted(x), fn(x))

    @combine.register
    def _(v: str, x):
        return x - 1

    _assert_same(jitted(x), fn(x))  # the new str implementation: compiled again
    assert counter.frame_count == 2


# --- collections.ChainMap -------------------------------------------------------------------------


def test_chainmap_lookups_and_writes_to_the_first_map() -> None:
    def fn(x, overrides, defaults):
        cfg = collections.ChainMap(overrides, defaults)
        cfg["seen"] = True  # written into `overrides`, as in eager
        child = cfg.new_child({"scale": 10.0})
        shift = cfg.get("shift", 0.5)
        return (
            x * cfg["scale"] + shift,
            child["scale"],
            len(cfg),
            "seen" in cfg,
            "nope" in cfg,
            cfg.get("nope"),
        )

    _same(fn, torch.randn(3), {"scale": 2.0}, {"scale": 1.0, "bias": 3})


def test_chainmap_missing_key_raises_key_error() -> None:
    def fn(x, a, b):
        cfg = collections.ChainMap(a, b)
        try:
            return x * cfg["missing"]
        except KeyError:
            return x - 1

    _same(fn, torch.randn(3), {"k": 1}, {})


# --- id() -----------------------------------------------------------------------------------------


def test_id_of_inputs_as_dict_keys() -> None:
    def fn(x, y):
        seen = {}
        for t in (x, y, x):
            seen[id(t)] = seen.get(id(t), 0) + 1
        return x * seen[id(x)] + y * seen[id(y)], id(x) == id(y)

    x = torch.randn(3)
    _same(fn, x, torch.randn(3))
    _same(fn, x, x)


def test_id_of_module_parameters() -> None:
    model = torch.nn.Linear(3, 2)

    def fn(x):
        names = {id(p): name for name, p in model.named_parameters()}
        return model(x) * len(names[id(model.weight)]), names[id(model.bias)]

    _same(fn, torch.randn(4, 3))


def test_id_is_pinned_by_a_guard() -> None:
    """A different object at the same place compiles again (its id is another constant)."""

    def fn(x, y):
        return x + 1 if id(x) == id(y) else x - 1

    counter = CompileCounter()
    jitted = framejit.jit(fn, backend=counter)
    a, b = torch.randn(3), torch.randn(3)
    _assert_same(jitted(a, a), fn(a, a))
    _assert_same(jitted(a, b), fn(a, b))
    _assert_same(jitted(a, a), fn(a, a))
    assert counter.frame_count == 2


def test_id_of_a_graph_intermediate_is_a_graph_break() -> None:
    def fn(x):
        y = x + 1
        return y * 2, id(y) != 0

    _same(fn, torch.randn(3), graphs=1, breaks=1)  # nothing to capture after the break
    explained = framejit.explain(fn, torch.randn(3))
    assert "id() of a Tensor made by the traced code" in str(explained.break_reasons[0])


# --- pitfalls -------------------------------------------------------------------------------------


def test_clause_that_changed_a_list_is_not_rewound_to_a_break() -> None:
    """An `except` clause of the frame pops a list made in the frame, then reaches a call that
    cannot be traced: rewinding to a break at the raise would run the clause again for real
    over the already popped list (it popped twice). The frame is traced again with the break
    at the raise, before the clause; with nothing captured before it, it runs as Python."""

    @framejit.disable
    def opaque(v):
        return v

    def fn(x):
        items = [1, 2, 3]
        queue = collections.deque([1, 2])
        try:
            x = x * {}["missing"]
        except KeyError:
            items.pop()
            queue.pop()
            opaque(items)
        return x + 1, items, list(queue)

    def after_work(x):
        x = x.cos() * 2
        items = [1, 2, 3]
        try:
            x = x * {}["missing"]
        except KeyError:
            items.pop()
            opaque(items)
        return x + 1, items

    _same(fn, torch.randn(3), graphs=0, breaks=1)
    _same(after_work, torch.randn(3), graphs=1, breaks=1)


def test_a_clause_that_changed_a_list_and_re_raises() -> None:
    """The exception leaves the frame after its clause popped a list made in the frame: the
    break is at the raise, and the real clause pops it once."""

    def fn(x, log):
        x = x.exp()
        items = [1, 2, 3]
        try:
            x = x + {}["missing"]
        except KeyError:
            items.pop()
            log.append(list(items))
            raise
        return x

    for backend in ("eager", "aot_eager"):
        framejit.reset()
        jitted = framejit.jit(fn, backend=backend)
        for f in (fn, jitted, fn, jitted):
            log: list[list[int]] = []
            with pytest.raises(KeyError, match="missing"):
                f(torch.randn(2), log)
            assert log == [[1, 2]]
    counter = CompileCounter()
    with pytest.raises(KeyError):
        framejit.jit(fn, backend=counter)(torch.randn(2), [])
    assert counter.frame_count == 1

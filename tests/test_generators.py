"""Generators made inside the compiled frame run lazily, item by item, as in Python: what the
generator does and what its consumer does between two items happen in eager's order. Also
`@contextlib.contextmanager`, which is a generator driven by `with`. Every test compares with
eager on real tensors."""

from __future__ import annotations

import contextlib
import gc
import weakref
from collections.abc import Iterator
from typing import Any

import pytest
import torch

import framejit
from framejit.testing import CompileCounter


def compiled(fn: Any) -> Any:
    framejit.reset()
    return framejit.jit(fn, backend="eager")


def counts(fn: Any, *args: Any) -> tuple[int, int]:
    explained = framejit.explain(fn, *args)
    return explained.graph_count, explained.graph_break_count


def appends(state: list[int], n: int) -> Any:
    for i in range(n):
        state.append(i)
        yield i


def test_a_generator_and_its_consumer_interleave_as_in_eager() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        seen: list[int] = []
        for v in appends(seen, 3):
            x = x + len(seen) * (v + 1)  # the generator appended exactly v + 1 items so far
        return x

    x = torch.zeros(3)
    torch.testing.assert_close(compiled(fn)(x), fn(x))  # 1*1 + 2*2 + 3*3, not 3*(1+2+3)
    assert counts(fn, x) == (1, 0)


def test_the_generator_sees_what_the_consumer_wrote() -> None:
    def scaled(cfg: dict[str, float], x: torch.Tensor) -> Any:
        for _ in range(3):
            yield x * cfg["scale"]

    def fn(x: torch.Tensor) -> torch.Tensor:
        cfg = {"scale": 1.0}
        out = []
        for y in scaled(cfg, x):
            out.append(y)
            cfg["scale"] = cfg["scale"] * 10
        return torch.stack(out)

    x = torch.randn(4)
    torch.testing.assert_close(compiled(fn)(x), fn(x))
    assert counts(fn, x) == (1, 0)


def test_enumerate_zip_map_filter_over_generators_stay_lazy() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        a: list[int] = []
        b: list[int] = []
        for i, (p, q) in enumerate(zip(appends(a, 4), appends(b, 3)), start=1):
            x = x + i * (p + q) * len(a) - len(b)
        evens = list(filter(lambda v: v % 2 == 0, appends(a, 5)))
        doubled = list(map(lambda v: v * 2 + len(a), appends(b, 2)))
        return x * sum(evens) + sum(doubled) + len(a) * 100 + len(b)

    x = torch.ones(2)
    torch.testing.assert_close(compiled(fn)(x), fn(x))
    assert counts(fn, x) == (1, 0)


def test_send_next_and_close() -> None:
    def running_total() -> Any:
        total = 0
        while True:
            v = yield total
            total = total + v

    def fn(x: torch.Tensor) -> torch.Tensor:
        acc = running_total()
        next(acc)
        acc.send(1)
        acc.send(2)
        t = acc.send(3)
        acc.close()
        return x * t + next(iter([5]))

    x = torch.randn(3)
    torch.testing.assert_close(compiled(fn)(x), fn(x))
    assert counts(fn, x) == (1, 0)


def test_a_class_whose_iter_is_a_generator() -> None:
    class Blocks:
        def __init__(self, n: int, log: list[int]) -> None:
            self.n, self.log = n, log

        def __iter__(self) -> Any:
            for i in range(self.n):
                self.log.append(i)
                yield i

    def fn(x: torch.Tensor) -> torch.Tensor:
        log: list[int] = []
        for i in Blocks(3, log):
            x = x * 2 + len(log) + i
        return x

    x = torch.randn(3)
    torch.testing.assert_close(compiled(fn)(x), fn(x))
    assert counts(fn, x) == (1, 0)


def test_generator_expressions_drain_as_in_eager() -> None:
    def fn(xs: list[torch.Tensor]) -> torch.Tensor:
        total = sum(t * 2 for t in xs)
        joined = "-".join(str(t.shape[0]) for t in xs)
        if any(t.shape[0] == 3 for t in xs):
            total = total + len(joined)
        return total

    xs = [torch.randn(3), torch.randn(3)]
    torch.testing.assert_close(compiled(fn)(xs), fn(xs))
    assert counts(fn, xs) == (1, 0)


def test_a_generator_that_breaks_runs_as_python_in_eager_order(capsys: Any) -> None:
    def noisy(x: torch.Tensor) -> Any:
        for i in range(3):
            print(f"gen {i}")
            yield x * i

    def fn(x: torch.Tensor) -> torch.Tensor:
        out = x
        for v in noisy(x):
            print("use")
            out = out + v
        return out

    x = torch.randn(3)
    expected = fn(x)
    eager_lines = capsys.readouterr().out
    torch.testing.assert_close(compiled(fn)(x), expected)
    assert capsys.readouterr().out == eager_lines  # gen 0, use, gen 1, use, ...


def test_a_generator_returned_from_the_frame_is_a_real_generator() -> None:
    def numbers(x: torch.Tensor) -> Any:
        for i in range(3):
            yield x + i

    def fn(x: torch.Tensor) -> Any:
        y = x * 2
        return numbers(y)

    x = torch.randn(2)
    got = compiled(fn)(x)
    assert isinstance(got, type(fn(x)))
    for a, b in zip(got, fn(x), strict=True):
        torch.testing.assert_close(a, b)


def test_an_exception_from_a_generator_reaches_the_consumer() -> None:
    def two_then_fail(x: torch.Tensor) -> Any:
        yield x
        yield x * 2
        raise KeyError("done")

    def fn(x: torch.Tensor) -> torch.Tensor:
        out = x
        try:
            for v in two_then_fail(x):
                out = out + v
        except KeyError:
            out = out * 10
        return out

    x = torch.randn(3)
    torch.testing.assert_close(compiled(fn)(x), fn(x))


def test_stop_iteration_inside_a_generator_is_a_runtime_error() -> None:
    def bad(x: torch.Tensor) -> Any:
        yield x
        next(iter([]))  # PEP 479: a RuntimeError in the consumer

    def fn(x: torch.Tensor) -> list[torch.Tensor]:
        return list(bad(x))

    with pytest.raises(RuntimeError, match="generator raised StopIteration"):
        fn(torch.randn(2))
    with pytest.raises(RuntimeError, match="generator raised StopIteration"):
        compiled(fn)(torch.randn(2))


def test_an_exhausted_generator_at_a_break() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        g = appends([], 2)
        n = len(list(g))
        print("break")
        return x * n + next(g, 7)

    x = torch.randn(3)
    torch.testing.assert_close(compiled(fn)(x), fn(x))


def test_fullgraph_names_a_generator_that_outlives_the_graph() -> None:
    def fn(x: torch.Tensor) -> Any:
        return appends([], 3), x + 1

    with pytest.raises(framejit.FullGraphError, match="appends"):
        framejit.jit(fn, fullgraph=True)(torch.randn(2))


STATE = {"on": 0}


@contextlib.contextmanager
def switched_on(scale: float) -> Any:
    STATE["on"] += 1
    try:
        yield scale * 2
    finally:
        STATE["on"] -= 1


def test_contextmanager_generators_are_inlined() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        with switched_on(3.0) as k:
            y = x * k * (2 if STATE["on"] else 5)
            with contextlib.nullcontext(), switched_on(1.0):
                y = y + STATE["on"]
        return y + STATE["on"]

    x = torch.randn(4)
    expected = fn(x)
    assert STATE["on"] == 0
    counter = CompileCounter()
    fast = framejit.jit(fn, backend=counter)
    for _ in range(2):
        torch.testing.assert_close(fast(x), expected)
        assert STATE["on"] == 0
    assert counter.frame_count == 1
    assert counts(fn, x) == (1, 0)


def test_a_break_inside_a_contextmanager_block() -> None:
    seen: list[int] = []

    def fn(x: torch.Tensor) -> torch.Tensor:
        with switched_on(2.0) as k:
            y = x * k
            seen.append(STATE["on"])
            print("inside")  # the generator runs as Python around this break
            y = y + STATE["on"]
        return y + STATE["on"]

    x = torch.randn(4)
    expected = fn(x)
    fast = compiled(fn)
    for _ in range(2):
        seen.clear()
        torch.testing.assert_close(fast(x), expected)
        assert seen == [1] and STATE["on"] == 0


def test_an_exception_inside_a_contextmanager_block_runs_its_finally() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        with switched_on(2.0):
            return x.view(7)  # wrong size: raises

    with pytest.raises(RuntimeError):
        compiled(fn)(torch.randn(4))
    assert STATE["on"] == 0


def slices(data: torch.Tensor, size: int) -> Any:
    for start in range(0, data.shape[0], size):
        yield data[start : start + size] * 2


@framejit.disable
def observe(t: torch.Tensor, log: list[float]) -> None:
    log.append(float(t.sum()))


def test_a_generator_a_variable_holds_at_a_break_stays_a_generator() -> None:
    def counter(x: torch.Tensor) -> Any:
        total = x
        for _ in range(5):  # finite: it could be drained, if draining it were right
            got = yield total
            total = total + (1 if got is None else got)

    def fn(x: torch.Tensor, log: list[float]) -> list[torch.Tensor]:
        g = counter(x)
        out = [next(g), next(g)]
        observe(out[-1], log)  # a break while `g` is live: the rest may send to it
        out.append(g.send(10))
        try:
            g.throw(ValueError("stop"))
        except ValueError as exc:
            log.append(len(str(exc)))
        return out

    x = torch.randn(3)
    eager_log: list[float] = []
    expected = fn(x, eager_log)
    log: list[float] = []
    for a, b in zip(compiled(fn)(x, log), expected, strict=True):
        torch.testing.assert_close(a, b)
    assert log == pytest.approx(eager_log)


def test_a_pure_generator_is_drained_ahead_of_a_break_in_its_loop() -> None:
    """The training-loop shape: the loop body breaks (here a call run as Python), the generator
    only slices its tensor argument, so it runs to its end inside the first graph and the rest
    of the loop iterates over what it yielded; the body is still compiled."""

    def fn(data: torch.Tensor, log: list[float]) -> torch.Tensor:
        total = data.new_zeros(())
        for i, part in enumerate(slices(data, 3)):
            y = part.sin() + i
            observe(y, log)
            total = total + y.sum()
        return total

    data = torch.randn(8, 4)
    eager_log: list[float] = []
    expected = fn(data, eager_log)
    log: list[float] = []
    torch.testing.assert_close(compiled(fn)(data, log), expected)
    assert log == pytest.approx(eager_log)
    graphs, breaks = counts(fn, data, [])
    assert breaks == 3 and graphs >= 3  # one break per item, and no generator break


def test_a_generator_drawing_random_numbers_is_not_drained_ahead() -> None:
    def noisy(data: torch.Tensor) -> Any:
        for row in data:
            yield row + torch.randn(row.shape)

    def fn(data: torch.Tensor, log: list[float]) -> torch.Tensor:
        total = data.new_zeros(())
        for part in noisy(data):
            observe(part, log)
            total = total + (part * torch.rand(part.shape)).sum()  # the consumer draws too
        return total

    data = torch.randn(3, 4)
    torch.manual_seed(0)
    eager_log: list[float] = []
    expected = fn(data, eager_log)
    fast = compiled(fn)
    torch.manual_seed(0)
    log: list[float] = []
    torch.testing.assert_close(fast(data, log), expected)  # the same random stream, in order
    assert log == pytest.approx(eager_log)
    reasons = " ".join(str(r) for r in framejit.explain(fn, data, []).break_reasons)
    assert "random numbers" in reasons


def test_a_generator_reading_a_mutable_argument_is_not_drained_ahead() -> None:
    def scaled(x: torch.Tensor, cfg: dict[str, float]) -> Any:
        for _ in range(3):
            yield x * cfg["scale"]

    def fn(x: torch.Tensor, log: list[float]) -> torch.Tensor:
        cfg = {"scale": 1.0}
        out = x
        for y in scaled(x, cfg):
            observe(y, log)  # a break while the generator is live
            cfg["scale"] = cfg["scale"] + 1  # and the generator reads what the loop writes
            out = out + y
        return out

    x = torch.randn(4)
    eager_log: list[float] = []
    expected = fn(x, eager_log)
    log: list[float] = []
    torch.testing.assert_close(compiled(fn)(x, log), expected)
    assert log == pytest.approx(eager_log)
    reasons = " ".join(str(r) for r in framejit.explain(fn, x, []).break_reasons)
    assert "argument 'cfg' is a dict, which may change" in reasons


def test_a_generator_made_inside_a_rewound_call_is_forgotten() -> None:
    def helper(x: torch.Tensor, flags: tuple[bool, ...]) -> torch.Tensor:
        if all(f for f in flags):  # a generator expression, finished or left suspended
            x = x + 1
        if next(f for f in flags):  # left suspended, and held by nothing
            x = x * 3
        print("break inside the inlined call")  # the caller breaks at its call of helper
        return x * 2

    def fn(x: torch.Tensor) -> torch.Tensor:
        return helper(x.sin(), (True, False)) + 1

    x = torch.randn(3)
    torch.testing.assert_close(compiled(fn)(x), fn(x))
    reasons = [str(r) for r in framejit.explain(fn, x).break_reasons]
    assert reasons and not any("calling generator" in r for r in reasons)


def test_yield_from_delegates_lazily_and_returns_the_value() -> None:
    def inner(x: torch.Tensor, n: int, log: list[int]) -> Any:
        for i in range(n):
            log.append(i)
            got = yield x * i
            if got is not None:
                x = x + got
        return n * 10

    def outer(x: torch.Tensor, log: list[int]) -> Any:
        result = yield from inner(x, 2, log)  # send() goes through to inner
        yield x + result
        yield from [x, x * 2]

    def fn(x: torch.Tensor) -> torch.Tensor:
        log: list[int] = []
        g = outer(x, log)
        out = [next(g) + len(log)]
        out.append(g.send(torch.ones(3)) + len(log))
        out.extend(g)
        return torch.stack(out) + len(log)

    x = torch.randn(3)
    torch.testing.assert_close(compiled(fn)(x), fn(x))
    assert counts(fn, x) == (1, 0)


def _leaves_a_generator_suspended(x: torch.Tensor, log: list[str]) -> torch.Tensor:
    def numbers() -> Iterator[int]:
        try:
            yield 1
            yield 2
        finally:
            log.append("closed")

    for v in numbers():  # left at its first value, inside the `try`: closed at the break
        if v == 1:
            break
    log.append("after")
    return x * v


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_dropped_generator_is_closed_when_the_function_returns_on_the_compiling_call_too(
    backend: str,
) -> None:
    # The compile used to keep the generator alive (its reasons' tracebacks and the
    # translator's undo records held the frame's values) until framejit.reset(). As in eager,
    # the `break` drops the generator's last reference: its `finally` runs before "after".
    jitted = framejit.jit(_leaves_a_generator_suspended, backend=backend)
    eager_log: list[str] = []
    _leaves_a_generator_suspended(torch.ones(2), eager_log)
    assert eager_log == ["closed", "after"]
    for _ in range(2):
        log: list[str] = []
        torch.testing.assert_close(jitted(torch.ones(2), log), torch.ones(2))
        assert log == eager_log


def test_compiling_keeps_no_reference_to_the_arguments() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        it = (i for i in range(3))
        for v in it:
            x = x + v
        return x

    refs = []
    for _ in range(3):
        framejit.reset()
        x = torch.randn(64, 64)
        refs.append(weakref.ref(x))
        torch.testing.assert_close(framejit.jit(f, backend="eager")(x), x + 3)
        del x
    framejit.reset()
    gc.collect()
    assert [r() for r in refs] == [None, None, None]


def stops_early(x: torch.Tensor, log: list[int]) -> tuple[torch.Tensor, list[int], bool]:
    xs = [1, 2, 3]
    if any((hit := v) > 1 for v in xs):  # stops at 2: the walrus target is 2
        x = x * hit
    done = all(log.append(v) or v < 2 for v in [1, 2, 3])  # stops at 2
    m = map(lambda v: v * 10, range(4))
    first = any(m)  # takes 0 and 10: the map keeps the rest
    return x, list(m), done and first


def lazy_map_and_filter(x: torch.Tensor, d: dict[str, int], log: list[Any]) -> torch.Tensor:
    m = map(lambda v: (log.append(v), v)[1], [1, 2, 3])
    first = next(m)
    log.append("mid")  # before the map computes its second item
    keys = filter(lambda k: d[k] > 0, ["a", "missing"])  # "missing" is never looked up
    return x * first * d[next(keys)]


def test_any_all_map_and_filter_stop_where_python_stops() -> None:
    x = torch.ones(2)
    log_e: list[Any] = []
    expected = stops_early(x, log_e)
    log_j: list[Any] = []
    got = compiled(stops_early)(x, log_j)
    torch.testing.assert_close(got[0], expected[0])
    assert got[1:] == expected[1:] == ([20, 30], False)
    assert log_j == log_e == [1, 2]
    assert counts(stops_early, x, []) == (1, 0)

    d = {"a": 3}
    log_e, log_j = [], []
    torch.testing.assert_close(
        compiled(lazy_map_and_filter)(x, d, log_j), lazy_map_and_filter(x, d, log_e)
    )
    assert log_j == log_e == [1, "mid"]
    assert counts(lazy_map_and_filter, x, d, []) == (1, 0)


def _multiples(x: torch.Tensor, n: int) -> Any:
    for k in range(n):
        yield x * k  # computed when taken: sees x as it is then


def _predictions(w: torch.Tensor, xs: torch.Tensor) -> Any:
    for i in range(xs.shape[0]):
        yield xs[i] @ w


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_items_drained_ahead_follow_in_place_changes_of_the_generators_tensors(
    backend: str,
) -> None:
    """A generator drained ahead of a break computed every item from its tensors as they were
    then; a loop body that changes them in place (`x += 1`, an optimizer step) got stale
    items. The items left now re-check the tensors' version counters and run the generator
    afresh once one changed."""

    def bumps(t: torch.Tensor) -> list[float]:
        out = []
        x = t.clone()
        for v in _multiples(x, 4):
            x += 1
            out.append(float(v))  # a break with the generator live
        return out

    t = torch.zeros(1)
    assert framejit.jit(bumps, backend=backend)(t) == bumps(t) == [0.0, 1.0, 4.0, 9.0]

    def train(w: torch.Tensor, xs: torch.Tensor, opt: Any) -> list[float]:
        losses = []
        for pred in _predictions(w, xs):
            loss = (pred - 1).pow(2).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()  # changes w in place
            losses.append(round(loss.item(), 5))
        return losses

    results = []
    for fn in (train, framejit.jit(train, backend=backend)):
        torch.manual_seed(0)
        w, xs = torch.randn(3, 2, requires_grad=True), torch.randn(4, 3)
        results.append((fn(w, xs, torch.optim.SGD([w], lr=0.1)), w.detach().clone()))
    assert results[0][0] == results[1][0]
    torch.testing.assert_close(results[0][1], results[1][1])


def test_items_drained_ahead_stay_compiled_while_the_tensors_are_unchanged() -> None:
    """The training-loop shape (the consumer never changes the data): every item is taken from
    what the first graph computed, and the resumed loop is compiled, not run as Python."""

    def fn(data: torch.Tensor, log: list[float]) -> torch.Tensor:
        total = data.new_zeros(())
        for part in _multiples(data, 3):
            observe(part, log)
            total = total + part.sum()
        return total

    data = torch.randn(4)
    eager_log: list[float] = []
    expected = fn(data, eager_log)
    log: list[float] = []
    torch.testing.assert_close(compiled(fn)(data, log), expected)
    assert log == pytest.approx(eager_log)
    explained = framejit.explain(fn, data, [])
    assert explained.graph_count >= 3
    assert not any("DrainedItems" in str(r) for r in explained.break_reasons)

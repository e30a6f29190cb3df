"""heapq, bisect and sorted() over items ordered by a user `__lt__`: CPython's own C algorithms
run over the trace's items with each `<` traced (builtins.py `_Ordered`), so the result, the
list's new order and the number of comparisons a user `__lt__` sees are eager's, in one graph."""

from __future__ import annotations

import bisect
import heapq

import pytest
import torch

import framejit
from framejit.testing import CompileCounter


class Job:
    """Ordered by priority only: equal priorities keep whichever order the algorithm leaves,
    so a different sequence of comparisons shows up as a different result."""

    compared = 0

    def __init__(self, priority: int, name: str) -> None:
        self.priority = priority
        self.name = name

    def __lt__(self, other: Job) -> bool:
        Job.compared += 1
        return self.priority < other.priority

    def __repr__(self) -> str:
        return f"Job({self.priority}, {self.name!r})"


def _run(fn, *args):
    """eager and framejit on fresh copies of `args` (lists copied), and Job.compared each
    time: (result, args after, comparisons)."""
    Job.compared = 0
    copied = [list(a) if isinstance(a, list) else a for a in args]
    result = fn(*copied)
    return result, copied, Job.compared


def _same(fn, *args, graphs: int = 1) -> None:
    """eager's results, arguments after and comparisons over two calls, in one graph."""
    counter = CompileCounter()
    jitted = framejit.jit(fn, backend=counter)
    for _ in range(2):
        want, want_args, want_compared = _run(fn, *args)
        got, got_args, got_compared = _run(jitted, *args)
        assert repr(got_args) == repr(want_args)
        assert got_compared == want_compared
        if isinstance(want, tuple):
            assert repr(got[1:]) == repr(want[1:])
            torch.testing.assert_close(got[0], want[0])
        else:
            torch.testing.assert_close(got, want)
    assert counter.frame_count == graphs
    explained = framejit.explain(fn, *[list(a) if isinstance(a, list) else a for a in args])
    assert explained.graph_break_count == 0, explained.break_reasons


def test_heap_of_objects_pushes_and_pops_in_eagers_order() -> None:
    """A priority queue of objects with ties: the popped order, the heap left behind (passed
    in, so the writes are replayed on the real list) and the comparisons are eager's."""

    def fn(x, heap):
        for k, p in enumerate([5, 1, 3, 1, 4, 1]):
            heapq.heappush(heap, Job(p, f"j{k}"))
        first = heapq.heappop(heap)
        second = heapq.heappushpop(heap, Job(2, "new"))
        third = heapq.heapreplace(heap, Job(0, "zero"))
        return x * first.priority + second.priority, [first.name, second.name, third.name]

    _same(fn, torch.randn(3), [Job(2, "given")])


def test_heapify_and_nsmallest_of_tuples() -> None:
    """`heapify` of (score, name) tuples and heapq's own `nsmallest`/`nlargest` (Python code
    over the max-heap C helpers) with and without a key."""

    def fn(x, items):
        heapq.heapify(items)
        best = heapq.nsmallest(2, items)
        worst = heapq.nlargest(2, items, key=lambda t: t[1])
        return x + best[0][0], (best, worst, heapq.heappop(items))

    _same(fn, torch.randn(3), [(3, "c"), (1, "a"), (2, "b"), (1, "z"), (5, "e")])


def test_bisect_and_insort_keep_a_sorted_list() -> None:
    """bisect_left/right with lo/hi and a key; insort into a list from outside the frame."""

    def fn(x, scores):
        i = bisect.bisect_left(scores, 4)
        j = bisect.bisect_right(scores, 4, 1)
        k = bisect.bisect(scores, 10, hi=3)
        bisect.insort(scores, 4)
        bisect.insort_left(scores, 0)
        m = bisect.bisect_left([(1, "a"), (5, "b")], 3, key=lambda t: t[0])
        return x * i + j + k + m, None

    _same(fn, torch.randn(3), [1, 3, 4, 4, 7, 9])


def test_sorted_of_objects_with_lt_is_stable_and_counts_comparisons() -> None:
    """sorted(), sorted(reverse=True) and list.sort of objects with `__lt__` (ties keep their
    order, as CPython's stable sort keeps them)."""

    def fn(x, jobs):
        up = sorted(jobs)
        down = sorted(jobs, reverse=True)
        jobs.sort()
        return x * up[0].priority, [j.name for j in up + down]

    jobs = [Job(p, f"j{k}") for k, p in enumerate([3, 1, 2, 1, 3, 0])]
    _same(fn, torch.randn(3), jobs)


def test_a_tensor_comparison_breaks_with_eagers_answer() -> None:
    """A heap of tensors: `<` of two tensors is data, so the push is a break, and the answer is
    still eager's."""

    def fn(x, heap):
        heapq.heappush(heap, x.sum())
        heapq.heappush(heap, (x * 2).sum())
        return heapq.heappop(heap) + 1

    x = torch.randn(3)
    jitted = framejit.jit(fn)
    torch.testing.assert_close(jitted(x, []), fn(x, []))
    explained = framejit.explain(fn, x, [])
    assert explained.graph_break_count >= 1
    assert any("heappush" in r or "data" in r for r in explained.break_reasons), explained


@pytest.mark.parametrize("bad", ["pop_empty", "not_a_list"])
def test_errors_are_eagers(bad: str) -> None:
    """heappop of an empty list raises IndexError; a tuple as the heap TypeError, as eager."""

    def fn(x):
        if bad == "pop_empty":
            heapq.heappop([])
        else:
            heapq.heappush((1, 2), 3)
        return x

    with pytest.raises(Exception) as want:
        fn(torch.ones(1))
    with pytest.raises(type(want.value)) as got:
        framejit.jit(fn)(torch.ones(1))
    assert str(got.value) == str(want.value)

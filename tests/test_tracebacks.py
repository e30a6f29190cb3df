"""An exception leaving compiled code carries the traceback eager's would: the user's frames
with their lines, without framejit's call path (the jit wrappers' `__call__`/`_select`/`_miss`,
`run_resumes`) and with a frame that broke its graph counted once (the compiled frame and its
resume function are the same user frame). Code that walks `__traceback__` (logging, depth
checks, `traceback.extract_tb`) sees what it sees in eager. Errors of framejit's own compiler
keep their frames."""

from __future__ import annotations

import traceback
from types import TracebackType

import pytest
import torch

import framejit


class Boom(Exception):
    pass


def frames(tb: TracebackType | None) -> list[tuple[str, int]]:
    found = []
    while tb is not None:
        found.append((tb.tb_frame.f_code.co_name, tb.tb_lineno))
        tb = tb.tb_next
    return found


def innermost(x: torch.Tensor) -> torch.Tensor:
    raise Boom(x.shape)


def middle(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    print(end="")  # a graph break: the rest of `middle` is a resume function
    return innermost(y + 1)


def outer(x: torch.Tensor) -> torch.Tensor:
    return middle(x - 1) * 3


def catches(x: torch.Tensor) -> list[tuple[str, int]]:
    try:
        outer(x)
    except Boom as e:
        return frames(e.__traceback__)
    return []


def test_a_caught_exception_walks_the_frames_eager_walks() -> None:
    """Caught inside the compiled function, on the first call (compiling) and the next ones."""
    x = torch.ones(3)
    want = catches(x)
    assert [name for name, _ in want] == ["catches", "outer", "middle", "innermost"]
    compiled = framejit.jit(catches)
    for _ in range(3):
        assert compiled(x) == want


def test_an_escaping_exception_walks_the_frames_eager_walks() -> None:
    """Raised out of the compiled function to its caller; `traceback.extract_tb` (what
    logging prints) names the same frames and lines."""
    x = torch.ones(3)
    with pytest.raises(Boom) as eager:
        outer(x)
    compiled = framejit.jit(outer)
    for _ in range(2):
        with pytest.raises(Boom) as got:
            compiled(x)
        want = [(f.name, f.lineno) for f in traceback.extract_tb(eager.value.__traceback__)]
        seen = [(f.name, f.lineno) for f in traceback.extract_tb(got.value.__traceback__)]
        assert seen[1:] == want[1:]  # [0]: this test's own line
        assert all("framejit" not in f.filename for f in traceback.extract_tb(got.tb)[1:])


class Block(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return outer(x)


def test_through_a_module_and_a_loop_of_breaks() -> None:
    """A compiled module's forward (framejit's module wrapper) and a loop whose every
    iteration breaks (its resume functions run one after another by `run_resumes`)."""

    def loop(x: torch.Tensor, n: int) -> torch.Tensor:
        for k in range(n):
            x = x + k
            print(end="")
            if k == n - 1:
                return middle(x)
        return x

    def run(fn, *args) -> list[tuple[str, int]]:
        try:
            fn(*args)
        except Boom as e:
            return frames(e.__traceback__)
        return []

    x = torch.ones(3)
    block = Block()
    eager = run(block, x)
    got = run(framejit.jit(Block()), x)
    # eager's own nn.Module call frames (`_wrapped_call_impl`, `_call_impl`) aside
    assert got == [f for f in eager if not f[0].endswith("call_impl")]
    assert run(framejit.jit(loop), x, 4) == run(loop, x, 4)


def test_a_nested_function_called_again_with_other_cells() -> None:
    """A closure made again (a resume function of its parent calls it with new cells:
    the jit's `with_closure` path) raises with eager's frames too."""

    def parent(x: torch.Tensor, scale: float) -> list[tuple[str, int]]:
        def child(y: torch.Tensor) -> torch.Tensor:
            print(end="")
            return innermost(y * scale)

        try:
            child(x)
        except Boom as e:
            return frames(e.__traceback__)
        return []

    compiled = framejit.jit(parent)
    x = torch.ones(2)
    for scale in (1.0, 2.0, 3.0):
        assert compiled(x, scale) == parent(x, scale)


def test_framejit_own_errors_keep_the_compiler_frames() -> None:
    """A fullgraph error is framejit's: its traceback still shows where framejit raised it."""
    with pytest.raises(framejit.FullGraphError) as info:
        framejit.jit(middle, fullgraph=True)(torch.ones(2))
    files = [f.filename for f in traceback.extract_tb(info.value.__traceback__)]
    assert any("frontend" in name for name in files), files

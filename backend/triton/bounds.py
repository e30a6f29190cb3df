"""Run-time index checks: the error buffer that kernels with indirect reads write, and the
exception the wrapper raises from it.

A graph whose kernels read through indices from memory (gather, `x[idx]`, index_select,
embedding) that are not proven in range at compile time gets one int64 buffer of shape
`(checks, 2)`: a kernel lane whose index is out of range never loads through it (the read is
masked, see kernels.py) and instead stores `1` and the index into its check's row. The
generated module holds one `IndexChecks` per device; `call` takes the buffer from it before
the launches (`begin`) and hands it back after them (`end`), which raises
`IndexOutOfBounds` for the first flagged row, as eager would for the same input.

When the error is seen depends on `config.index_checks` (FRAMEJIT_INDEX_CHECKS):

- "auto" (the default): "deferred" on CUDA, "sync" on the CPU.
- "sync": `end` reads the buffer; the call that read a bad index raises. On a GPU that is a
  host-device synchronization per call.
- "deferred": `end` starts an asynchronous copy of the buffer to pinned
  host memory and records an event; a later call of the same module raises once that copy has
  landed (so does `framejit.check_index_errors()`, after a synchronization). The host never
  waits for the device, as with eager CUDA, whose device-side asserts also surface later;
  unlike a device assert, the error is an ordinary exception and the context stays usable.
  The outputs of the call that read the bad index hold zeros where the read was masked.

Invariants:

- A flagged buffer raises once: the buffers are zeroed when they raise.
- Under CUDA graph capture nothing is read or copied (the kernels stay safe: bad lanes read
  nothing and produce 0).
- The exception is an `IndexOutOfBounds`, both an `IndexError` and a `RuntimeError`: eager
  raises one or the other for the same mistake depending on the op, the dim and the device
  (IndexError from `x[idx]` and embedding on CPU, RuntimeError from gather and from a CUDA
  device assert), and an `except` written for either catches it.
- An error about a CUDA call is never followed by the frontend's eager rerun of the frame
  (`framejit_rerun = False`): eager would read the bad index and end in a device assert.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

from framejit import config


class IndexOutOfBounds(IndexError, RuntimeError):
    """An index read from memory was out of range in a generated kernel."""


class DivisionByZero(RuntimeError):
    """An integer division by zero in a generated kernel on the CPU, where eager's kernels
    raise a RuntimeError saying "ZeroDivisionError"."""


# The op name of a check table entry that is a zero-divisor check, not an index check: its
# "index" is 1 where the divisor was 0 (ops/division.py, `_int_division`).
ZERO_DIVISOR = "zero divisor: "


# An entry of the generated `call`'s check table: (aten op, dim, size, index was wrapped).
Check = tuple[str, int, int, bool]


def check_indices(errors: torch.Tensor, checks: tuple[Check, ...]) -> None:
    """Raise for the first out-of-range index the kernels recorded in `errors`."""
    if errors.is_cuda and torch.cuda.is_current_stream_capturing():
        return
    for (flag, value), check in zip(errors.tolist(), checks):
        if flag:
            error = out_of_bounds(check, value)
            if errors.is_cuda:
                # the frontend reruns a failed frame eagerly; eager's CUDA kernels would read
                # the same index and end in a device-side assert, which leaves the process's
                # CUDA context unusable
                error.framejit_rerun = False  # type: ignore[attr-defined]
            raise error


def out_of_bounds(
    check: Check, value: int, later: bool = False
) -> IndexOutOfBounds | DivisionByZero:
    op, dim, size, wrapped = check
    if op.startswith(ZERO_DIVISOR):
        return DivisionByZero(
            f"ZeroDivisionError ({op.removeprefix(ZERO_DIVISOR)} in a framejit Triton kernel)"
        )
    if wrapped and value < 0:  # `size` was added to a negative index before the check
        value -= size
    when = (
        "; read by an earlier call of this graph, whose outputs hold 0 where it was read "
        "(checks are deferred: FRAMEJIT_INDEX_CHECKS=sync raises in the call itself)"
        if later
        else ""
    )
    return IndexOutOfBounds(
        f"index {value} is out of bounds for dimension {dim} with size {size} "
        f"({op} in a framejit Triton kernel{when})"
    )


_deferred: weakref.WeakSet[IndexChecks] = weakref.WeakSet()


class IndexChecks:
    """The error buffer of one generated module on one device; see the module docstring."""

    def __init__(self, device: torch.device, rows: int) -> None:
        self.device = device
        self.rows = rows
        self.errors: torch.Tensor | None = None  # the device buffer (deferred mode)
        self.host: torch.Tensor | None = None  # its pinned copy
        self.event: Any = None  # recorded after the copy was queued
        self.table: tuple[Check, ...] = ()  # the check table of the call that queued it

    def deferred(self) -> bool:
        mode = config.index_checks
        return mode == "deferred" or (mode == "auto" and self.device.type == "cuda")

    def begin(self) -> torch.Tensor:
        """The buffer this call's kernels write; raises for an earlier call's bad index."""
        if not self.deferred() or _capturing(self.device):
            # under CUDA graph capture: a buffer of the recording's own, never read (no event
            # query, no pinned allocation: a capture forbids both)
            return torch.zeros((self.rows, 2), dtype=torch.int64, device=self.device)
        if self.errors is None:
            # the host copy names its device: under `torch.set_default_device("cuda")` a bare
            # factory call would make it on the GPU (where pinning fails)
            pinned = self.device.type == "cuda"
            self.host = torch.zeros(
                (self.rows, 2), dtype=torch.int64, device="cpu", pin_memory=pinned
            )
            self.errors = torch.zeros((self.rows, 2), dtype=torch.int64, device=self.device)
            _deferred.add(self)
        self.poll(wait=False)
        return self.errors

    def end(self, errors: torch.Tensor, table: tuple[Check, ...]) -> None:
        if _capturing(errors.device):
            return
        if not self.deferred() or errors is not self.errors:
            check_indices(errors, table)
            return
        assert self.host is not None
        self.table = table
        self.host.copy_(errors, non_blocking=True)
        if errors.is_cuda:
            self.event = torch.cuda.Event()
            self.event.record()
        else:  # "deferred" asked for on the CPU (tests): reported later all the same
            self.event = _Done()

    def poll(self, wait: bool) -> None:
        """Raise if a finished copy shows a bad index (`wait`: finish the copy first)."""
        if self.event is None or self.host is None or self.errors is None:
            return
        if wait:
            self.event.synchronize()
        elif not self.event.query():
            return
        self.event = None
        if not bool(self.host[:, 0].any()):
            return
        rows = self.host.tolist()
        self.host.zero_()
        self.errors.zero_()
        for (flag, value), check in zip(rows, self.table):
            if flag:
                error = out_of_bounds(check, value, later=True)
                error.framejit_rerun = False  # type: ignore[attr-defined]
                raise error


def _capturing(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


class _Done:
    """An event that has always happened (CPU tensors: the copy was synchronous)."""

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        """Nothing to wait for."""


def check_index_errors() -> None:
    """Raise `IndexOutOfBounds` for a bad index read by any earlier call whose check was
    deferred (`config.index_checks`); waits for the device to finish those calls."""
    for checks in list(_deferred):
        checks.poll(wait=True)

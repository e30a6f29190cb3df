"""Run-time index checks: the error buffer that kernels with indirect reads write, and the
exception the wrapper raises from it.

A graph whose kernels read through indices from memory (gather, `x[idx]`, index_select,
embedding) that are not proven in range at compile time gets one int64 buffer of shape
`(checks, 2)`, zeroed per call: a kernel lane whose index is out of range never loads
through it (the read is masked, see kernels.py) and instead stores `1` and the index into
its check's row. `call` then hands the buffer to `check_indices`, which raises for the first
flagged row, as eager would for the same input.

Invariants:

- Reading the buffer is the only host-device synchronization the checks add, once per call
  and only for graphs that have checks. Under CUDA graph capture it cannot be read; the check
  is skipped there (the kernels stay safe: bad lanes read nothing and produce 0).
- The exception is an `IndexOutOfBounds`, both an `IndexError` and a `RuntimeError`: eager
  raises one or the other for the same mistake depending on the op, the dim and the device
  (IndexError from `x[idx]` and embedding on CPU, RuntimeError from gather and from a CUDA
  device assert), and an `except` written for either catches it.
"""

from __future__ import annotations

import torch


class IndexOutOfBounds(IndexError, RuntimeError):
    """An index read from memory was out of range in a generated kernel."""


# An entry of the generated `call`'s check table: (aten op, dim, size, index was wrapped).
Check = tuple[str, int, int, bool]


def check_indices(errors: torch.Tensor, checks: tuple[Check, ...]) -> None:
    """Raise for the first out-of-range index the kernels recorded in `errors`."""
    if errors.is_cuda and torch.cuda.is_current_stream_capturing():
        return
    for (flag, value), check in zip(errors.tolist(), checks):
        if flag:
            raise out_of_bounds(check, value)


def out_of_bounds(check: Check, value: int) -> IndexOutOfBounds:
    op, dim, size, wrapped = check
    if wrapped and value < 0:  # `size` was added to a negative index before the check
        value -= size
    return IndexOutOfBounds(
        f"index {value} is out of bounds for dimension {dim} with size {size} "
        f"({op} in a framejit Triton kernel)"
    )

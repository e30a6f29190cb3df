"""What a generated wrapper calls at run time besides its kernels and ATen ops.

`alias(t, sizes, strides, delta)`: the view `t.as_strided(sizes, strides, t.storage_offset() +
delta)`, made by framejit's C++ extension without the dispatcher where it is built (about a
fifth of `as_strided`'s host time). The view has no autograd or view history: codegen.py uses
it only for arguments of ops whose results do not alias them, inside the wrapper, where the
graph is functional and runs without autograd.
"""

from __future__ import annotations

from typing import Any

import torch


def _as_strided(t: torch.Tensor, sizes: Any, strides: Any, delta: int) -> torch.Tensor:
    return t.as_strided(sizes, strides, t.storage_offset() + delta)


def _find_alias() -> Any:
    from framejit.guards import guard

    extension = guard._tensor_check  # None where unbuilt, or built for another torch
    return getattr(extension, "alias_view", None) or _as_strided


alias = _find_alias()

"""framejit: a bytecode-level JIT compiler for PyTorch programs.

    @framejit.jit
    def step(x, w): ...

See README.md for the API and docs/ARCHITECTURE.md for how a call flows through the package.
"""

from __future__ import annotations

import os as _os

# From a source checkout the subpackages live beside this folder (frontend/, guards/, ...);
# an installed framejit has them inside it.
_here = _os.path.dirname(_os.path.abspath(__file__))
if not _os.path.isdir(_os.path.join(_here, "frontend")):
    __path__.append(_os.path.dirname(_here))  # type: ignore[name-defined]

from framejit import logs
from framejit.config import config

try:
    logs.apply_env()
except ValueError as _exc:  # a typo in FRAMEJIT_LOGS must not stop the user's program
    import warnings as _warnings

    _warnings.warn(str(_exc), stacklevel=2)

from framejit.api import (
    ExplainOutput,
    JitFunction,
    JitModule,
    check_index_errors,
    disable,
    explain,
    jit,
    mark_step_begin,
    reset,
)
from framejit.backend import list_backends, register_backend
from framejit.backend.triton.bounds import IndexOutOfBounds
from framejit.frontend.dynamic import mark_dynamic
from framejit.frontend.errors import FullGraphError
from framejit.logs import set_logs
from framejit.wholescript import enabled

__version__ = "0.1.0"

__all__ = [
    "ExplainOutput",
    "FullGraphError",
    "IndexOutOfBounds",
    "JitFunction",
    "JitModule",
    "check_index_errors",
    "config",
    "disable",
    "enabled",
    "explain",
    "jit",
    "list_backends",
    "mark_dynamic",
    "mark_step_begin",
    "register_backend",
    "reset",
    "set_logs",
]

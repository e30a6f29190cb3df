"""framejit's settings, read once from the environment at import.

`framejit.config` is the single place a setting lives; the environment variables in the README
only give the starting values. Changing an attribute takes effect on the next compilation
(guards already compiled keep the settings they were made with).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _tristate(name: str) -> bool | None:
    value = os.environ.get(name, "").strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    return None


def _default_cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "framejit")


@dataclass
class Config:
    # FRAMEJIT_DISABLE=1: `jit` returns functions unchanged and nothing is ever hooked.
    disable: bool = field(default_factory=lambda: _flag("FRAMEJIT_DISABLE"))
    # Defaults used by `jit` when no backend/mode is given, and by whole-script mode.
    backend: str = field(default_factory=lambda: os.environ.get("FRAMEJIT_BACKEND", "auto"))
    mode: str | None = field(default_factory=lambda: os.environ.get("FRAMEJIT_MODE") or None)
    # Dynamic shapes for whole-script mode (FRAMEJIT_DYNAMIC=1/0; unset: automatic), the same
    # values as jit's `dynamic=` (True, False, None = automatic).
    dynamic: bool | None = field(default_factory=lambda: _tristate("FRAMEJIT_DYNAMIC"))
    cache_dir: str = field(
        default_factory=lambda: os.environ.get("FRAMEJIT_CACHE_DIR") or _default_cache_dir()
    )
    # The Triton backend times a wider list of launch configs per kernel (FRAMEJIT_MAX_AUTOTUNE=1;
    # mode="max-autotune" turns it on too).
    max_autotune: bool = field(default_factory=lambda: _flag("FRAMEJIT_MAX_AUTOTUNE"))
    # When the Triton backend's run-time index checks report a bad index read from memory:
    # "sync" (the call that read it raises; a device synchronization per call on a GPU),
    # "deferred" (a later call raises, or framejit.check_index_errors(); the host never waits),
    # "auto" (deferred on CUDA, sync on the CPU). FRAMEJIT_INDEX_CHECKS sets it.
    index_checks: str = field(
        default_factory=lambda: os.environ.get("FRAMEJIT_INDEX_CHECKS", "auto").strip() or "auto"
    )
    # Entries kept per code object before framejit stops compiling it and runs it eagerly.
    recompile_limit: int = 8
    # Graph breaks in a row (a loop whose body breaks makes one per iteration) before the rest
    # of the function runs uncompiled.
    max_resume_depth: int = 16
    # How deep user-function calls are inlined before the translator gives up.
    inline_depth_limit: int = 64
    # Check every instruction's stack effect against dis.stack_effect (slow; for debugging).
    debug_stack_check: bool = field(default_factory=lambda: _flag("FRAMEJIT_DEBUG"))
    # Compile TENSOR_MATCH and GLOBAL_STATE guards to the C++ checks when they were built
    # (FRAMEJIT_CPP_GUARDS=0: no).
    cpp_guards: bool = field(
        default_factory=lambda: os.environ.get("FRAMEJIT_CPP_GUARDS", "1").strip() != "0"
    )
    # CUDA graph trees (mode="reduce-overhead"): distinct input shapes recorded per compiled
    # graph, and recordings beyond one per shape (a parameter moved, a new place in the tree),
    # before that graph runs without CUDA graphs (said in the `cudagraphs` log).
    cudagraph_max_shapes: int = 8
    cudagraph_rerecord_limit: int = 8
    # Raise instead of falling back to eager when compilation fails for a reason other
    # than unsupported code (an internal error); tests turn this on.
    raise_internal_errors: bool = field(default_factory=lambda: _flag("FRAMEJIT_RAISE"))


config = Config()

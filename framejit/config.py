"""framejit's settings, read once from the environment at import.

`framejit.config` is the single place a setting lives; the environment variables in the README
only give the starting values. Changing an attribute takes effect on the next compilation
(guards already compiled keep the settings they were made with).
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field, fields
from typing import Any

MODES = (None, "default", "reduce-overhead", "max-autotune")
INDEX_CHECKS = ("sync", "deferred", "auto")
CONV_LAYOUTS = ("auto", "channels_last", "keep")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _env_warning(name: str, value: str, expected: str, using: Any) -> None:
    """A value framejit cannot read: said once at import, as a typo in FRAMEJIT_LOGS is; the
    program runs with the default."""
    warnings.warn(
        f"framejit: {name}={value!r} is not one of {expected}; using {using!r}",
        RuntimeWarning,
        stacklevel=2,
    )


def _tristate(name: str) -> bool | None:
    """1/true/yes/on, 0/false/no/off (any case), or None when unset or empty."""
    value = os.environ.get(name, "").strip()
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    if value:
        _env_warning(name, value, "/".join(_TRUE + _FALSE), None)
    return None


def _flag(name: str, default: bool = False) -> bool:
    value = _tristate(name)
    return default if value is None else value


def _choice(name: str, choices: tuple[str, ...], default: str) -> str:
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    if value.lower() in choices:
        return value.lower()
    _env_warning(name, value, ", ".join(choices), default)
    return default


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
    # The Triton backend launches a compiled kernel through its launcher directly, skipping
    # Triton's per-call work, where the arguments' specialization is one seen before
    # (FRAMEJIT_DIRECT_LAUNCH=0: every launch through Triton's `kernel[grid](...)`). Read at
    # each launch.
    direct_launch: bool = field(default_factory=lambda: _flag("FRAMEJIT_DIRECT_LAUNCH", True))
    # When the Triton backend's run-time index checks report a bad index read from memory:
    # "sync" (the call that read it raises; a device synchronization per call on a GPU),
    # "deferred" (a later call raises, or framejit.check_index_errors(); the host never waits),
    # "auto" (deferred on CUDA, sync on the CPU). FRAMEJIT_INDEX_CHECKS sets it.
    index_checks: str = field(
        default_factory=lambda: _choice("FRAMEJIT_INDEX_CHECKS", INDEX_CHECKS, "auto")
    )
    # Channels-last activations around 2-d convolutions in the Triton backend: "auto" (inference
    # graphs on CUDA), "channels_last" (any graph with one, any device), "keep" (never).
    # Outputs keep eager's layout either way. FRAMEJIT_CONV_LAYOUT sets it.
    conv_layout: str = field(
        default_factory=lambda: _choice("FRAMEJIT_CONV_LAYOUT", CONV_LAYOUTS, "auto")
    )
    # Entries kept per code object before framejit stops compiling it and runs it eagerly.
    recompile_limit: int = 8
    # A module argument (`self` of a layer's forward, of its resume functions) seen as a second
    # instance of its class by a recompile is guarded by class from then on, so one entry serves
    # every layer of a model whose layers each break the graph (frontend/dynamic.py,
    # `module_is_shared`). Not under mode="reduce-overhead", whose recordings are per instance
    # anyway. FRAMEJIT_SHARE_MODULE_GRAPHS=0: every instance compiles its own entry.
    share_module_graphs: bool = field(
        default_factory=lambda: _flag("FRAMEJIT_SHARE_MODULE_GRAPHS", True)
    )
    # Graph breaks in a row (a loop whose body breaks makes one per iteration) before the rest
    # of the function runs uncompiled.
    max_resume_depth: int = 16
    # Trace `opt.step()` of torch.optim.SGD into the graph (frontend/optimizers.py). Off: the
    # step runs as Python at a break. Off by default: on the CPU (aot_eager) a captured step is
    # slower than eager's; the fused step is for the Triton backend, not yet measured on a GPU.
    # FRAMEJIT_CAPTURE_OPTIMIZER_STEPS=1: on.
    capture_optimizer_steps: bool = field(
        default_factory=lambda: _flag("FRAMEJIT_CAPTURE_OPTIMIZER_STEPS", False)
    )
    # How deep user-function calls are inlined before the translator gives up.
    inline_depth_limit: int = 64
    # Check every instruction's stack effect against dis.stack_effect (slow; for debugging).
    debug_stack_check: bool = field(default_factory=lambda: _flag("FRAMEJIT_DEBUG"))
    # Compile TENSOR_MATCH and GLOBAL_STATE guards to the C++ checks when they were built
    # (FRAMEJIT_CPP_GUARDS=0: no).
    cpp_guards: bool = field(default_factory=lambda: _flag("FRAMEJIT_CPP_GUARDS", True))
    # CUDA graph trees (mode="reduce-overhead"): distinct input shapes recorded per compiled
    # graph, and recordings beyond one per shape (a parameter moved, a new place in the tree),
    # before that graph runs without CUDA graphs (said in the `cudagraphs` log).
    cudagraph_max_shapes: int = 8
    cudagraph_rerecord_limit: int = 8
    # Raise instead of falling back to eager when compilation fails for a reason other
    # than unsupported code (an internal error); tests turn this on.
    raise_internal_errors: bool = field(default_factory=lambda: _flag("FRAMEJIT_RAISE"))

    def __post_init__(self) -> None:
        # From here on every assignment is checked (the environment's backend and mode are
        # kept as given: `jit` says what is wrong with them, or whole-script mode does not
        # start, naming them).
        object.__setattr__(self, "_checking", True)

    def __setattr__(self, name: str, value: Any) -> None:
        """A setting that does not exist, or a value of the wrong kind, is refused here, where
        the mistake is made, not later inside a compile (`recompile_limit = "16"` from a
        command-line flag)."""
        if self.__dict__.get("_checking"):
            value = _checked(name, value)
        object.__setattr__(self, name, value)


_BOOLS = (
    "disable",
    "max_autotune",
    "direct_launch",
    "debug_stack_check",
    "cpp_guards",
    "raise_internal_errors",
    "share_module_graphs",
    "capture_optimizer_steps",
)
_CHOICES = {"index_checks": INDEX_CHECKS, "conv_layout": CONV_LAYOUTS}
_COUNTS = (
    "recompile_limit",
    "max_resume_depth",
    "inline_depth_limit",
    "cudagraph_max_shapes",
    "cudagraph_rerecord_limit",
)


def _checked(name: str, value: Any) -> Any:
    """`value` as `config.<name>` stores it; TypeError/ValueError saying what was expected."""
    names = [f.name for f in fields(Config)]
    if name not in names:
        raise AttributeError(
            f"framejit.config has no setting {name!r}; the settings are: {', '.join(names)}"
        )
    if name in _BOOLS:
        if not isinstance(value, bool):
            raise TypeError(f"config.{name} must be True or False, got {value!r}")
    elif name in _COUNTS:
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"config.{name} must be an int, got {value!r}")
        if value < 0:
            raise ValueError(f"config.{name} must be >= 0, got {value}")
    elif name == "backend":
        if not (isinstance(value, str) and value) and not callable(value):
            raise TypeError(
                f"config.backend must be a backend name (framejit.list_backends()) or a "
                f"callable (gm, example_inputs) -> callable, got {value!r}"
            )
    elif name == "mode":
        if value not in MODES:
            kind = ValueError if isinstance(value, str) else TypeError
            raise kind(f"config.mode must be one of {', '.join(map(repr, MODES))}, got {value!r}")
    elif name == "dynamic":
        if value is not None and not isinstance(value, bool):
            raise TypeError(f"config.dynamic must be None, True or False, got {value!r}")
    elif name == "cache_dir":
        if not isinstance(value, (str, os.PathLike)):
            raise TypeError(f"config.cache_dir must be a path (str), got {value!r}")
        value = os.fspath(value)
    elif name in _CHOICES and value not in _CHOICES[name]:
        kind = ValueError if isinstance(value, str) else TypeError
        raise kind(
            f"config.{name} must be one of {', '.join(map(repr, _CHOICES[name]))}, got {value!r}"
        )
    return value


config = Config()

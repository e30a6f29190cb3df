"""The Python side of the PEP 523 frame hook: what to do with a frame the C hook intercepted.

The C extension (`_eval_frame.c`) keeps one state per code object and calls `on_frame(fn,
args)` only for a code it has not seen and on a guard miss. `on_frame` answers `(state,
entry)`: `state` is stored on the code (`None` = skip it for good, or the code's `CodeCache`
from `guards.cache_for`, shared with every other user of that cache) and `entry` is what to run
now (`None` = run the frame as it is).

Invariants:
- Never change a program's result: anything unexpected here skips the code (and is logged);
  only `config.raise_internal_errors` lets an internal error reach the user's call.
- Cheap rules first, once per code: files of framejit, torch and the standard library, and
  tool packages (`_SKIP_MODULES`: numpy, pytest, ...); model libraries in site-packages
  (transformers, timm, torchvision) are compiled like user code; functions marked with
  `framejit.disable`; code made by framejit itself
  (transformed code of any cache entry); a first call whose arguments hold no tensor or module.
  A frame traced with no graph and no graph break does no tensor work: skipped once, free after.
- The C hook switches itself off for this thread while `on_frame` runs, so the compiler's own
  frames (and torch's) are never intercepted. Other threads are not: one that reaches
  `on_frame` while a compile holds `_compile_lock` never waits for it (the compiling thread may
  be waiting for that thread); its frame runs as it is, with the code's state left UNDECIDED.
- Enable state is per thread (`set_thread`), with a process-wide switch for whole-script mode
  (`set_global`). Settings (`backend`, `mode`) are per thread too.
- While a TorchFunctionMode or TorchDispatchMode of the user's is active (`user_mode_active`:
  any but torch's own device context), or while `torch.jit.trace` records, no frame is compiled
  or runs compiled code: it runs as it is, so the mode (the tracer) sees the program's torch
  calls once each and none of framejit's. Every
  entry's GLOBAL_STATE guard fails under one, and it is checked before any guard reads a
  tensor (which a mode would see); a miss then runs the frame as it is. Nor is
  a frame compiled inside a `__torch_dispatch__` handler (`inside_torch_dispatch`): a mode's
  own handler runs with the mode off the stack, in the middle of an op's dispatch.
"""

from __future__ import annotations

import contextlib
import os
import site
import sys
import sysconfig
import threading
import time
import types
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from framejit.guards.guard import user_mode_active

from framejit import logs
from framejit.config import config

log = logs.get_logger("frontend")

try:
    from framejit.frontend import _eval_frame
except ImportError as _exc:  # not built (no C compiler) or built for another Python
    _eval_frame = None
    _IMPORT_ERROR = f"{type(_exc).__name__}: {_exc}"
else:
    _IMPORT_ERROR = ""


def available() -> bool:
    return _eval_frame is not None


def unavailable_reason() -> str:
    """Why the hook cannot run here ("" when it can)."""
    if _eval_frame is not None:
        return ""
    return (
        "framejit's frame hook (the C extension framejit.frontend._eval_frame) is not built for "
        f"this Python ({sys.version.split()[0]}): {_IMPORT_ERROR}. Reinstall framejit with a C "
        "compiler available (`pip install --no-build-isolation -e .`); `framejit.jit` works "
        "without it."
    )


def forget_skip_marks() -> None:
    """Every code marked skip is looked at again on its next call (framejit.reset())."""
    if _eval_frame is not None:
        _eval_frame.new_skip_epoch()


def require() -> Any:
    """The C module, or RuntimeError saying why it is missing."""
    if _eval_frame is None:
        raise RuntimeError(unavailable_reason())
    return _eval_frame


# --- skip rules -------------------------------------------------------------------------------


def _prefixes_of(paths: set[str]) -> tuple[str, ...]:
    real = {os.path.realpath(r) for r in paths if r}
    return tuple(sorted({r.rstrip(os.sep) + os.sep for r in paths | real if r}))


def _skip_prefixes() -> tuple[str, ...]:
    """Folders of torch and framejit (wherever they are installed)."""
    roots = {os.path.dirname(os.path.abspath(torch.__file__))}
    # framejit's own folders; in a source checkout the subpackages sit beside framejit/, and the
    # checkout's root (tests/, tools/, users' scripts) must stay hookable.
    for name in (
        "framejit",
        "framejit.frontend",
        "framejit.guards",
        "framejit.backend",
        "framejit.cudagraphs",
    ):
        mod = sys.modules.get(name)
        if mod is not None and getattr(mod, "__file__", None):
            roots.add(os.path.dirname(os.path.abspath(mod.__file__)))
    return _prefixes_of(roots)


def _stdlib_prefixes() -> tuple[str, ...]:
    roots: set[str] = set()
    for key in ("stdlib", "platstdlib"):
        with contextlib.suppress(KeyError):
            roots.add(sysconfig.get_path(key))
    return _prefixes_of(roots)


def _site_prefixes() -> tuple[str, ...]:
    """site-packages folders (they sit inside the standard library's folder on most installs)."""
    roots: set[str] = set()
    for key in ("purelib", "platlib"):
        with contextlib.suppress(KeyError):
            roots.add(sysconfig.get_path(key))
    with contextlib.suppress(AttributeError):
        roots.update(site.getsitepackages())
    with contextlib.suppress(AttributeError):
        roots.add(site.getusersitepackages())
    return _prefixes_of(roots)


_SKIP_NAMES = ("<frozen ", "<eval_with_key>", "<framejit")
# Top-level packages never compiled: framejit and torch themselves, the compiler's own
# dependencies, and tools that handle tensors without doing model work (test runners,
# progress bars, numerics libraries that torch calls into).
_SKIP_MODULES = frozenset(
    {
        "framejit",
        "torch",
        "functorch",
        "torchgen",
        "triton",
        "numpy",
        "bytecode",
        "rich",
        "sympy",
        "mpmath",
        "_pytest",
        "pytest",
        "pluggy",
        "hypothesis",
        "expecttest",
        "IPython",
        "tqdm",
        "safetensors",
    }
)
_prefixes: tuple[str, ...] | None = None
_stdlib: tuple[str, ...] = ()
_site: tuple[str, ...] = ()


_SEQUENTIAL_FORWARD = torch.nn.Sequential.forward.__code__


def skipped_by_rule(fn: types.FunctionType) -> str:
    """Why `fn`'s code is never compiled by the hook ("" if it may be)."""
    global _prefixes, _stdlib, _site
    code = fn.__code__
    if code is _SEQUENTIAL_FORWARD:
        # torch's own, but a whole model (`model = nn.Sequential(...)`) that a training loop
        # the hook cannot capture (`for x, y in loader:`) calls frame by frame: compiled
        return ""
    filename = code.co_filename
    if filename.startswith(_SKIP_NAMES):
        return "generated or frozen code"
    if _prefixes is None:
        _prefixes, _stdlib, _site = _skip_prefixes(), _stdlib_prefixes(), _site_prefixes()
    if os.path.isabs(filename):
        if filename.startswith(_prefixes):
            return "framejit or torch"
        if filename.startswith(_stdlib) and not filename.startswith(_site):
            return "standard library"
    module = fn.__globals__.get("__name__")
    if not isinstance(module, str):
        return "exec'd code without a module"
    if module.split(".", 1)[0] in _SKIP_MODULES:
        return f"framejit, torch or a tool package ({module.split('.', 1)[0]})"
    if getattr(fn, "_framejit_disabled", False):
        return "framejit.disable"
    if _is_transformed(code):
        return "code made by framejit"
    return ""


def _is_transformed(code: types.CodeType) -> bool:
    """Is `code` a transformed code that calls a compiled graph (made by `jit`'s compiles)?"""
    from framejit.frontend.codegen import GRAPH_OUT

    return GRAPH_OUT in code.co_varnames


def _tensorish(value: Any, depth: int = 0) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, torch.nn.Module):
        # a module whose nn.Module.__init__ has not run yet (`self` in its own __init__) holds
        # nothing to compile
        return "_modules" in getattr(value, "__dict__", {})
    if depth == 0 and type(value) in (list, tuple):
        return any(_tensorish(v, 1) for v in value[:16])
    if depth == 0 and type(value) is dict:
        return any(_tensorish(v, 1) for v in list(value.values())[:16])
    return False


# --- torch modes ------------------------------------------------------------------------------


def inside_torch_dispatch() -> bool:
    """Is this code running in a `__torch_dispatch__` handler (a mode's, which is off the stack
    while its handler runs, or a tensor subclass's), in the middle of an op? Compiling there
    would trace framejit's own fake tensors inside that op's dispatch: such a call runs as
    Python. (torch excludes the PythonTLSSnapshot key exactly while it runs these handlers.)"""
    return torch._C._dispatch_tls_is_dispatch_key_excluded(_PYTHON_TLS_SNAPSHOT)


_PYTHON_TLS_SNAPSHOT = torch._C.DispatchKey.PythonTLSSnapshot


# --- per-thread settings ----------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    backend: Any = None  # a name or callable; None: config.backend
    mode: str | None = None


_local = threading.local()


def current_settings() -> Settings:
    return getattr(_local, "settings", None) or _global_settings


_global_settings = Settings()


@contextlib.contextmanager
def thread_enabled(settings: Settings) -> Iterator[None]:
    """The hook on for this thread, with these settings, for the body of the `with`."""
    mod = require()
    install()
    before = getattr(_local, "settings", None)
    _local.settings = settings
    previous = mod.set_thread(1)
    try:
        yield
    finally:
        mod.set_thread(previous)
        _local.settings = before


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """The hook off for this thread for the body of the `with` (a no-op without the hook)."""
    if _eval_frame is None:
        yield
        return
    previous = _eval_frame.set_thread(0)
    try:
        yield
    finally:
        _eval_frame.set_thread(previous)


def set_global(on: bool, settings: Settings | None = None) -> bool:
    """Switch the hook on or off for every thread that has not chosen; returns the old state."""
    global _global_settings
    mod = require()
    install()
    if settings is not None:
        _global_settings = settings
    return mod.set_global(on)


def install() -> None:
    mod = require()
    mod.set_callback(on_frame)
    mod.set_error_callback(_tidy_traceback)
    _watch_monitoring(mod)


def _tidy_traceback(error: BaseException) -> None:
    """Called with an exception leaving a compiled entry: its traceback as eager's would read
    (framejit's call path out, a frame and its resume function counted once), as under jit."""
    from framejit.api import _user_traceback

    _user_traceback(error)


def _watch_monitoring(mod: Any) -> None:
    """On 3.12, step aside while any sys.monitoring tool has events set (a debugger, coverage
    in sysmon mode): they must see the user's own code run, line by line. sys.monitoring has
    no notification, so its two setters are wrapped, once, to tell the C hook."""
    monitoring = getattr(sys, "monitoring", None)
    if monitoring is None or getattr(monitoring.set_events, "_framejit_watch", False):
        return
    set_events, set_local_events = monitoring.set_events, monitoring.set_local_events
    local_on: set[int] = set()  # tools with local events on some code

    def refresh() -> None:
        mod.set_monitoring(bool(local_on) or any(monitoring.get_events(tool) for tool in range(6)))

    def watched_set_events(tool_id: int, event_set: int) -> None:
        set_events(tool_id, event_set)
        refresh()

    def watched_set_local_events(tool_id: int, code: Any, event_set: int) -> None:
        set_local_events(tool_id, code, event_set)
        if event_set:
            local_on.add(tool_id)
        refresh()

    watched_set_events._framejit_watch = True  # type: ignore[attr-defined]
    monitoring.set_events = watched_set_events
    monitoring.set_local_events = watched_set_local_events
    refresh()  # a tool set before framejit was


# --- what happened, for the summary -----------------------------------------------------------


@dataclass
class Summary:
    frames_compiled: int = 0
    graphs: int = 0
    breaks: Counter[str] = field(default_factory=Counter)
    recompiles: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    compile_seconds: float = 0.0

    def render(self) -> str:
        counts = _eval_frame.stats() if _eval_frame is not None else {}
        lines = [
            "framejit whole-script summary",
            f"  frames compiled      {self.frames_compiled}",
            f"  graphs               {self.graphs}",
            f"  graph breaks         {sum(self.breaks.values())}",
            f"  recompiles           {self.recompiles}",
            f"  compile time         {self.compile_seconds:.2f} s",
            f"  hook: intercepted {counts.get('intercepted', 0)}, "
            f"ran compiled {counts.get('hits', 0)}, asked Python {counts.get('callbacks', 0)}, "
            f"skipped {counts.get('skipped', 0)}",
        ]
        if self.breaks:
            lines.append("  top break reasons:")
            lines += [f"    {n:5d}  {r}" for r, n in self.breaks.most_common(5)]
        return "\n".join(lines)


summary = Summary()


# --- the callback -----------------------------------------------------------------------------


def on_frame(fn: types.FunctionType, args: tuple[Any, ...]) -> tuple[Any, Any]:
    """Called by the C hook with the hook off for this thread. Returns (state, entry)."""
    try:
        return _decide(fn, args)
    except Exception as exc:
        if config.raise_internal_errors:
            raise
        code = fn.__code__
        log.warning(
            "framejit: frame hook error on %s (%s:%d); running it uncompiled: %s: %s",
            code.co_qualname,
            code.co_filename,
            code.co_firstlineno,
            type(exc).__name__,
            exc,
        )
        return None, None


def _skip(reason: str) -> tuple[None, None]:
    summary.skipped[reason] += 1
    return None, None


# The translator and torch's tracing machinery are not thread-safe: one compilation at a time.
# A thread that finds it taken does not wait (see `_decide`).
_compile_lock = threading.Lock()


def _decide(fn: types.FunctionType, args: tuple[Any, ...]) -> tuple[Any, Any]:
    from framejit.guards import cache_for

    if not _compile_lock.acquire(blocking=False):
        # Another thread is compiling, and it may be waiting for this one (a thread it started
        # waits to run its first frame): never block here. The skip rules need no lock; any
        # other frame runs as it is this time and is asked about again on its next call.
        why = skipped_by_rule(fn)
        if why:
            return _skip(why)
        return getattr(_eval_frame, "UNDECIDED", cache_for(fn.__code__)), None
    try:
        return _decide_locked(fn, args)
    finally:
        _compile_lock.release()


def _decide_locked(fn: types.FunctionType, args: tuple[Any, ...]) -> tuple[Any, Any]:
    from framejit.backend import lookup_backend
    from framejit.frontend.convert import compile_frame
    from framejit.guards import cache_for

    code = fn.__code__
    cache = cache_for(code)
    if cache.eager:
        return _skip(cache.eager_reason or "eager")
    if not cache.entries:
        why = skipped_by_rule(fn)
        if why:
            return _skip(why)
        if not any(_tensorish(a) for a in args):
            return _skip("no tensor or module argument")
    if user_mode_active() or inside_torch_dispatch():
        return cache, None  # before any guard reads a tensor: this call runs as it is
    if cache.entries:
        entry = cache.lookup(fn, args)  # another thread may have compiled it meanwhile
        if entry is not None:
            return cache, entry
        summary.recompiles += 1
        if cache.record_miss(fn, args, code.co_qualname, warn=False):
            return _skip("recompile limit")
    settings = current_settings()
    backend = lookup_backend(settings.backend if settings.backend is not None else config.backend)
    start = time.perf_counter()
    graphed = (settings.mode or config.mode) in ("reduce-overhead", "max-autotune")
    result = compile_frame(
        fn,
        args,
        backend,
        False,
        _run_hooked,
        dynamic=config.dynamic,
        cache=cache,
        share_modules=config.share_module_graphs and not graphed,
    )
    summary.compile_seconds += time.perf_counter() - start
    entry = result.entry
    if not result.graphs and not result.break_reasons and not cache.entries:
        return _skip("no tensor work")
    summary.frames_compiled += 1
    summary.graphs += len(result.graphs)
    for reason in result.break_reasons:
        summary.breaks[_reason_text(reason)] += 1
    if entry.code is not code:
        _eval_frame.set_code_state(entry.code, None)  # never hook framejit's own code
    cache.add(entry, fn, args)
    return cache, entry


def _run_hooked(target: Any) -> Any:
    """What transformed code calls at a graph break in whole-script mode: the resume function
    (or the callee the break runs for real) itself. Its frame comes back through this hook,
    which compiles it on its own, so no wrapper is needed."""
    return target


def _reason_text(reason: Any) -> str:
    describe = getattr(reason, "describe", None)
    return describe() if callable(describe) else str(reason)

"""Whole-script mode and `framejit.enabled`: the frame hook switched on for a region or a process.

Three ways in, one mechanism (`framejit.frontend.hook`):

- `with framejit.enabled(backend=..., mode=...):` hooks the functions called in the body, on
  this thread only.
- `python -m framejit run script.py args...` runs a script with the hook on for every thread.
- `FRAMEJIT=1 python script.py`: `framejit.pth`, installed beside the packages, calls
  `start_from_pth()` at interpreter start-up; without the variable it does nothing at all.

Invariants: `FRAMEJIT_DISABLE=1` (`config.disable`) wins over all three: nothing is hooked.
When the C extension is missing, the context manager and `run` raise RuntimeError saying why,
and `FRAMEJIT=1` stops the interpreter with that message instead of silently running uncompiled.
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import importlib.machinery
import io
import os
import sys
import types
from collections.abc import Iterator
from typing import Any

from framejit import logs
from framejit.config import config

_started = False


def _settings(backend: Any, mode: str | None) -> Any:
    from framejit.api import _check_options
    from framejit.frontend import hook

    backend = config.backend if backend is None else backend
    mode = config.mode if mode is None else mode
    _check_options(backend, mode, False, None, None)
    return hook.Settings(backend, mode)


@contextlib.contextmanager
def enabled(backend: Any = None, mode: str | None = None) -> Iterator[None]:
    """Compile the functions called inside the `with` body (this thread only).

    Frames already running (the one containing the `with`) are not compiled; functions they call
    are. Raises RuntimeError if the frame hook is not built for this Python.
    """
    if config.disable:
        yield
        return
    from framejit.frontend import hook

    settings = _settings(backend, mode)
    with hook.thread_enabled(settings):
        yield


def start(backend: Any = None, mode: str | None = None) -> bool:
    """Switch whole-script mode on for the rest of the process; False if FRAMEJIT_DISABLE=1."""
    global _started
    if config.disable:
        return False
    from framejit.frontend import hook

    hook.set_global(True, _settings(backend, mode))
    if not _started:
        _started = True
        atexit.register(_at_exit)
    return True


def stop() -> None:
    from framejit.frontend import hook

    if hook.available():
        hook.set_global(False)


def _at_exit() -> None:
    from framejit.frontend import hook

    if hook.available():
        hook.set_global(False)
    if logs.enabled("summary"):
        logs.artifact("summary", hook.summary.render())


def start_from_pth() -> None:
    """Called by framejit.pth when FRAMEJIT=1: start, or stop the interpreter saying why not."""
    try:
        start()
    except RuntimeError as exc:
        raise SystemExit(
            f"framejit: FRAMEJIT=1 but whole-script mode cannot start: {exc}"
        ) from None


def run_script(path: str, args: list[str], backend: Any = None, mode: str | None = None) -> None:
    """Run the script at `path` as `__main__`, hook on, as `python path args...` runs it:
    `sys.argv == [path, *args]`, the script's folder (not the current one) as `sys.path[0]`,
    an absolute `__file__`, `__builtins__` the builtins module, `__package__` and `__spec__`
    None. `sys.argv`, `sys.path[0]` and `sys.modules["__main__"]` are put back afterwards."""
    start(backend, mode)
    full = os.path.abspath(path)
    with io.open_code(full) as f:
        source = f.read()
    code = compile(source, full, "exec", dont_inherit=True)
    main = types.ModuleType("__main__")
    main.__dict__.update(
        __file__=full,
        __cached__=None,
        __loader__=importlib.machinery.SourceFileLoader("__main__", full),
        __spec__=None,
        __package__=None,
        __builtins__=builtins,
    )
    folder = os.path.dirname(full)
    saved = sys.argv, sys.modules.get("__main__"), sys.path[0] if sys.path else None
    sys.argv = [path, *args]
    if sys.path:
        sys.path[0] = folder  # where python puts the script's folder; `-m` put the cwd there
    else:
        sys.path.insert(0, folder)
    sys.modules["__main__"] = main
    try:
        exec(code, main.__dict__)  # noqa: S102 - running the user's script is the point
    finally:
        sys.argv = saved[0]
        if saved[1] is not None:
            sys.modules["__main__"] = saved[1]
        if saved[2] is not None and folder in sys.path:
            sys.path[sys.path.index(folder)] = saved[2]


def script_traceback(tb: types.TracebackType | None, path: str) -> types.TracebackType | None:
    """`tb` from the script's own first frame on, as python shows an uncaught exception of a
    script (framejit's and runpy's frames above it left out); None when the script never ran
    (a SyntaxError, which names its file and line itself)."""
    full = os.path.abspath(path)
    while tb is not None and tb.tb_frame.f_code.co_filename != full:
        tb = tb.tb_next
    return tb

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
import contextlib
import os
import runpy
import sys
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
    """Run the script at `path` as `__main__` with `sys.argv = [path, *args]`, hook on."""
    start(backend, mode)
    sys.argv = [path, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    runpy.run_path(path, run_name="__main__")

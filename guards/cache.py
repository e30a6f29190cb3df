"""The per-code cache: compiled entries for one code object, most recently used first.

Invariants:
- An entry runs only if its guard check passed for the current arguments.
- After `config.recompile_limit` entries a code object stops compiling: it is marked `eager`,
  a warning names the reasons for the recompiles once, and it runs uncompiled from then on.
- `clear_caches()` drops every entry everywhere (`framejit.reset()`).
"""

from __future__ import annotations

import sys
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from types import CodeType
from typing import Any

from framejit.guards.compile import CompiledGuards


@dataclass
class CacheEntry:
    guards: CompiledGuards
    fn: Callable[..., Any]  # the transformed function: same signature as the original
    code: CodeType  # its code object
    graphs: list[Any] = field(default_factory=list)  # what the frontend captured (explain/logs)
    break_reasons: list[Any] = field(default_factory=list)


@dataclass(eq=False)
class CodeCache:
    name: str  # "qualname (file:line)"; the code object itself is only the weak key
    entries: list[CacheEntry] = field(default_factory=list)
    # Set when this code must run uncompiled from now on (limit reached or nothing to compile).
    eager: bool = False
    eager_reason: str = ""
    recompile_reasons: list[str] = field(default_factory=list)
    # What the frontend remembers across compiles of this code (sizes seen per input, for
    # automatic dynamic shapes: frontend/dynamic.py); opaque to the guards.
    shape_history: Any = None

    def lookup(self, fn: Any, args: tuple[Any, ...]) -> CacheEntry | None:
        entries = self.entries
        for i, entry in enumerate(entries):
            if entry.guards.check(fn, *args):
                if i:
                    entries.insert(0, entries.pop(i))
                return entry
        return None

    def failures(self, fn: Any, args: tuple[Any, ...]) -> list[str]:
        """Why each entry rejected these arguments, most recently used entry first."""
        return [e.guards.why_failed(fn, *args) or "(guard holds)" for e in self.entries]

    def record_miss(self, fn: Any, args: tuple[Any, ...], qualname: str, warn: bool = True) -> bool:
        """Log why every entry rejected these arguments (`recompiles`); True when
        `config.recompile_limit` is reached: the code is then marked eager, with one warning
        (`warn`; else, in whole-script mode, where no one asked for this function to be
        compiled, one line of the `recompiles` log)."""
        from framejit import logs
        from framejit.config import config

        reasons = self.failures(fn, args)
        reason = reasons[0] if reasons else "?"
        self.recompile_reasons.append(reason)
        logs.artifact("recompiles", lambda: f"recompiling {qualname}: {reason}")
        if len(self.entries) < config.recompile_limit:
            return False
        self.mark_eager(f"recompile_limit ({config.recompile_limit}) reached")
        message = (
            f"framejit: {qualname} recompiled {len(self.entries)} times "
            f"(config.recompile_limit={config.recompile_limit}); running it eagerly from now "
            f"on. Reasons: " + "; ".join(self.recompile_reasons[-3:])
        )
        if not warn:
            logs.artifact("recompiles", lambda: message)
            return True
        try:
            warnings.warn(message, stacklevel=_user_level())
        except Warning:  # `-W error`: the program must not fail because framejit is on
            logs.get_logger("guards").warning("%s", message)
        return True

    def add(self, entry: CacheEntry, fn: Any = None, args: tuple[Any, ...] | None = None) -> None:
        """Keep `entry`, newest first. With the frame's function and arguments, first check
        that its guards hold for the arguments they were built from: one that does not (a
        guard written wrong: a name its function cannot see, an expression that raises) would
        make every later call recompile until the limit. That is framejit's bug, never the
        user's: said in the `guards` log, raised under `config.raise_internal_errors`."""
        if args is not None and not entry.guards.check(fn, *args):
            from framejit import logs
            from framejit.config import config

            message = (
                f"framejit internal error: the guards of {self.name} do not hold for the "
                f"arguments they were built from: {entry.guards.why_failed(fn, *args)}"
            )
            if config.raise_internal_errors:
                raise AssertionError(message)
            logs.get_logger("guards").warning("%s", message)
        self.entries.insert(0, entry)

    def mark_eager(self, reason: str) -> None:
        self.eager = True
        self.eager_reason = reason


def _user_level() -> int:
    """The `stacklevel` that blames the innermost frame outside framejit for a warning given
    by this module's caller: the line that called the jitted function, or, for a resume
    function, the user's frame whose transformed code resumed it."""
    frame, level = sys._getframe(2), 2
    while frame is not None:
        name = str(frame.f_globals.get("__name__", ""))
        if name != "framejit" and not name.startswith("framejit."):
            return level
        frame, level = frame.f_back, level + 1
    return 2


_caches: weakref.WeakKeyDictionary[CodeType, CodeCache] = weakref.WeakKeyDictionary()


def cache_for(code: CodeType) -> CodeCache:
    cache = _caches.get(code)
    if cache is None:
        cache = _caches[code] = CodeCache(
            f"{code.co_qualname} ({code.co_filename}:{code.co_firstlineno})"
        )
    return cache


def clear_caches() -> None:
    for cache in list(_caches.values()):
        cache.entries.clear()
        cache.eager = False
        cache.eager_reason = ""
        cache.recompile_reasons.clear()
        cache.shape_history = None
    _caches.clear()

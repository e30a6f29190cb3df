"""Guards: the facts a compiled entry relies on, compiled into one fast check per entry.

Public pieces: `Guard`, `GuardKind`, `TensorMeta` (guard.py), `compile_guards` (compile.py), and
the per-code cache `CodeCache` / `cache_for` (cache.py). This package never imports the
translator; it speaks only in Sources.
"""

from framejit.guards.cache import CacheEntry, CodeCache, cache_for, clear_caches
from framejit.guards.compile import CompiledGuards, compile_guards
from framejit.guards.guard import GlobalState, Guard, GuardKind, TensorMeta

__all__ = [
    "CacheEntry",
    "CodeCache",
    "CompiledGuards",
    "GlobalState",
    "Guard",
    "GuardKind",
    "TensorMeta",
    "cache_for",
    "clear_caches",
    "compile_guards",
]

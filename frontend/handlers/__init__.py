"""The opcode handler registry: one handler per opcode, registered by name.

`@handler("LOAD_FAST")` registers a function `(tx, inst) -> None`. Registration checks the name
exists in `dis.opmap` on the Python versions the handler claims (`since=`/`until=`), and that no
opcode is registered twice. Opcodes the translator deliberately does not capture are listed in
UNSUPPORTED with the reason; a test checks that `dis.opmap` minus both sets is empty.
"""

from __future__ import annotations

import dis
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from framejit.frontend import versions

if TYPE_CHECKING:
    from framejit.frontend.translator import Translator

Handler = Callable[["Translator", Any], None]
HANDLERS: dict[str, Handler] = {}


def handler(
    *names: str, since: tuple[int, int] | None = None, until: tuple[int, int] | None = None
) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        if not versions.active(since, until):
            return fn
        for name in names:
            if name not in dis.opmap:
                raise AssertionError(f"{name} is not an opcode on Python {versions.PY}")
            if name in HANDLERS:
                raise AssertionError(f"{name} registered twice")
            HANDLERS[name] = fn
        return fn

    return register


# Opcodes the translator does not capture, with the reason. Each is a graph break where the
# instruction can run for real (breaks.BREAK_EFFECTS knows its stack effect); otherwise the
# frame runs eagerly.
_UNSUPPORTED_ALL: dict[str, str] = {
    "BEFORE_ASYNC_WITH": "async code runs eagerly",
    "CHECK_EG_MATCH": "exception groups are not captured",
    "SETUP_ANNOTATIONS": "annotations at module level",
    "LOAD_BUILD_CLASS": "defining a class inside a function",
    "IMPORT_STAR": "import *",
    "GET_AWAITABLE": "coroutines run eagerly",
    "GET_AITER": "async iteration runs eagerly",
    "GET_ANEXT": "async iteration runs eagerly",
    "END_ASYNC_FOR": "async iteration runs eagerly",
    "ASYNC_GEN_WRAP": "async generators run eagerly",
    "CLEANUP_THROW": "throwing into a generator is not captured",
    "PRINT_EXPR": "interactive printing",
    "DELETE_GLOBAL": "deleting a global is a side effect",
    "DELETE_DEREF": "deleting a closure variable",
    "DELETE_NAME": "name-based code (class bodies, exec)",
    "LOAD_NAME": "name-based code (class bodies, exec)",
    "STORE_NAME": "name-based code (class bodies, exec)",
    "LOAD_CLASSDEREF": "class bodies",
    "LOAD_FROM_DICT_OR_DEREF": "class bodies",
    "LOAD_FROM_DICT_OR_GLOBALS": "class bodies",
    "LOAD_LOCALS": "class bodies",
    "COPY_DICT_WITHOUT_KEYS": "`match` statements are not captured",
    "INSTRUMENTED_LINE": "monitoring instrumentation",
    "INTERPRETER_EXIT": "interpreter internal",
    "ENTER_EXECUTOR": "interpreter internal",
    "PREP_RERAISE_STAR": "exception groups (except*) are not captured",
    "RESERVED": "interpreter internal (never in real bytecode)",
}


def unsupported_opcodes() -> dict[str, str]:
    """Every opcode of this Python that has no handler, with the reason it is not captured."""
    out = {n: r for n, r in _UNSUPPORTED_ALL.items() if n in dis.opmap and n not in HANDLERS}
    for name in dis.opmap:
        if name.startswith("INSTRUMENTED_") and name not in HANDLERS:
            out[name] = "monitoring instrumentation (sys.monitoring)"
    return out


def _load_all() -> None:
    from framejit.frontend.handlers import (  # noqa: F401
        binary,
        calls,
        containers,
        contexts,
        jumps,
        load_store,
        match,
        stack,
    )


_load_all()

"""Everything that differs between the CPython versions framejit supports, in one place.

Supported: 3.11 and 3.12. Importing framejit on any other version fails here, loudly, instead
of mis-translating bytecode later. Handlers declare the versions they exist for at registration
(`since=`/`until=`); what remains - how a call, a method load or an attribute load is spelled
when generating bytecode, and where a loop's exhausted `FOR_ITER` goes - lives below.
"""

from __future__ import annotations

import sys
from typing import Any

from bytecode import Instr

PY: tuple[int, int] = sys.version_info[:2]
SUPPORTED: tuple[tuple[int, int], ...] = ((3, 11), (3, 12))

if PY not in SUPPORTED:
    raise ImportError(
        f"framejit supports CPython {', '.join(f'{a}.{b}' for a, b in SUPPORTED)}; "
        f"this is {sys.version.split()[0]}"
    )


def active(since: tuple[int, int] | None, until: tuple[int, int] | None) -> bool:
    """Whether a handler declared for [since, until] (inclusive) exists on this Python."""
    return (since is None or since <= PY) and (until is None or until >= PY)


# --- reading bytecode -------------------------------------------------------------------------


def load_attr_is_method(inst: Any) -> bool:
    """3.12 folds LOAD_METHOD into LOAD_ATTR: the low bit of the oparg asks for a method."""
    return PY >= (3, 12) and inst.opname == "LOAD_ATTR" and bool(inst.arg & 1)


def for_iter_exit_offset(inst: Any, next_offset: dict[int, int]) -> int:
    """Where an exhausted FOR_ITER continues, after the iterator is popped.

    3.11 jumps straight to its target. 3.12 targets the END_FOR that follows the loop and the
    interpreter skips over it.
    """
    if PY >= (3, 12):
        return next_offset[inst.argval]
    return inst.argval


# --- writing bytecode -------------------------------------------------------------------------


def emit_call(nargs: int, kw_names: tuple[str, ...] = ()) -> list[Instr]:
    """Call the callable below `nargs` arguments (with NULL or self beneath it)."""
    out: list[Instr] = []
    if kw_names:
        out.append(Instr("KW_NAMES", kw_names))
    if PY < (3, 12):
        out.append(Instr("PRECALL", nargs))
    out.append(Instr("CALL", nargs))
    return out


def emit_load_attr(name: str) -> Instr:
    return Instr("LOAD_ATTR", (False, name)) if PY >= (3, 12) else Instr("LOAD_ATTR", name)


def emit_load_method(name: str) -> Instr:
    return Instr("LOAD_ATTR", (True, name)) if PY >= (3, 12) else Instr("LOAD_METHOD", name)


def emit_load_global(name: str, push_null: bool = False) -> Instr:
    return Instr("LOAD_GLOBAL", (push_null, name))


def emit_pop_jump_if(truth: bool, target: Any) -> Instr:
    """Pop the top of the stack and jump forward to `target` if its truth is `truth`."""
    if PY >= (3, 12):
        return Instr("POP_JUMP_IF_TRUE" if truth else "POP_JUMP_IF_FALSE", target)
    return Instr("POP_JUMP_FORWARD_IF_TRUE" if truth else "POP_JUMP_FORWARD_IF_FALSE", target)

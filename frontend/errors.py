"""Why the translator stopped: registered, coded reasons with hints and the user's file:line.

`Unsupported` is the only exception the translator raises on purpose. Anything else escaping
translation is an internal error; `compile_frame` turns both into "run this frame eagerly" (or
an error under `fullgraph=True`) and logs them, so a user's program never fails because of
framejit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# code -> hint shown to users. Every reason the translator can give is listed here.
REASONS: dict[str, str] = {
    "unsupported_opcode": "this bytecode instruction is not captured yet",
    "data_dependent": "the result depends on tensor values; framejit captures only shapes",
    "dynamic_shape_op": "the op's output shape depends on tensor values",
    "symbolic_sizes": "this op does not support symbolic sizes (dynamic shapes)",
    "unsupported_call": "calls to this function are not captured",
    "unsupported_builtin": "this builtin is not captured with these arguments",
    "side_effect": "mutating Python state seen outside the frame is not captured yet",
    "unsupported_object": "values of this type are not understood by the translator",
    "unsupported_attr": "this attribute is not captured",
    "module_hooks": "modules with forward/backward hooks are called eagerly",
    "recursion_limit": "user functions nest deeper than config.inline_depth_limit",
    "unsupported_control_flow": "this control flow is not captured yet",
    "unsupported_context": "`with` blocks over this context manager are not captured yet",
    "reconstruct": "this value cannot be rebuilt after the graph runs",
    "generator": "generator and coroutine code runs eagerly",
    "exception": "raising or handling exceptions is not captured yet",
    "tensor_op_failed": "the op failed on the trace's FakeTensors; it runs as Python, as in eager",
    "debugger": "a debugger is entered here: the whole frame runs as Python, with real locals",
}


@dataclass(frozen=True)
class Location:
    filename: str
    lineno: int
    function: str
    line: str = ""

    def __str__(self) -> str:
        text = f"{self.filename}:{self.lineno} in {self.function}"
        return f"{text}: `{self.line}`" if self.line else text


# Exceptions the translator raises with Python's meaning (a missing key, attribute or index, a
# wrong argument): a traced `except` clause may catch them. Anything else ends the trace.
_CATCHABLE: dict[str, type[BaseException]] = {
    cls.__name__: cls
    for cls in (
        KeyError,
        IndexError,
        LookupError,
        AttributeError,
        StopIteration,
        TypeError,
        ValueError,
        ZeroDivisionError,
    )
}


class Unsupported(Exception):
    """The translator cannot capture `construct`; `code` is a key of REASONS."""

    def __init__(self, code: str, construct: str, detail: str = "") -> None:
        if code not in REASONS:
            raise ValueError(f"unregistered unsupported reason {code!r}")
        self.code = code
        self.construct = construct
        self.detail = detail
        self.stack: list[Location] = []  # innermost user frame last; filled by the translator
        # guards on the facts that make this a break (an optimizer's state not created yet):
        # kept when the trace is rewound to the break, so the entry recompiles once they change
        self.kept_guards: list[object] = []
        super().__init__(construct)

    @classmethod
    def raised(cls, construct: str, exc: BaseException) -> Unsupported:
        """The real code raises `exc` here (a fold of constants failed as it will for real):
        its type and arguments are known, so an `except ... as err:` of a traced frame can
        catch it and read them."""
        err = cls("exception", construct, f"raises {exc!r}")
        err.exc_type = type(exc)
        err.exc_args = exc.args
        return err

    def python_exception(self) -> type[BaseException] | None:
        """For an `exception` reason: the Python exception the real code raises here, when the
        translator knows it (an `except` clause of a traced frame can then catch it)."""
        if self.code != "exception" or getattr(self, "cleanup_skipped", False):
            return None
        explicit = getattr(self, "exc_type", None)
        if explicit is not None:
            return explicit
        for text in (self.detail, self.construct):
            for name in re.findall(r"\b([A-Z][A-Za-z]*(?:Error|Iteration))\b", text):
                if name in _CATCHABLE:
                    return _CATCHABLE[name]
        return None

    @property
    def hint(self) -> str:
        return REASONS[self.code]

    @property
    def location(self) -> Location | None:
        return self.stack[-1] if self.stack else None

    def __str__(self) -> str:
        where = f" — {self.location}" if self.location else ""
        detail = f" ({self.detail})" if self.detail else ""
        return f"`{self.construct}` is not captured: {self.hint}{detail}{where}"

    def describe(self) -> str:
        """Multi-line form with the user's stack, innermost last."""
        lines = [str(self)]
        if len(self.stack) > 1:
            lines.append("  user stack:")
            lines += [f"    {loc}" for loc in self.stack]
        return "\n".join(lines)


class FullGraphError(RuntimeError):
    """`fullgraph=True` and the translator could not capture the whole function."""


class FrameRunsAsPython(Unsupported):
    """Not a graph break but the whole frame run as Python: `breakpoint()` or `pdb.set_trace()`
    must find the frame's real locals, editable, and step through the user's own lines."""


# (module, name) of the calls that enter a debugger
DEBUGGER_ENTRIES = frozenset(
    {
        ("builtins", "breakpoint"),
        ("pdb", "set_trace"),
        ("pdb", "post_mortem"),
        ("pdb", "pm"),
        ("ipdb", "set_trace"),
        ("ipdb", "post_mortem"),
        ("code", "interact"),
        ("IPython.terminal.embed", "embed"),
    }
)


def enters_debugger(fn: object) -> bool:
    name = getattr(fn, "__name__", None)
    if not isinstance(name, str):
        return False
    return (getattr(fn, "__module__", None) or "builtins", name) in DEBUGGER_ENTRIES

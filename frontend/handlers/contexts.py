"""`with` blocks over context managers the translator understands (variables/contexts.py).

BEFORE_WITH enters the context and pushes its exit and the `__enter__` result; the normal end
of the block calls the exit with three Nones (CALL 2 on 3.11 and 3.12). Contexts: grad mode,
autocast, and objects whose class writes `__enter__`/`__exit__` in Python (inlined). When the
block raises an exception the translator knows (Translator._catch), its handler is traced:
WITH_EXCEPT_START calls the exit with the exception's class, the exception and a traceback
that exists only at run time; a true result suppresses the exception (`contextlib.suppress`),
a false one re-raises it (RERAISE) to the next handler out.
"""

from __future__ import annotations

import types
from typing import TYPE_CHECKING, Any

from framejit.frontend.errors import Unsupported
from framejit.frontend.handlers import handler
from framejit.frontend.variables.base import ExceptionVariable
from framejit.frontend.variables.contexts import (
    AutocastExitVariable,
    AutocastVariable,
    GradModeVariable,
    InferenceModeVariable,
    WithExitVariable,
)

if TYPE_CHECKING:
    from framejit.frontend.translator import Translator


def _python_context(ctx: Any) -> bool:
    """An object (made in the frame or reached through a Source) whose class defines
    `__enter__` and `__exit__` as Python functions, outside torch."""
    from framejit.frontend.variables.objects import (
        NewObjectVariable,
        UserObjectVariable,
        _python_method_of,
    )

    if not isinstance(ctx, (NewObjectVariable, UserObjectVariable)):
        return False
    cls = ctx.python_type()
    for name in ("__enter__", "__exit__"):
        fn = _python_method_of(cls, name)
        if not isinstance(fn, types.FunctionType):
            return False
        module = fn.__module__ or ""
        if module == "torch" or module.startswith("torch."):
            return False
    return True


@handler("BEFORE_WITH")
def before_with(tx: Translator, inst: Any) -> None:
    ctx = tx.pop()
    if isinstance(ctx, GradModeVariable):
        exit_vt: Any = WithExitVariable(ctx)
    elif isinstance(ctx, (AutocastVariable, InferenceModeVariable)):
        exit_vt = AutocastExitVariable(ctx)
    elif _python_context(ctx):
        # A class with `__enter__`/`__exit__` written in Python (`contextlib.nullcontext`, a
        # user's): both are inlined, the exit at the block's normal end (CALL 2 with Nones).
        exit_vt = ctx.getattr(tx, "__exit__")
        entered = ctx.getattr(tx, "__enter__").call(tx, [], {})
        tx.push(exit_vt)
        tx.push(entered)
        return
    else:
        raise Unsupported(
            "unsupported_context",
            f"`with` over a {ctx.type_name()}",
            "only grad-mode and autocast contexts and classes whose __enter__ and __exit__ are "
            "written in Python are captured in `with` blocks",
        )
    entered = ctx.enter(tx)
    tx.push(exit_vt)
    tx.push(entered)


@handler("WITH_EXCEPT_START")
def with_except_start(tx: Translator, inst: Any) -> None:
    # stack: exit, lasti, the exception handled before, the exception (PUSH_EXC_INFO)
    from framejit.frontend.variables.stdlib import TracebackVariable

    exc = tx.stack[-1]
    if not isinstance(exc, ExceptionVariable):
        raise Unsupported(
            "unsupported_control_flow", "a `with` block's exit outside a traced raise"
        )
    exit_fn = tx.stack[-4]
    cls = tx.wrap_value(exc.exc_type, None)
    tx.push(exit_fn.call(tx, [cls, exc, TracebackVariable()], {}))

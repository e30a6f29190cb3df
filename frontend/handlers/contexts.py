"""`with` blocks over context managers the translator understands (variables/contexts.py).

BEFORE_WITH enters the context and pushes its exit and the `__enter__` result; the normal end
of the block calls the exit with three Nones (CALL 2 on 3.11 and 3.12). The exception paths of a
`with` block (PUSH_EXC_INFO, WITH_EXCEPT_START) are never reached while tracing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from framejit.frontend.errors import Unsupported
from framejit.frontend.handlers import handler
from framejit.frontend.variables.contexts import (
    AutocastExitVariable,
    AutocastVariable,
    GradModeVariable,
    WithExitVariable,
)

if TYPE_CHECKING:
    from framejit.frontend.translator import Translator


@handler("BEFORE_WITH")
def before_with(tx: Translator, inst: Any) -> None:
    ctx = tx.pop()
    if isinstance(ctx, GradModeVariable):
        exit_vt: Any = WithExitVariable(ctx)
    elif isinstance(ctx, AutocastVariable):
        exit_vt = AutocastExitVariable(ctx)
    else:
        raise Unsupported(
            "unsupported_context",
            f"`with` over a {ctx.type_name()}",
            "only grad-mode and autocast contexts are captured in `with` blocks",
        )
    entered = ctx.enter(tx)
    tx.push(exit_vt)
    tx.push(entered)

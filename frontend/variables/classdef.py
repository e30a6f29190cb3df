"""`class` statements inside a traced function.

A class body is a small program of its own (LOAD_NAME/STORE_NAME into a namespace, then the
metaclass call), and the class it makes is a new object on every call. framejit does not build
it while tracing. LOAD_BUILD_CLASS and the call after it make an `UnbuiltClassVariable`, which
remembers the body function, the name and the bases:

- A class that is never used costs nothing: torch.masked's `_combine_input_and_mask` defines an
  autograd Function that only a MaskedTensor input would use, and a plain tensor's reduction is
  one graph.
- A class that is used (an attribute, a call, `isinstance`) is a graph break at that use. The
  code after the break builds the class for real, with `__build_class__` and the same body, just
  before the instruction that uses it: the same class a Python run would have made, one per call.

Building later than Python would is only allowed for a body with nothing to observe: it may
define functions (with constant defaults), apply `staticmethod`/`classmethod`/`property` and
store constants, and nothing else (no reads of names or cells whose value could change before
the build, no attribute reads, no other calls). Its bases must be classes whose metaclass and
`__init_subclass__` are Python's own or torch's (an autograd Function). Any other class
statement stays a graph break at LOAD_BUILD_CLASS.
"""

from __future__ import annotations

import abc
import builtins
import dis
import types
from typing import TYPE_CHECKING, Any

import torch
from framejit.frontend.errors import Unsupported
from framejit.frontend.variables.base import ConstantVariable, VariableTracker
from framejit.frontend.variables.functions import NestedFunctionVariable
from framejit.frontend.variables.objects import ClassVariable

if TYPE_CHECKING:
    from framejit.frontend.codegen import CodeGen
    from framejit.frontend.translator import Translator

Args = list[VariableTracker]
Kwargs = dict[str, VariableTracker]

# What a class body may do and still be built later than Python would build it.
_BODY_OPS = frozenset(
    {
        "RESUME", "NOP", "CACHE", "LOAD_NAME", "STORE_NAME", "LOAD_CONST", "MAKE_FUNCTION",
        "LOAD_CLOSURE", "BUILD_TUPLE", "BUILD_CONST_KEY_MAP", "PRECALL", "CALL", "PUSH_NULL",
        "COPY", "POP_TOP", "RETURN_VALUE", "RETURN_CONST", "COPY_FREE_VARS", "MAKE_CELL",
        "LOAD_LOCALS", "SET_FUNCTION_ATTRIBUTE", "KW_NAMES", "STORE_DEREF",
    }
)  # fmt: skip
# the only names a body may read: its own module name and the pure decorators
_BODY_NAMES = frozenset({"__name__", "staticmethod", "classmethod", "property"})
_METACLASSES = (type, abc.ABCMeta, torch.autograd.function.FunctionMeta)


def _from_python_or_torch(fn: Any) -> bool:
    fn = getattr(fn, "__func__", fn)
    if isinstance(fn, types.BuiltinFunctionType | types.BuiltinMethodType):
        return True
    module = getattr(fn, "__module__", "") or ""
    return module == "torch" or module.startswith("torch.")


def why_not_deferred(body: NestedFunctionVariable, bases: Args, f_globals: dict) -> str | None:
    """Why this class statement must run where Python runs it (None: building it later, at
    its first use, is the same)."""
    for inst in dis.get_instructions(body.code):
        if inst.opname not in _BODY_OPS:
            return f"its body runs `{inst.opname}`"
        if inst.opname == "LOAD_NAME" and (
            inst.argval not in _BODY_NAMES or inst.argval != "__name__" and inst.argval in f_globals
        ):
            return f"its body reads `{inst.argval}`"
        if inst.opname == "STORE_DEREF" and inst.argval != "__classcell__":
            return f"its body writes the closure variable `{inst.argval}`"
    for base in bases:
        if not isinstance(base, ClassVariable):
            return f"a base is a {base.type_name()}"
        cls = base.cls
        if type(cls) not in _METACLASSES:
            return f"the metaclass {type(cls).__qualname__} of {cls.__qualname__} runs code"
        if not _from_python_or_torch(cls.__init_subclass__):
            return f"{cls.__qualname__}.__init_subclass__ runs code"
    return None


class BuildClassVariable(VariableTracker):
    """What LOAD_BUILD_CLASS pushes: `__build_class__`, called with the body, name and bases."""

    def __repr__(self) -> str:
        return "BuildClass"

    def python_type(self) -> type:
        return types.BuiltinFunctionType

    def reconstruct(self, cg: CodeGen) -> None:
        cg.load_const(builtins.__build_class__)

    def call(self, tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker:
        if len(args) < 2 or not isinstance(args[0], NestedFunctionVariable) or kwargs:
            raise Unsupported("unsupported_opcode", "LOAD_BUILD_CLASS", "a class with keywords")
        body, name, bases = args[0], args[1], args[2:]
        label = name.as_constant() if name.is_constant() else "?"
        why = why_not_deferred(body, bases, body.f_globals)
        if why is not None:
            raise Unsupported(
                "unsupported_call",
                f"`class {label}` inside the function",
                f"the class statement runs as Python: {why}",
            )
        return UnbuiltClassVariable(body, name, list(bases))


class UnbuiltClassVariable(VariableTracker):
    """A class statement's class, not built yet. Any use of it is a graph break, after which
    the class is built for real (see the module docstring)."""

    def __init__(self, body: NestedFunctionVariable, name: VariableTracker, bases: Args) -> None:
        self.body = body
        self.name = name
        self.bases = bases
        self.source = None

    def __repr__(self) -> str:
        return f"UnbuiltClass({self.label})"

    @property
    def label(self) -> str:
        return str(self.name.as_constant()) if isinstance(self.name, ConstantVariable) else "?"

    def python_type(self) -> type:
        return type(self.bases[0].cls) if self.bases else type

    def reconstruct(self, cg: CodeGen) -> None:
        def arguments() -> None:
            cg.reconstruct(self.body)
            cg.reconstruct(self.name)
            for base in self.bases:
                cg.reconstruct(base)

        cg.call_const(builtins.__build_class__, arguments, 2 + len(self.bases))

    def _used(self, what: str) -> Unsupported:
        return Unsupported(
            "unsupported_call",
            f"{what} of the class `{self.label}` defined in the function",
            "a class made inside the function is built for real where it is first used",
        )

    def getattr(self, tx: Translator, name: str) -> VariableTracker:
        raise self._used(f"`.{name}`")

    def call(self, tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker:
        raise self._used("a call")

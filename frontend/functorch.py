"""torch.func transforms: `vmap(f)(x)`, `grad(f)(x)`, `jacrev(f)(x)` and their nestings become
one graph op.

The transformed function is not traced by the translator (functorch's batching and autograd
levels are not Python it could follow). Like an autograd Function (autograd_function.py), the
call becomes a `call_function` node whose target applies the same transform to the same
function for real: on FakeTensors while tracing (for the output's metadata), on real tensors
when the eager backend runs the graph, and under make_fx in the AOT stage, which records the
batched or differentiated aten ops. The AOT backends therefore compile the transform's result
like any other graph (`vmap` of a pointwise function is a fused Triton kernel).

Allowed, because the target calls the function again at run time and, under the AOT backends,
only its tensor ops are kept:

- the function (and the functions it calls) passes `purity.scan`: no writes outside itself,
  no in-place tensor methods, globals that are modules, classes, torch or math functions;
- a function defined in the frame (a lambda over weights) may close over tensors and
  constants: the tensors become inputs of the node, and the target rebuilds the closure from
  them on each call, so vmap sees them unbatched and grad as constants, as in eager;
- a function from outside the frame has no closure, and is pinned by a guard on its identity;
- a module it calls is guarded whole (`_guard_tree`): the AOT stage bakes into the graph
  whatever the real forwards read, so every module of the tree, its settings and its entries
  are pinned, and what cannot be pinned is a break;
- the transform's own options (`in_dims`, `argnums`, `has_aux`, `randomness`, ...) and the
  call's non-tensor arguments are constants; tensor arguments may sit in tuples, lists and
  dicts (a dict of parameters for `grad`).

Anything else is a graph break at the call, which then runs as Python.
"""

from __future__ import annotations

import contextlib
import copy
import types
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch
from framejit.frontend.errors import Unsupported
from framejit.frontend.purity import scan, stateful_global
from framejit.frontend.variables.base import (
    CellVariable,
    ConstantVariable,
    VariableTracker,
)

if TYPE_CHECKING:
    from framejit.frontend.codegen import CodeGen
    from framejit.frontend.translator import Translator

Args = list[VariableTracker]
Kwargs = dict[str, VariableTracker]

TRANSFORMS = {
    torch.func.vmap: "vmap",
    torch.func.grad: "grad",
    torch.func.grad_and_value: "grad_and_value",
    torch.func.jacrev: "jacrev",
    torch.func.jacfwd: "jacfwd",
    torch.func.hessian: "hessian",
}


def transform(fn: Any) -> Any:
    """The modelled form of `torch.func.<fn>` (MODELED_FUNCTIONS)."""

    def modeled(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker:
        name = TRANSFORMS[fn]
        if not args:
            raise Unsupported("unsupported_call", f"torch.func.{name}()", "no function given")
        options = [*args[1:], *kwargs.values()]
        if not all(o.is_constant() for o in options):
            raise Unsupported(
                "unsupported_call", f"torch.func.{name}", "options that are not constants"
            )
        return TransformedVariable(
            fn,
            args[0],
            tuple(a.as_constant() for a in args[1:]),
            {k: v.as_constant() for k, v in kwargs.items()},
        )

    return modeled


class TransformedVariable(VariableTracker):
    """`torch.func.vmap(f, ...)` (or grad, jacrev, ...): calling it adds one graph op."""

    def __init__(
        self, transform: Any, fn: VariableTracker, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        self.transform = transform
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.source = None

    def __repr__(self) -> str:
        return f"{TRANSFORMS[self.transform]}({self.fn!r})"

    @property
    def label(self) -> str:
        return f"torch.func.{TRANSFORMS[self.transform]}({_name(self.fn)})"

    def python_type(self) -> type:
        return types.FunctionType

    def reconstruct(self, cg: CodeGen) -> None:
        """The real transformed function (a break with it on the stack, or returned)."""
        cg.call_const(
            _apply_transform,
            lambda: (
                cg.load_const(self.transform),
                cg.reconstruct(self.fn),
                cg.load_const(self.args),
                cg.load_const(self.kwargs),
            ),
            4,
        )

    def call(self, tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker:
        for a in [*args, *kwargs.values()]:
            _check_argument(a, self.label)
        lifted: list[VariableTracker] = []  # tensors the functions close over, in order
        modules = ModuleState()  # modules they call, with their parameters and buffers
        build = _builder(tx, self, lifted, self.label, modules)
        n_lifted = len(lifted)
        states = modules.tensors

        if not states:

            def target(*values: Any, **kw: Any) -> Any:
                values, kw = _mutable((values, kw))
                return build(values[:n_lifted])(*values[n_lifted:], **kw)

        else:

            def target(*values: Any, **kw: Any) -> Any:
                values, kw = _mutable((values, kw))
                with modules.swapped_in(values[n_lifted : n_lifted + len(states)]):
                    return build(values[:n_lifted])(*values[n_lifted + len(states) :], **kw)

        target.__name__ = target.__qualname__ = _op_name(self)
        return tx.output.call_op("call_function", target, [*lifted, *states, *args], kwargs)


class ModuleState:
    """The modules a transformed function calls (from its closure or its globals). Their
    parameters and buffers become inputs of the graph op, and the target swaps them into the
    modules for the call (as functional_call does), so the AOT stage traces them as inputs
    instead of baking their values in, and gradients reach them."""

    def __init__(self) -> None:
        self.modules: list[tuple[torch.nn.Module, list[str]]] = []
        self.tensors: list[VariableTracker] = []
        self._seen: set[int] = set()

    def add(self, tx: Translator, module_vt: VariableTracker, label: str) -> torch.nn.Module:
        from framejit.frontend.variables.objects import NNModuleVariable

        if not isinstance(module_vt, NNModuleVariable) or module_vt.source is None:
            raise Unsupported("unsupported_call", label, "a module made inside the function")
        module = module_vt.obj
        if id(module) in self._seen:
            return module
        _guard_tree(tx, module_vt, label)
        names: list[str] = []
        for method in ("named_parameters", "named_buffers"):
            for pair in module_vt.call_method(tx, method, [], {}).unpack(tx):
                name, tensor = pair.unpack(tx)
                names.append(name.as_constant())
                self.tensors.append(tensor)
        self.modules.append((module, names))
        self._seen.add(id(module))
        return module

    @contextlib.contextmanager
    def swapped_in(self, values: tuple[Any, ...]) -> Iterator[None]:
        from torch.nn.utils.stateless import _reparametrize_module

        with contextlib.ExitStack() as stack:
            at = 0
            for module, names in self.modules:
                given = dict(zip(names, values[at : at + len(names)]))
                at += len(names)
                stack.enter_context(_reparametrize_module(module, given, tie_weights=True))
            yield


# nn.Module's own bookkeeping in an instance dict (hook dicts, state-dict hooks, the dicts of
# parameters, buffers and submodules): `training`, and the rest of the dict, is the module's
_MODULE_BOOKKEEPING = frozenset(vars(torch.nn.Module())) - {"training"}


def _guard_tree(tx: Translator, module_vt: VariableTracker, label: str) -> None:
    """Pin everything of a module tree that a call of the real module may read: a transform's
    op calls it for real, and the AOT stage bakes what the forwards read into the graph. Each
    module is guarded by identity, `training` and class, with no hooks, the same class
    `forward` (and code), the same keys in its instance dict and in its dicts of parameters,
    buffers and submodules, each entry of those (a tensor's metadata, a None, a submodule, in
    turn), and each of its other attributes: a constant's value, a torch function's identity.
    Anything else it holds (a Python function that may shadow a method, a plain tensor, an
    object) makes the call a break. A forward whose bytecode has effects is a break too."""
    from framejit.frontend.inlining import no_global_module_hooks
    from framejit.frontend.sources import AttrSource, ItemSource, TypeSource
    from framejit.frontend.variables.builder import _guard
    from framejit.frontend.variables.objects import NNModuleVariable, _plain_constant
    from framejit.frontend.variables.torch_rules import is_torch_callable
    from framejit.guards import GuardKind

    no_global_module_hooks(tx.output)
    seen: set[int] = set()
    stack = [module_vt]
    while stack:
        vt = stack.pop()
        if not isinstance(vt, NNModuleVariable) or vt.source is None:
            raise Unsupported("unsupported_call", label, "a submodule not tracked")
        vt.pin(tx, label)  # its state is swapped in as this instance's
        sub, src = vt.obj, vt.source
        if id(sub) in seen:
            continue
        seen.add(id(sub))
        name = type(sub).__name__
        if sub._forward_hooks or sub._forward_pre_hooks or sub._backward_hooks:
            raise Unsupported("unsupported_call", label, f"{name} has hooks")
        _guard(tx, src, GuardKind.MODULE_NO_HOOKS, None)
        forward = type(sub).forward
        why = scan(forward) if isinstance(forward, types.FunctionType) else "no forward"
        if why is not None:
            raise Unsupported("unsupported_call", label, f"the module's forward: {why}")
        _guard(tx, AttrSource(TypeSource(src), "forward"), GuardKind.ID_MATCH, forward)
        code = AttrSource(AttrSource(TypeSource(src), "forward"), "__code__")
        _guard(tx, code, GuardKind.ID_MATCH, forward.__code__)
        state = vars(sub)
        _guard(tx, AttrSource(src, "__dict__"), GuardKind.DICT_KEYS, tuple(state))
        for attr, value in state.items():
            if attr in _MODULE_BOOKKEEPING or attr == "training":
                continue
            where = AttrSource(src, attr)
            if _plain_constant(value):
                _guard(tx, where, GuardKind.CONSTANT_MATCH, copy.deepcopy(value))
            elif is_torch_callable(value) or isinstance(value, (torch.dtype, torch.device)):
                _guard(tx, where, GuardKind.ID_MATCH, value)
            else:
                what = type(value).__name__
                raise Unsupported("unsupported_call", label, f"{name}.{attr} holds a {what}")
        for attr in ("_parameters", "_buffers", "_modules"):
            entries = getattr(sub, attr)
            where = AttrSource(src, attr)
            _guard(tx, where, GuardKind.DICT_KEYS, tuple(entries))
            for key, value in entries.items():
                if value is None:
                    _guard(tx, ItemSource(where, key), GuardKind.CONSTANT_MATCH, None)
                elif attr == "_modules":
                    stack.append(tx.wrap_source(ItemSource(where, key)))
                else:  # its metadata, and which other entries are the same tensor
                    tx.wrap_source(ItemSource(where, key))


def _apply_transform(transform: Any, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return transform(fn, *args, **kwargs)


def _name(fn: VariableTracker) -> str:
    if isinstance(fn, TransformedVariable):
        return f"{TRANSFORMS[fn.transform]}({_name(fn.fn)})"
    code = getattr(fn, "code", None) or getattr(getattr(fn, "fn", None), "__code__", None)
    return code.co_name if code is not None else fn.type_name()


def _op_name(vt: TransformedVariable) -> str:
    inner = vt.fn
    parts = [TRANSFORMS[vt.transform]]
    while isinstance(inner, TransformedVariable):
        parts.append(TRANSFORMS[inner.transform])
        inner = inner.fn
    name = _name(inner).replace("<lambda>", "lambda")
    return "_".join([*parts, "of", name if name.isidentifier() else "fn"])


def _check_argument(vt: VariableTracker, label: str) -> None:
    from framejit.frontend.variables.containers import DictVariable, ListVariable, TupleVariable
    from framejit.frontend.variables.tensor import TensorVariable

    if isinstance(vt, TensorVariable) or vt.is_constant():
        return
    if isinstance(vt, (TupleVariable, ListVariable)):
        for item in vt.items:
            _check_argument(item, label)
        return
    if isinstance(vt, DictVariable):
        for item in vt.items.values():
            _check_argument(item, label)
        return
    raise Unsupported("unsupported_call", label, f"an argument of type {vt.type_name()}")


def _builder(
    tx: Translator, vt: VariableTracker, lifted: Args, label: str, modules: ModuleState
) -> Any:
    """A function of the lifted tensors' run-time values that returns the real callable `vt`
    stands for; appends to `lifted` the tensors its closures need, and to `modules` the
    modules it calls."""
    from framejit.frontend.sources import AttrSource, ItemSource
    from framejit.frontend.variables.builder import CONSTANT_TYPES, _guard
    from framejit.frontend.variables.functions import (
        NestedFunctionVariable,
        TorchFunctionVariable,
        UserFunctionVariable,
    )
    from framejit.guards import GuardKind

    if isinstance(vt, TransformedVariable):
        inner = _builder(tx, vt.fn, lifted, label, modules)
        transform, args, kwargs = vt.transform, vt.args, vt.kwargs
        return lambda values: transform(inner(values), *args, **kwargs)
    if isinstance(vt, TorchFunctionVariable):  # `jacrev(torch.sin)`
        op = vt.fn
        return lambda values: op
    if isinstance(vt, UserFunctionVariable):
        fn = vt.fn
        _pure(tx, fn, label, modules)
        if vt.source is not None:  # the op holds this very function: pin it
            _guard(tx, vt.source, GuardKind.ID_MATCH, fn)
        elif not _fixed_function(fn) or fn.__closure__:
            raise Unsupported("unsupported_call", label, f"{fn.__qualname__} has no source")
        if not fn.__closure__:
            return lambda values: fn
        # a helper defined inside another function: its cells are read (and guarded) through
        # the function, tensors passed in and modules' state swapped in, as for a lambda
        if not all(type(d) in CONSTANT_TYPES for d in fn.__defaults__ or ()):
            raise Unsupported("unsupported_call", label, "defaults that are not constants")
        closure = AttrSource(vt.source, "__closure__")
        contents = []
        for i in range(len(fn.__closure__)):
            try:
                contents.append(tx.wrap_source(AttrSource(ItemSource(closure, i), "cell_contents")))
            except ValueError:  # an empty cell
                raise Unsupported("unsupported_call", label, "an empty closure cell") from None
        return _rebuilt(tx, fn.__code__, fn.__globals__, fn.__qualname__, fn.__defaults__,
                        contents, lifted, label, modules, fn.__kwdefaults__)  # fmt: skip
    if isinstance(vt, NestedFunctionVariable):
        if vt.kwdefaults or not all(d.is_constant() for d in vt.defaults):
            raise Unsupported("unsupported_call", label, "defaults that are not constants")
        defaults = tuple(d.as_constant() for d in vt.defaults) or None
        probe = types.FunctionType(
            vt.code,
            vt.f_globals,
            vt.code.co_name,
            defaults,
            tuple(types.CellType(0) for _ in vt.closure) or None,
        )
        probe.__qualname__ = vt.qualname
        _pure(tx, probe, label, modules)
        cell_contents = [c.contents if isinstance(c, CellVariable) else None for c in vt.closure]
        return _rebuilt(
            tx, vt.code, vt.f_globals, vt.qualname, defaults, cell_contents, lifted, label, modules
        )
    raise Unsupported("unsupported_call", label, f"a function of type {vt.type_name()}")


def _rebuilt(
    tx: Translator,
    code: types.CodeType,
    f_globals: dict[str, Any],
    qualname: str,
    defaults: tuple[Any, ...] | None,
    contents: list[VariableTracker | None],
    lifted: Args,
    label: str,
    modules: ModuleState,
    kwdefaults: dict[str, Any] | None = None,
) -> Any:
    """A builder of the function with the same code over new cells on each call: a tensor in a
    cell is passed in (appended to `lifted`), a module's state is swapped in, a constant stays."""
    from framejit.frontend.variables.objects import NNModuleVariable
    from framejit.frontend.variables.tensor import TensorVariable

    cells: list[tuple[str, Any]] = []  # ("const", value) or ("lifted", index)
    for held in contents:
        if isinstance(held, TensorVariable):
            cells.append(("lifted", len(lifted)))
            lifted.append(held)
        elif isinstance(held, ConstantVariable):
            cells.append(("const", held.as_constant()))
        elif isinstance(held, NNModuleVariable):
            cells.append(("const", modules.add(tx, held, label)))
        elif (fixed := _torch_function_held(held)) is not None:
            cells.append(("const", fixed))  # `from torch.func import functional_call` inside
        else:
            what = "a cell" if held is None else held.type_name()
            raise Unsupported(
                "unsupported_call", label, f"the function closes over {what}, not a tensor"
            )

    def build(values: tuple[Any, ...]) -> Any:
        closure = tuple(types.CellType(values[v] if kind == "lifted" else v) for kind, v in cells)
        made = types.FunctionType(code, f_globals, code.co_name, defaults, closure or None)
        made.__qualname__ = qualname
        made.__kwdefaults__ = kwdefaults
        return made

    return build


def _mutable(value: Any) -> Any:
    """`value` with torch.fx's immutable dicts and lists (what a graph passes its ops) as
    plain ones: a transformed function may be given a dict of parameters it updates
    (`functional_call(model, params, ...)` under `grad`)."""
    from torch.fx.immutable_collections import immutable_dict, immutable_list

    if type(value) in (dict, immutable_dict):
        return {k: _mutable(v) for k, v in value.items()}
    if type(value) in (list, immutable_list):
        return [_mutable(v) for v in value]
    if type(value) is tuple:
        return tuple(_mutable(v) for v in value)
    return value


def _torch_function_held(held: Any) -> Any:
    """The function a closure cell holds when it is one of torch's own (fixed code that reads
    no user state: `functional_call`, `F.cross_entropy`): it can be a constant of the
    rebuilt function. None for anything else."""
    fn = getattr(held, "fn", None) if held is not None else None
    if fn is None and held is not None and held.is_constant():
        fn = held.as_constant()
    if isinstance(fn, types.FunctionType) and _fixed_function(fn):
        return fn
    if isinstance(fn, types.BuiltinFunctionType) and (fn.__module__ or "").startswith("torch"):
        return fn
    return None


def _fixed_function(fn: types.FunctionType) -> bool:
    module = fn.__module__ or ""
    return module == "torch" or module.startswith("torch.")


def _pure(tx: Translator, fn: types.FunctionType, label: str, modules: ModuleState) -> None:
    """`fn` passes the purity scan; the modules it reads as globals join `modules`."""
    from framejit.frontend.sources import ConstSource, GlobalSource, ItemSource

    found: dict[str, Any] = {}
    why = scan(fn, modules=True) or stateful_global(fn, modules=found)
    if why is not None:
        raise Unsupported("unsupported_call", label, why)
    for name in found:
        if fn.__globals__ is tx.output.fn.__globals__:
            source: Any = GlobalSource(name)
        else:
            module_name = str(fn.__globals__.get("__name__", "?"))
            source = ItemSource(ConstSource(fn.__globals__, f"globals of {module_name}"), name)
        modules.add(tx, tx.wrap_source(source), label)


def functional_call(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker:
    """`torch.func.functional_call(module, params_and_buffers, args, kwargs=None, *,
    tie_weights=True, strict=False)`: the module's forward, traced with the given tensors in
    place of the named parameters and buffers (eager swaps them in and back out). Reads of
    those attributes during the call answer with the given tensors
    (`OutputGraph.reparametrized`); the module itself is never changed."""
    from framejit.frontend.variables.containers import DictVariable, TupleVariable
    from framejit.frontend.variables.objects import NNModuleVariable, guard_tree_walk
    from framejit.frontend.variables.tensor import TensorVariable

    label = "torch.func.functional_call"
    names = ["module", "parameter_and_buffer_dicts", "args", "kwargs"]
    bound = dict(zip(names, args))
    for key, value in kwargs.items():
        if key in bound:
            raise Unsupported("exception", label, f"TypeError: two values for {key}")
        bound[key] = value
    options = {k: bound.pop(k) for k in ("tie_weights", "strict") if k in bound}
    if set(bound) - set(names) or not {"module", "parameter_and_buffer_dicts", "args"} <= set(
        bound
    ):
        raise Unsupported("unsupported_call", label, "these arguments")
    if not all(v.is_constant() for v in options.values()):
        raise Unsupported("unsupported_call", label, "non-constant options")
    tie_weights = options["tie_weights"].as_constant() if "tie_weights" in options else True
    strict = options["strict"].as_constant() if "strict" in options else False
    module = bound["module"]
    if not isinstance(module, NNModuleVariable):
        raise Unsupported("unsupported_call", label, f"a module of type {module.type_name()}")
    module.pin(tx, label)  # the names are checked against this instance's
    dicts = bound["parameter_and_buffer_dicts"]
    dicts = dicts.items if isinstance(dicts, TupleVariable) else [dicts]
    given: dict[str, VariableTracker] = {}
    for d in dicts:
        if not isinstance(d, DictVariable):
            raise Unsupported("unsupported_call", label, f"a {d.type_name()} of tensors")
        for key, value in d.items.items():
            if key in given:
                raise Unsupported("exception", label, f"ValueError: {key!r} given twice")
            if not isinstance(key, str) or not isinstance(value, TensorVariable):
                raise Unsupported("unsupported_call", label, f"the entry {key!r}")
            given[key] = value

    real = module.obj
    if module.source is not None:  # which names there are, and which are one tensor
        guard_tree_walk(tx, real, module.source, ("_parameters", "_buffers"))
    named = dict(real.named_parameters(remove_duplicate=False))
    named.update(real.named_buffers(remove_duplicate=False))
    if strict and set(named) != set(given):
        raise Unsupported("exception", label, "strict=True with missing or unexpected keys")
    swaps: dict[tuple[int, str], VariableTracker] = {}
    for key, value in given.items():
        if key not in named:
            raise Unsupported("unsupported_call", label, f"{key!r} is not a parameter or buffer")
        targets = [key]
        if tie_weights:  # every name of the same tensor takes the new value
            targets = [k for k, t in named.items() if t is named[key]]
            clash = [k for k in targets if k in given and given[k] is not value]
            if clash != [] and clash != [key]:
                raise Unsupported("exception", label, f"ValueError: tied keys {clash} differ")
        for path in targets:
            prefix, _, leaf = path.rpartition(".")
            owner = real.get_submodule(prefix) if prefix else real
            swaps[(id(owner), leaf)] = value

    call_args = bound["args"]
    positional = call_args.items if isinstance(call_args, TupleVariable) else [call_args]
    call_kwargs: dict[str, VariableTracker] = {}
    extra = bound.get("kwargs")
    if extra is not None and not (extra.is_constant() and extra.as_constant() is None):
        if not isinstance(extra, DictVariable) or not all(isinstance(k, str) for k in extra.items):
            raise Unsupported("unsupported_call", label, "kwargs that are not a dict")
        call_kwargs = dict(extra.items)
    outer = tx.output.reparametrized
    tx.output.reparametrized = {**outer, **swaps}
    try:
        return tx.call_module(module, list(positional), call_kwargs)
    finally:
        tx.output.reparametrized = outer

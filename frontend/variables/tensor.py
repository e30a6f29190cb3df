"""TensorVariable: a tensor living in the graph, carried with its FakeTensor example value.

Sizes read from a tensor are Python constants where they are static (the TENSOR_MATCH guard on
each graph input makes that sound) and `SymNodeVariable`s where they are symbolic (dynamic shapes:
`frontend/dynamic.py`, `variables/symbolic.py`); dtype, device and the rest are constants.
Reading a tensor's *values* into Python (`.item()`, `bool(x)`, `.tolist()`) cannot be captured.
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any

import torch
from framejit.frontend.errors import Unsupported
from framejit.frontend.sources import AttrSource, MethodCallSource, Source
from framejit.frontend.variables.base import (
    ConstantVariable,
    VariableTracker,
    change_count,
    missing_attribute,
)

if TYPE_CHECKING:
    import torch.fx
    from framejit.frontend.translator import Translator

# Attributes whose value is metadata: a constant under static shapes.
METADATA_ATTRS = frozenset(
    {
        "shape",
        "dtype",
        "device",
        "ndim",
        "is_cuda",
        "is_cpu",
        "is_meta",
        "requires_grad",
        "layout",
        "is_sparse",
        "is_quantized",
        "is_mkldnn",
        "is_nested",
        "itemsize",
        "nbytes",
        "is_leaf",
    }
)

# Methods whose result is metadata (no graph node needed).
METADATA_METHODS = frozenset(
    {
        "size",
        "dim",
        "ndimension",
        "numel",
        "nelement",
        "stride",
        "is_contiguous",
        "element_size",
        "is_floating_point",
        "is_complex",
        "is_signed",
        "get_device",
        "storage_offset",
        "is_inference",
        "is_conj",
        "is_neg",
        "has_names",
    }
)

# Methods that read values into Python or act outside the graph.
DATA_DEPENDENT_METHODS = frozenset(
    {
        "item",
        "tolist",
        "numpy",
        "data_ptr",
        "__bool__",
        "__int__",
        "__float__",
        "__index__",
        "__len__",
        "__iter__",
        "__repr__",
        "__str__",
        "__format__",
        "untyped_storage",
        "storage",
    }
)
OUTSIDE_GRAPH_METHODS = frozenset(
    {
        "backward",
        "register_hook",
        "retain_grad",
        "record_stream",
        "share_memory_",
        "register_post_accumulate_grad_hook",
        "__setstate__",
        "__reduce_ex__",
        "__deepcopy__",
    }
)


# Metadata methods whose answer may be symbolic (dynamic shapes): OutputGraph makes the node.
SIZE_METHODS = {
    "size": lambda out, t, dim: out.tensor_size(t, dim),
    "stride": lambda out, t, dim: out.tensor_stride(t, dim),
    "numel": lambda out, t, dim: out.tensor_numel(t),
    "nelement": lambda out, t, dim: out.tensor_numel(t),
}


class TensorVariable(VariableTracker):
    __slots__ = ("cls", "fake", "node", "source")

    def __init__(
        self,
        node: torch.fx.Node,
        fake: torch.Tensor,
        cls: type = torch.Tensor,
        source: Source | None = None,
    ) -> None:
        self.node = node
        self.fake = fake
        self.cls = cls
        self.source = source

    def __repr__(self) -> str:
        return f"Tensor({self.node.name}: {self.fake.dtype} {tuple(self.fake.shape)})"

    def python_type(self) -> type:
        return self.cls

    def has_tensors(self) -> bool:
        return True

    def truth(self, tx: Translator) -> bool:
        raise Unsupported("data_dependent", "a tensor used as a condition (`if tensor:`)")

    def getattr(self, tx: Translator, name: str) -> VariableTracker:
        from framejit.frontend.variables.functions import TensorMethodVariable

        if name in ("is_leaf", "grad_fn") and self.source is not None:
            return tx.wrap_source(AttrSource(self.source, name))  # not part of TENSOR_MATCH
        if name == "grad_fn":  # of a tensor the graph makes: whether it has one is known
            if self.fake.grad_fn is None:
                return ConstantVariable(None)
            return GradFnVariable(self)
        if name == "_version":
            # changes with every in-place write, the graph's own included: read at run time
            raise Unsupported("unsupported_attr", "Tensor._version", "it is read as Python")
        if name == "shape":
            return tx.output.tensor_size(self)
        if name == "__class__":  # `type(x)`, as the tensor's TENSOR_MATCH guard pins it
            return tx.wrap_value(self.python_type(), None)
        if name == "nbytes":  # numel * itemsize, symbolic with the sizes
            itemsize = ConstantVariable(self.fake.element_size())
            return tx.binary_op(operator.mul, tx.output.tensor_numel(self), itemsize)
        if name in METADATA_ATTRS:
            return ConstantVariable(getattr(self.fake, name))
        if name == "grad":
            if self.source is None:
                raise Unsupported("unsupported_attr", "Tensor.grad of a tensor made in the graph")
            return tx.wrap_source(AttrSource(self.source, "grad"))
        descriptor = getattr(torch.Tensor, name, None)
        if descriptor is None:
            if self.source is not None:
                # a Python attribute set on the tensor (`x.scale = 5`): read from its
                # instance dict, or guarded absent there (`hasattr`, `getattr`'s default)
                if name in getattr(tx.output.read_source(self.source), "__dict__", {}):
                    return tx.wrap_source(AttrSource(self.source, name))
                raise missing_attribute(tx, self.source, name, "Tensor")
            raise Unsupported("unsupported_attr", f"Tensor.{name}")
        if callable(descriptor) and not isinstance(descriptor, property):
            return TensorMethodVariable(self, name)
        # A tensor-valued property such as T, mT, H, real, imag, data.
        return tx.output.call_op("call_function", getattr, [self, ConstantVariable(name)], {})

    def call_method(
        self,
        tx: Translator,
        name: str,
        args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        if name == "new" and len(args) == 1 and _is_size(args[0]):
            # `x.new(torch.Size)` is a shape, `x.new(tuple)` data; a graph argument keeps no
            # Size (fx makes it a tuple), so it becomes the op it is: an uninitialized tensor
            name = "new_empty"
        if name == "storage_offset" and not args and not kwargs:
            # Not part of TENSOR_MATCH (views of one buffer at many offsets share an entry):
            # pinned by its own guard when read, and only answerable for inputs.
            if self.source is None:
                raise Unsupported(
                    "unsupported_call", "Tensor.storage_offset() of a tensor computed in the graph"
                )
            return tx.wrap_source(MethodCallSource(self.source, name))
        if name in METADATA_METHODS:
            if not all(a.is_constant() for a in args) or any(
                not v.is_constant() for v in kwargs.values()
            ):
                raise Unsupported("unsupported_call", f"Tensor.{name} with non-constant arguments")
            const_args = [a.as_constant() for a in args]
            const_kwargs = {k: v.as_constant() for k, v in kwargs.items()}
            dim = const_args[0] if const_args else const_kwargs.get("dim")
            if (  # symbolic sizes stay symbolic
                name in SIZE_METHODS
                and len(const_args) + len(const_kwargs) <= 1
                and (dim is None or isinstance(dim, int))
            ):
                return SIZE_METHODS[name](tx.output, self, dim)
            value = getattr(self.fake, name)(*const_args, **const_kwargs)
            return ConstantVariable(value)
        if name in DATA_DEPENDENT_METHODS:
            raise Unsupported("data_dependent", f"Tensor.{name}()")
        if name in GRAD_HOOK_METHODS:
            return _grad_hook_call(tx, self, name, args, kwargs)
        if name in OUTSIDE_GRAPH_METHODS:
            raise Unsupported("unsupported_call", f"Tensor.{name}()")
        if name == "type" and not args and not kwargs:
            return ConstantVariable(self.fake.type().replace("Fake", ""))
        if name in ("requires_grad_", "detach_"):
            return self._autograd_flag(tx, name, args, kwargs)
        if name == "new_tensor":  # of a symbolic number: built from `full` nodes (torch_rules)
            from framejit.frontend.variables.torch_rules import tensor_from_symbolic_data

            made = tensor_from_symbolic_data(tx, torch.Tensor.new_tensor, [self, *args], kwargs)
            if made is not None:
                return made
        return tx.output.call_op("call_method", name, [self, *args], kwargs)

    def setattr(self, tx: Translator, name: str, value: VariableTracker) -> None:
        if name == "requires_grad":  # `hidden.requires_grad = True`
            self._autograd_flag(tx, "requires_grad_", [value], {}, "setting Tensor.requires_grad")
            return
        raise Unsupported(
            "side_effect",
            f"setting Tensor.{name}",
            "attributes of tensors are not tracked (the write runs as Python)",
        )

    def _autograd_flag(
        self,
        tx: Translator,
        name: str,
        args: list[VariableTracker],
        kwargs: dict[str, Any],
        label: str = "",
    ) -> VariableTracker:
        """`y.requires_grad_()` / `y.detach_()`. Setting the flag it already has changes
        nothing. Changing it makes `y` a new autograd leaf (or cuts it from its history) in the
        middle of the graph, which a compiled graph's autograd cannot express (its outputs hang
        off the graph's inputs): a break, after which the flag is set on the real tensor and
        the rest compiles with it as an input."""
        values = [*args, *kwargs.values()]
        if not all(v.is_constant() for v in values) or len(values) > 1:
            raise Unsupported("unsupported_call", f"Tensor.{name} with these arguments")
        wanted = bool(values[0].as_constant()) if values else True
        if name == "detach_":
            wanted = False
        unchanged = self.fake.requires_grad == wanted and (
            name == "requires_grad_" or self.fake.grad_fn is None
        )
        if unchanged:
            return self
        raise Unsupported(
            "unsupported_call",
            label or f"Tensor.{name}()",
            "a tensor that starts or stops requiring grad inside the graph runs as Python",
        )

    def unpack(self, tx: Translator) -> list[VariableTracker]:
        if self.fake.dim() == 0:
            raise Unsupported("unsupported_object", "iterating over a 0-d tensor")
        return [
            tx.output.call_op("call_function", operator.getitem, [self, ConstantVariable(i)], {})
            for i in range(self.fake.shape[0])
        ]


# Methods that act on the backward pass of one tensor: replayed after the graph on an input.
GRAD_HOOK_METHODS = frozenset({"register_hook", "retain_grad"})


def _grad_hook_call(
    tx: Translator,
    tensor: TensorVariable,
    name: str,
    args: list[VariableTracker],
    kwargs: dict[str, VariableTracker],
) -> VariableTracker:
    """`x.register_hook(fn)` / `x.retain_grad()` on a tensor from outside the graph (an input, a
    parameter): recorded and made on the real tensor after the graph, before any backward can
    run. Gradients reach such a tensor at its own autograd node, outside the graph, with the
    hook applied there whenever it was registered; and the graph itself cannot run a backward.
    A tensor the graph computes is one output of the graph's single backward node, whose
    gradient from uses inside the graph never passes through the tensor: a hook or
    retain_grad on it is a graph break (the rest of the frame sees it as an input)."""
    from framejit.frontend.variables.base import ExternalCallableVariable

    construct = f"Tensor.{name}()"
    if tensor.source is None:
        raise Unsupported(
            "unsupported_call",
            construct,
            "on a tensor the graph computes (its gradient inside the graph is not visible to "
            "a hook): the graph breaks there and the call runs as Python",
        )
    wanted = 1 if name == "register_hook" else 0
    if len(args) != wanted or kwargs or not tensor.fake.requires_grad:
        # a tensor that requires no grad: eager's RuntimeError, raised by the real call
        raise Unsupported("unsupported_call", construct, "with these arguments it runs as Python")
    if name == "register_hook" and (
        tx.inst.opname != "CALL" or tx.decoded.instructions[tx.ip].opname != "POP_TOP"
    ):
        raise Unsupported(
            "unsupported_call",
            construct,
            "its handle is used (only `x.register_hook(fn)` as a "
            "statement is replayed after the graph)",
        )
    if _written_in_graph(tx, tensor):
        # eager hooks the version after the write; the graph's inputs are the versions before
        # its writes, which the replayed call would not reach
        raise Unsupported("unsupported_call", construct, "on a tensor the graph wrote in place")
    where = (tx.code, tx.inst.offset)
    if where in tx.output.calls_run_in_place:
        raise Unsupported(
            "side_effect",
            construct,
            "what it reads changes later in the graph: it runs where it is",
        )
    effects = tx.output.side_effects
    # checked like a logging call's: a hook function changed, or the tensor written in place,
    # later in the graph makes the frame trace again with this call run where it is
    effects.call_marks[len(effects.calls)] = (where, change_count(), len(tx.output.created))
    method = ExternalCallableVariable(getattr(torch.Tensor, name))
    effects.calls.append((method, [tensor, *args], {}, tx.lineno))
    return ConstantVariable(None)


def _written_in_graph(tx: Translator, tensor: TensorVariable) -> bool:
    """Has a node of the graph so far written the memory of `tensor` (or of a view of it)?"""
    from framejit.frontend.side_effects import written_tensors
    from framejit.guards.guard import storage_key

    key = storage_key(tensor.fake)
    return key is not None and any(
        storage_key(t) == key for node in tx.output.created for t in written_tensors(node)
    )


def _is_size(vt: VariableTracker) -> bool:
    from framejit.frontend.variables.symbolic import SizeVariable

    if isinstance(vt, SizeVariable):
        return True
    return vt.is_constant() and isinstance(vt.as_constant(), torch.Size)


class GradFnVariable(VariableTracker):
    """`y.grad_fn` of a tensor the graph makes, which has one: `y.grad_fn is None` and
    `if y.grad_fn:` fold; anything else reads the real one after the graph."""

    def __init__(self, tensor: TensorVariable) -> None:
        self.tensor = tensor

    def python_type(self) -> type:
        return type(self.tensor.fake.grad_fn)

    def truth(self, tx: Translator) -> bool:
        return True

    def reconstruct(self, cg: Any) -> None:
        cg.reconstruct(self.tensor)
        cg.load_attr("grad_fn")

"""nn.LSTM / nn.GRU / nn.RNN calls captured as their aten ops (`torch.lstm`, `torch.gru`,
`torch.rnn_tanh`, `torch.rnn_relu`) instead of inlining their Python forward, which keeps
weak references and cuDNN bookkeeping the translator cannot follow.

Supported: batched (3-D) and unbatched (2-D) input, with or without an initial state, no
projections (`proj_size` 0), no PackedSequence. The module's configuration is read through
guarded attribute reads, its weights are graph inputs read from `_parameters` like any
parameter.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from framejit.frontend.errors import Unsupported
from framejit.frontend.variables.base import ConstantVariable, VariableTracker
from framejit.frontend.variables.containers import ListVariable, TupleVariable
from framejit.frontend.variables.tensor import TensorVariable

if TYPE_CHECKING:
    from framejit.frontend.translator import Translator
    from framejit.frontend.variables.objects import NNModuleVariable

RNN_TYPES = (torch.nn.LSTM, torch.nn.GRU, torch.nn.RNN)


def _const(tx: Translator, module: NNModuleVariable, name: str) -> Any:
    return module.getattr(tx, name).as_constant()


def call_rnn(
    tx: Translator,
    module: NNModuleVariable,
    args: list[VariableTracker],
    kwargs: dict[str, VariableTracker],
) -> VariableTracker:
    mod = module.obj
    module.pin(tx, "an RNN's flat weights and options are read from the instance")
    if type(mod) not in RNN_TYPES:
        raise Unsupported("unsupported_call", f"{type(mod).__name__} (a subclass of an RNN)")
    if getattr(mod, "proj_size", 0):
        raise Unsupported("unsupported_call", "LSTM with proj_size")
    x = args[0] if args else kwargs.get("input")
    hx = args[1] if len(args) > 1 else kwargs.get("hx", ConstantVariable(None))
    if not isinstance(x, TensorVariable):
        what = "a PackedSequence" if "PackedSequence" in x.type_name() else x.type_name()
        raise Unsupported("unsupported_call", f"{type(mod).__name__} on {what}")
    if x.fake.dim() not in (2, 3):
        raise Unsupported("unsupported_call", f"{type(mod).__name__} on a non-2/3-D input")
    num_layers = _const(tx, module, "num_layers")
    bidirectional = _const(tx, module, "bidirectional")
    batch_first = _const(tx, module, "batch_first")
    unbatched = x.fake.dim() == 2  # as eager: a batch of one, squeezed out again
    batch_dim = 0 if batch_first else 1

    def method(name: str, value: VariableTracker, dim: int) -> VariableTracker:
        return tx.output.call_op("call_method", name, [value, ConstantVariable(dim)], {})

    _check_like_eager(tx, mod, x, hx, unbatched, batch_dim)
    if unbatched:
        x = method("unsqueeze", x, batch_dim)
        if not (hx.is_constant() and hx.as_constant() is None):
            if isinstance(mod, torch.nn.LSTM):
                hx = TupleVariable([method("unsqueeze", h, 1) for h in hx.unpack(tx)])
            else:
                hx = method("unsqueeze", hx, 1)
    assert isinstance(x, TensorVariable)
    hidden = _const(tx, module, "hidden_size")
    bias = _const(tx, module, "bias")
    dropout = float(_const(tx, module, "dropout"))
    training = _const(tx, module, "training")
    weights = ListVariable([module.getattr(tx, n) for n in mod._flat_weights_names])
    batch = x.fake.shape[0 if batch_first else 1]
    state_shape = (num_layers * (2 if bidirectional else 1), batch, hidden)

    def zeros() -> VariableTracker:
        return tx.output.call_op(
            "call_function",
            torch.zeros,
            [ConstantVariable(state_shape)],
            {"dtype": ConstantVariable(x.fake.dtype), "device": ConstantVariable(x.fake.device)},
        )

    flags = [
        ConstantVariable(v)
        for v in (bias, num_layers, dropout, training, bidirectional, batch_first)
    ]
    if isinstance(mod, torch.nn.LSTM):
        if hx.is_constant() and hx.as_constant() is None:
            state = TupleVariable([zeros(), zeros()])
        else:
            state = TupleVariable(hx.unpack(tx))
        out = tx.output.call_op("call_function", torch.lstm, [x, state, weights, *flags], {})
        output, h, c = out.unpack(tx)
        if unbatched:
            output, h, c = (
                method("squeeze", output, batch_dim),
                method("squeeze", h, 1),
                method("squeeze", c, 1),
            )
        return TupleVariable([output, TupleVariable([h, c])])
    if isinstance(mod, torch.nn.GRU):
        op = torch.gru
    else:
        # the kernel follows `mode`, set once in __init__, as in eager (not `nonlinearity`)
        op = torch.rnn_tanh if _const(tx, module, "mode") == "RNN_TANH" else torch.rnn_relu
    state = zeros() if hx.is_constant() and hx.as_constant() is None else hx
    out = tx.output.call_op("call_function", op, [x, state, weights, *flags], {})
    output, h = out.unpack(tx)
    if unbatched:
        output, h = method("squeeze", output, batch_dim), method("squeeze", h, 1)
    return TupleVariable([output, h])


def _check_like_eager(
    tx: Translator,
    mod: torch.nn.RNNBase,
    x: TensorVariable,
    hx: VariableTracker,
    unbatched: bool,
    batch_dim: int,
) -> None:
    """The checks the module's Python forward makes before its kernel runs (the state's
    dimensions, then `check_forward_args`: input size and dtype, state sizes), run on the
    fakes: the aten op itself checks none of them, and reads past its weights when the input
    size is wrong. A failed check runs the call as Python, where eager raises its error."""
    none = hx.is_constant() and hx.as_constant() is None
    if none:
        states: list[torch.Tensor] = []
    elif isinstance(mod, torch.nn.LSTM):
        parts = hx.unpack(tx) if isinstance(hx, (TupleVariable, ListVariable)) else None
        if (
            parts is None
            or len(parts) != 2
            or not all(isinstance(p, TensorVariable) for p in parts)
        ):
            raise Unsupported("unsupported_call", "LSTM state that is not a pair of tensors")
        states = [p.fake for p in parts]  # type: ignore[union-attr]
    elif isinstance(hx, TensorVariable):
        states = [hx.fake]
    else:
        raise Unsupported("unsupported_call", f"{type(mod).__name__} state that is not a tensor")
    try:
        with tx.output.fake_mode:
            inp = x.fake.unsqueeze(batch_dim) if unbatched else x.fake
            want = 2 if unbatched else 3
            for state in states:
                if state.dim() != want:
                    kind = "unbatched 2-D" if unbatched else "batched 3-D"
                    raise RuntimeError(f"For {kind} input, hx should also be {want}-D")
            states = [s.unsqueeze(1) for s in states] if unbatched else states
            if not states:
                mod.check_input(inp, None)
            else:  # LSTM's state is the pair (h, c)
                lstm = isinstance(mod, torch.nn.LSTM)
                mod.check_forward_args(inp, tuple(states) if lstm else states[0], None)
    except (RuntimeError, ValueError) as exc:
        raise Unsupported(
            "tensor_op_failed", type(mod).__name__, f"{type(exc).__name__}: {str(exc)[:200]}"
        ) from None


# torch.gru and torch.rnn_* loop over the time steps in C++ (and so do their Python
# decompositions): run on fakes with a symbolic length they pin it, a graph per length. Their
# outputs' shapes follow from the arguments' (LSTM keeps its sizes symbolic through its Python
# decomposition, output_graph's NeedsPythonDispatch).
SHAPED_BY_RULE = (torch.gru, torch.rnn_tanh, torch.rnn_relu)


def recurrent_fake(target: Any, args: list[Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """`target(*args)` (torch.gru, rnn_tanh or rnn_relu of a batched input) on fakes whose
    sizes may be symbolic, without running the op on them: the output has the input's first
    two sizes (T, B, or B, T batch first) and D * H, the final state the initial state's
    shape; their memory order is the op's own, learned from a run on fakes of the sizes'
    hints."""
    x, hx, weights, *flags = args
    out_like, h_like = target(_hinted(x), _hinted(hx), weights, *flags)
    directions = 2 if flags[-2] else 1  # bidirectional
    out = _in_order_of(out_like, (x.shape[0], x.shape[1], directions * hx.shape[2]))
    return out, _in_order_of(h_like, tuple(hx.shape))


def _hinted(t: torch.Tensor) -> torch.Tensor:
    def hint(n: Any) -> int:
        return n.node.hint if isinstance(n, torch.SymInt) else int(n)

    return torch.empty([hint(n) for n in t.shape], dtype=t.dtype, device=t.device)


def _in_order_of(like: torch.Tensor, shape: tuple[Any, ...]) -> torch.Tensor:
    """An empty tensor of `shape` laid out in `like`'s dimension order (outermost first)."""
    order = sorted(range(like.dim()), key=lambda d: (-like.stride(d), d))
    return torch.empty_permuted(shape, order, dtype=like.dtype, device=like.device)

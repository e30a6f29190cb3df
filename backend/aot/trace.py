"""Trace a captured graph to a functional aten graph with `make_fx` on FakeTensors.

Two traces, both through C++ functionalization (`torch._enable_functionalization`) under the
python dispatcher (so `native_batch_norm` takes its mutation-aware route and running stats show
up as mutations) and `make_fx` with the core decomposition table (`core_ops.py`; only what fx
needs while `EAGER_KERNELS` is set, for `aot_eager`, whose graphs then keep torch's ops):

- `trace_inference(fn, inputs, mutated)`: the graph takes the deduplicated tensor inputs and
  returns `computed values + new values of the mutated inputs`. No mutation, no op that
  returns an alias of an input among its outputs' producers (views inside are fine).
- `trace_joint(fn, inputs, mutated, differentiable, tangents)`: the graph takes
  `primals + tangents` and returns `forward outputs (as above) + gradients of the primals that
  require grad on entry` (None where a primal gets no gradient). Tangents are contiguous, one per
  differentiable forward output.

Invariants: user saved-tensor hooks never see the trace's tensors; the returned graphs contain
only aten ops (core set, see `core_ops.py`, unless `EAGER_KERNELS`) plus `operator.getitem`;
every node carries `meta["val"]` (a FakeTensor) from make_fx; dead nodes without side effects
are removed.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx
from framejit.backend.aot.analysis import no_user_hooks, quiet
from framejit.backend.aot.core_ops import decomposition_table, eager_kernel_table
from torch._dispatch.python import enable_python_dispatcher
from torch.fx.experimental.proxy_tensor import make_fx


def _to_functional(t: Any) -> Any:
    if not isinstance(t, torch.Tensor):
        return t
    wrapped = torch._to_functional_tensor(t)
    torch._mirror_autograd_meta_to(t, wrapped)  # requires_grad, is_leaf: so autograd runs
    return wrapped


def _from_functional(t: Any) -> Any:
    if not isinstance(t, torch.Tensor):
        return t
    if not torch._is_functional_tensor(t):
        # `torch.tensor(data, device="meta")` (or under `set_default_device("meta")`) makes a
        # real meta tensor that functionalization never wraps: a constant of the trace. A meta
        # tensor has no data, so a new empty one per call is the same value, as eager's is new.
        if t.device.type == "meta":
            return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)
        return t
    torch._sync(t)
    return torch._from_functional_tensor(t)


def _functional_forward(
    fn: Callable[..., Sequence[Any]], inputs: list[Any], mutated: list[int]
) -> tuple[list[Any], list[Any]]:
    """Run `fn` on functional wrappers; returns (outputs, new values of mutated inputs).

    Must run with functionalization enabled. A mutated input that requires grad is cloned
    first, so autograd accepts the in-place op (the gradient still reaches the input).
    """
    args = [x.clone() if i in mutated and x.requires_grad else x for i, x in enumerate(inputs)]
    outs = list(fn(*args))
    return outs, [args[i] for i in mutated]


def trace_inference(
    fn: Callable[..., Sequence[Any]], inputs: list[torch.Tensor], mutated: list[int], mode: Any
) -> torch.fx.GraphModule:
    """`inputs` are FakeTensors of `mode`; `mutated` are positions in `inputs`."""

    def functional(*args: torch.Tensor) -> list[Any]:
        wrapped = [_to_functional(a) for a in args]
        torch._enable_functionalization(reapply_views=True)
        try:
            with torch.no_grad():
                outs, new_values = _functional_forward(fn, wrapped, mutated)
        finally:
            torch._disable_functionalization()
        return [_from_functional(t) for t in [*outs, *new_values]]

    return _make_fx(functional, inputs, mode)


def trace_joint(
    fn: Callable[..., Sequence[Any]],
    inputs: list[torch.Tensor],
    mutated: list[int],
    differentiable: list[int],
    tangents: list[torch.Tensor],
    mode: Any,
) -> torch.fx.GraphModule:
    """`differentiable`: positions in `outputs + new values` that get a tangent."""
    count = len(inputs)

    def joint(*args: torch.Tensor) -> list[Any]:
        primals = [_to_functional(a) for a in args[:count]]
        cotangents = [_to_functional(a) for a in args[count:]]
        # Chosen before the forward runs: an input that does not require grad but is written
        # with one that does (`x.mul_(w)`) requires grad afterwards, yet gets no gradient.
        wanted = [p for p in primals if isinstance(p, torch.Tensor) and p.requires_grad]
        torch._enable_functionalization(reapply_views=True)
        try:
            with torch.enable_grad():
                outs, new_values = _functional_forward(fn, primals, mutated)
            forward = [*outs, *new_values]
            grads: Sequence[Any] = ()
            if wanted:
                grads = torch.autograd.grad(
                    [forward[i] for i in differentiable],
                    wanted,
                    cotangents,
                    allow_unused=True,
                )
        finally:
            torch._disable_functionalization()
        return [_from_functional(t) for t in [*forward, *grads]]

    return _make_fx(joint, [*inputs, *tangents], mode)


# Whether the graphs traced now keep torch's own ops (set by `aot_compile` for an inner backend
# that runs aten graphs with torch's kernels: `aot_eager`): decomposing them would only change
# how they round (a layer norm's or a SiLU's backward, cross-entropy's gradient in their last
# bits) and run more, smaller kernels.
EAGER_KERNELS: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "framejit_aot_eager_kernels", default=False
)


def _make_fx(fn: Callable[..., Any], fake_inputs: list[Any], mode: Any) -> torch.fx.GraphModule:
    # identity saved-tensor hooks shadow any the user has installed: theirs are for real tensors
    # quiet: the user saw the graph's warnings at their line (the frontend's run)
    table = eager_kernel_table() if EAGER_KERNELS.get() else decomposition_table()
    with mode, enable_python_dispatcher(), no_user_hooks(), quiet():
        gm = make_fx(fn, decomposition_table=table)(*fake_inputs)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return gm

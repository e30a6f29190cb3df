"""Find the ops whose FakeTensor layout is not eager's, for `frontend/layouts.py`.

For each op of torch's OpInfo database, the sample inputs are given a non-contiguous layout
(channels_last for 4-d, channels_last_3d for 5-d, the first and last dimensions swapped for
any tensor of 2 or more dimensions; the other tensor arguments of the input's shape get the
same layout, then keep their own); the op runs eagerly and under a FakeTensorMode, and the
strides of the results are compared (dimensions of size 1 aside). An op listed here and not
covered by `frontend/layouts.py` (marked "not covered") lets the frontend trace the program
with another layout than eager's.

    python tools/layout_probe.py [--device cuda] [--dtype float32] [--samples 24] [--skip a,b]

Exit status 1 when some op listed is not covered, 0 otherwise. Random ops, backward ops and
private functions (`torch._native_batch_norm_legit`) are listed but not counted. The
jiterator ops are not run: they launch their kernel themselves, outside the dispatcher, so a
FakeTensorMode run launches it on the fake tensors' null pointers (on CUDA an illegal memory
access, which ends the process's CUDA context). On CUDA each op's kernels are synchronized
before the next op: one that fails there ends the probe (exit status 2) naming that op, to
rerun with `--skip` it.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import warnings
from functools import partial

import torch
from framejit.frontend.layouts import long_strides, needs_eager_layout
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.testing._internal.common_methods_invocations import op_db
from torch.utils._pytree import tree_flatten, tree_map

# random ops (the frontend never runs them for real), and backward ops no program calls
_NOT_COUNTED = frozenset({"normal", "native_dropout_backward"})
# ops whose fake run is not a fake run (see the module docstring)
_NOT_RUN_PREFIXES = ("jiterator_",)


def _layouts(t: object) -> list[tuple[str, torch.Tensor]]:
    if not isinstance(t, torch.Tensor) or t.layout != torch.strided:
        return []
    if t.dim() < 2 or t.numel() < 2:
        return []
    out = []
    if t.dim() == 4:
        out.append(("channels_last", t.contiguous(memory_format=torch.channels_last)))
    if t.dim() == 5:
        out.append(("channels_last_3d", t.contiguous(memory_format=torch.channels_last_3d)))
    out.append(("transposed", t.transpose(0, -1).contiguous().transpose(0, -1)))
    return out


def _like(kind: str, shape: torch.Size, value: object) -> object:
    """`value` in the layout `kind`, when it is a tensor of the sample input's shape."""
    if isinstance(value, torch.Tensor) and value.shape == shape:
        return dict(_layouts(value)).get(kind, value)
    return value


def _signature(value: object) -> tuple:
    return tuple(
        (tuple(v.shape), long_strides(v)) if isinstance(v, torch.Tensor) else None
        for v in tree_flatten(value)[0]
    )


def _first_disagreement(op, device: str, dtype: torch.dtype, samples: int):
    try:
        inputs = list(op.sample_inputs(device, dtype, requires_grad=False))[:samples]
    except Exception:  # noqa: BLE001 - an op without samples for this dtype or device
        return None
    for sample, alike in itertools.product(inputs, (True, False)):
        for kind, x in _layouts(sample.input):
            args = sample.args
            if alike:  # the other arguments of the input's shape in the same layout
                args = tree_map(partial(_like, kind, sample.input.shape), sample.args)
            try:
                torch.manual_seed(0)
                eager = op.op(x, *args, **sample.kwargs)
                with FakeTensorMode(allow_non_fake_inputs=True) as mode:
                    fake_of = lambda v: mode.from_tensor(v) if isinstance(v, torch.Tensor) else v  # noqa: E731
                    fake = op.op(
                        mode.from_tensor(x),
                        *tree_map(fake_of, args),
                        **tree_map(fake_of, sample.kwargs),
                    )
            except Exception:  # noqa: BLE001 - eager or fake refuses these arguments
                continue
            if _signature(eager) != _signature(fake):
                return kind, tuple(x.shape), _signature(eager), _signature(fake)
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--samples", type=int, default=24)
    parser.add_argument(
        "--skip",
        default="",
        help="comma-separated op names not to run (on CUDA, an op whose sample makes an illegal "
        "memory access ends the process's CUDA context: stderr names the op being run)",
    )
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    dtype = getattr(torch, args.dtype)
    warnings.filterwarnings("ignore")
    uncovered = 0
    print(f"torch {torch.__version__}, {args.device}, {args.dtype}")
    cuda = torch.device(args.device).type == "cuda"
    for op in op_db:
        if op.name in skip or op.name.startswith(_NOT_RUN_PREFIXES):
            continue
        print(f"running {op.name}", file=sys.stderr, flush=True)
        found = _first_disagreement(op, args.device, dtype, args.samples)
        if cuda:
            try:  # a kernel's error surfaces here, under the op that made it
                torch.cuda.synchronize()
            except RuntimeError as error:
                first_line = next(iter(str(error).splitlines()), "")
                lost = f"the CUDA context is lost: rerun with --skip {op.name}"
                print(f"{op.name}: {first_line} ({lost})", file=sys.stderr)
                return 2
        if found is None:
            continue
        kind, shape, eager, fake = found
        method = getattr(op, "method_variant", None)
        covered = needs_eager_layout("call_function", op.op) or (
            method is not None and needs_eager_layout("call_method", method.__name__)
        )
        private = op.op.__name__.startswith("_") if hasattr(op.op, "__name__") else True
        if covered:
            mark = "covered"
        elif op.name in _NOT_COUNTED or private:
            mark = "not counted"
        else:
            mark = "not covered"
        if mark == "not covered":
            uncovered += 1
        print(f"{op.name:40} {mark:12} {kind} {shape}: eager {eager} fake {fake}")
    return 1 if uncovered else 0


if __name__ == "__main__":
    sys.exit(main())

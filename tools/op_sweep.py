"""Run torch's OpInfo samples through framejit and compare with eager, op by op.

framejit's own op tests use shapes and dtypes we chose; this sweep uses the sample inputs torch
ships with its operator database (`torch.testing._internal.common_methods_invocations.op_db`,
needs the `expecttest` package), so it finds what our tests did not think of. For each op and
dtype it runs up to `--samples` samples through `framejit.jit(backend=...)` (graph breaks
allowed) and sorts the outcome:

    ok         values, dtypes and shapes equal eager's (tolerances by dtype)
    ok-aten    the same, but no Triton kernel ran (the graph fell back to aten calls)
    same-error eager raised, and framejit raised the same exception type
    MISMATCH   a different value, dtype or shape: a wrong answer, the worst outcome
    ERROR      framejit raised where eager did not (or another exception type), or it logged
               that it failed and ran something else (Triton kernels that failed at their
               first run, an internal error): the answer is eager's, the failure framejit's
    TIMEOUT    over --timeout seconds (the Triton interpreter is slow on big samples)

Random ops are compared by shape and dtype only. On the CPU the Triton kernels run in Triton's
interpreter (set TRITON_INTERPRET=1, this script does it when numpy is present).

    python tools/op_sweep.py                         # every op, float32, backend triton
    python tools/op_sweep.py --ops add,softmax --dtypes float32,float16,int64
    python tools/op_sweep.py --backend aot_eager --report /tmp/sweep.txt
    python tools/op_sweep.py --mode grad            # gradients too (the AOT stage's backward)
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import logging
import os
import signal
import sys
import time
import traceback
from collections import Counter
from typing import Any

# Not in a GPU test run (tests/device_mode.py), which loads this file too: the kernels must
# compile for the GPU there, and the variable would turn the interpreter on for the process.
if (
    importlib.util.find_spec("numpy") is not None
    and os.environ.get("FRAMEJIT_TEST_DEVICE") != "cuda"
):
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402

import framejit  # noqa: E402

RANDOM = {
    "bernoulli", "cauchy", "exponential", "geometric", "log_normal", "multinomial", "normal",
    "normal.in_place", "normal.number_mean", "rand_like", "randint", "randint_like", "randn",
    "randn_like", "uniform", "nn.functional.dropout", "nn.functional.dropout2d",
    "nn.functional.dropout3d", "nn.functional.alpha_dropout", "nn.functional.rrelu",
    "nn.functional.feature_alpha_dropout.with_train", "nn.functional.fractional_max_pool2d",
    "nn.functional.fractional_max_pool3d", "empty", "empty_like", "empty_strided",
    "empty_permuted", "new_empty", "new_empty_strided", "pca_lowrank", "svd_lowrank",
    "nn.functional.multi_head_attention_forward",
}  # fmt: skip
# eager itself gives different values for the same input twice (CPU, checked): compared by shape
# and dtype only (grid_sample in float16 and bfloat16 reads memory it did not write on the
# CPU: a bfloat16 reference sample gave -7e27 where float32 and float64 give 168)
NONDETERMINISTIC = {
    ("nn.functional.grid_sample", torch.float16),
    ("nn.functional.grid_sample", torch.bfloat16),
}
# outputs that are defined only up to sign/order, or not values at all
SKIP_PREFIXES = ("linalg.", "fft.", "jiterator_", "sparse.", "special.", "signal.", "_refs.")
SKIP = {"item", "equal", "allclose", "H", "T", "mH", "mT", "hash_tensor", "nonzero_static"}

DTYPES = {
    "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
    "int64": torch.int64, "int32": torch.int32, "bool": torch.bool, "uint8": torch.uint8,
    "int8": torch.int8, "float64": torch.float64, "complex64": torch.complex64,
}  # fmt: skip


class Timeout(Exception):
    """A sample ran past --timeout seconds."""


def _alarm(signum: int, frame: Any) -> None:
    raise Timeout()


class HiddenFailures(logging.Handler):
    """framejit's warnings that it failed and ran something else instead, recorded while
    attached to the `framejit` logger: a graph's Triton kernels that failed at their first
    run (the aten graph ran), an internal error while compiling or running a frame (it ran
    eagerly). The answer is eager's, but the failure is framejit's own."""

    MARKERS = ("kernels failed", "internal error", "frame hook error")

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if any(marker in message for marker in self.MARKERS):
            self.messages.append(message)

    def __enter__(self) -> HiddenFailures:
        logging.getLogger("framejit").addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger("framejit").removeHandler(self)


def _flat(value: Any) -> list[Any]:
    if isinstance(value, (tuple, list)):
        out: list[Any] = []
        for v in value:
            out.extend(_flat(v))
        return out
    if hasattr(value, "_fields"):  # a named tuple of results (max.dim, ...)
        return _flat(tuple(value))
    return [value]


def tolerance(dtype: torch.dtype) -> dict[str, float]:
    if dtype in (torch.float16, torch.bfloat16):
        return {"atol": 2e-2, "rtol": 2e-2}
    return {"atol": 1e-4, "rtol": 1.3e-5 * 10}


def compare(expected: Any, got: Any, values: bool) -> str | None:
    """None when equal; else what differs."""
    fe, fg = _flat(expected), _flat(got)
    if len(fe) != len(fg):
        return f"{len(fg)} outputs, eager gives {len(fe)}"
    for k, (e, g) in enumerate(zip(fe, fg)):
        if isinstance(e, torch.Tensor) != isinstance(g, torch.Tensor):
            return f"output {k}: {type(g).__name__}, eager gives {type(e).__name__}"
        if isinstance(e, torch.Tensor) and e.layout != torch.strided:
            e = e.to_dense()
        if isinstance(g, torch.Tensor) and g.layout != torch.strided:
            g = g.to_dense()
        if not isinstance(e, torch.Tensor):
            if values and e != g and not (e != e and g != g):
                return f"output {k}: {g!r}, eager gives {e!r}"
            continue
        if e.dtype != g.dtype or e.shape != g.shape:
            return f"output {k}: {g.dtype}{list(g.shape)}, eager gives {e.dtype}{list(e.shape)}"
        if not values or e.is_complex():
            continue
        if e.dtype.is_floating_point:
            try:
                torch.testing.assert_close(g, e, equal_nan=True, **tolerance(e.dtype))
            except AssertionError as err:
                return f"output {k}: " + str(err).splitlines()[0] + " " + _worst(e, g)
        elif not torch.equal(g, e):
            return f"output {k}: values differ ({int((g != e).sum())} elements)"
    return None


def _worst(e: torch.Tensor, g: torch.Tensor) -> str:
    ed, gd = e.double().flatten(), g.double().flatten()
    nan_differs = ed.isnan() != gd.isnan()
    if nan_differs.any():
        i = int(nan_differs.nonzero()[0])
    else:
        both = ed.isnan() | (ed == gd)
        i = int(((ed - gd).abs().masked_fill(both, 0)).argmax())
    return f"(worst at flat {i}: {gd[i].item()!r} vs {ed[i].item()!r})"


def _low_precision(value: Any) -> bool:
    return any(
        isinstance(v, torch.Tensor) and v.dtype in (torch.float16, torch.bfloat16)
        for v in _flat(value)
    )


def _to64(value: Any) -> Any:
    """`value` with its float16/bfloat16 tensors as float64 leaves (that keep requires_grad,
    so the reference has gradients too), in lists, tuples and dicts (a sample's kwargs: a
    layer_norm weight, an `other=` tensor)."""
    if isinstance(value, torch.Tensor):
        if value.dtype in (torch.float16, torch.bfloat16):
            return value.detach().double().requires_grad_(value.requires_grad)
        return _clone(value, grad=True)
    if isinstance(value, (list, tuple)):
        return type(value)(_to64(v) for v in value)
    if isinstance(value, dict):
        return {k: _to64(v) for k, v in value.items()}
    return value


def _no_worse(expected: Any, got: Any, reference: Any) -> bool:
    """framejit's largest error against the float64 reference is within twice eager's (plus
    one rounding step of the output dtype). Where eager's value is not finite and the
    reference's is (eager's float16 `exp` overflowed on the way, where a fused kernel computes
    in float32), eager's error bounds nothing: framejit's value must be close to the
    reference's there, by the dtype's tolerances."""
    fe, fg, fr = _flat(expected), _flat(got), _flat(reference)
    if not len(fe) == len(fg) == len(fr):  # nothing to judge some outputs (gradients) by
        return False
    for e, g, r in zip(fe, fg, fr):
        if not isinstance(e, torch.Tensor) or not e.dtype.is_floating_point:
            continue
        if r is None or g is None:
            return False
        r, ed, gd = r.double(), e.double(), g.double()
        lost = ~ed.isfinite() & r.isfinite()
        if lost.any():
            tol = tolerance(e.dtype)
            close = (gd - r).abs() <= tol["atol"] + tol["rtol"] * r.abs()
            if not close[lost].all():
                return False
            ed, gd = ed.where(~lost, r), gd.where(~lost, r)
        err_e = (ed - r).abs().nan_to_num(0.0)
        err_g = (gd - r).abs().nan_to_num(0.0)
        if (gd.isnan() != ed.isnan()).any():
            return False
        ulp = torch.finfo(e.dtype).eps * r.abs().clamp_min(1.0)
        if (err_g > 2 * err_e + ulp).any():
            return False
    return True


def _extremal(t: Any) -> Any:
    """A float tensor with NaN, inf and -inf written at a few positions."""
    if not isinstance(t, torch.Tensor) or not t.dtype.is_floating_point or t.numel() < 2:
        return t
    t = t.detach().clone()
    flat = t.view(-1) if t.is_contiguous() else t.reshape(-1)
    for position, value in zip((0, 3, 5), (float("nan"), float("inf"), float("-inf"))):
        if position < flat.numel():
            flat[position] = value
    return flat.view(t.shape) if t.is_contiguous() else flat.reshape(t.shape)


def _clone(v: Any, grad: bool = False) -> Any:
    if isinstance(v, torch.Tensor):
        c = v.detach().clone()
        return c.requires_grad_(v.requires_grad) if grad else c
    if isinstance(v, (list, tuple)):
        return type(v)(_clone(x, grad) for x in v)
    return v


def _leaves(value: Any) -> list[torch.Tensor]:
    return [v for v in _flat(value) if isinstance(v, torch.Tensor) and v.requires_grad]


def _grads(
    outputs: Any, inputs: list[torch.Tensor], seed: int, like: list[torch.dtype] | None = None
) -> list[Any]:
    """d(sum of outputs * fixed random weights)/d inputs. The weights are drawn in float32 on
    the CPU (the same numbers for outputs on any device, whatever the default device) and
    rounded to each output's dtype, or to the dtype in `like` (the float64 reference rounds
    them as the float16 run it stands in for, so both weigh the same numbers)."""
    gen = torch.Generator().manual_seed(seed)
    outs = [o for o in _flat(outputs) if isinstance(o, torch.Tensor) and o.requires_grad]
    if not outs or not inputs:
        return []
    dtypes = like or [o.dtype for o in outs]
    loss = sum(
        (o * torch.rand(o.shape, generator=gen, device="cpu").to(d).to(o.device, o.dtype)).sum()
        for o, d in zip(outs, dtypes, strict=True)
    )
    return list(torch.autograd.grad(loss, inputs, allow_unused=True))


def _program(target: Any, mode: str, kwargs: dict[str, Any]) -> Any:
    """The function the sweep compiles: `target(inp, *rest, **kwargs)`, or `inp.op(...)` for
    the method mode (the frontend's method path)."""
    name = getattr(target, "__name__", "")
    if mode == "method" and name:

        def method(inp: Any, *rest: Any) -> Any:
            return getattr(inp, name)(*rest, **kwargs)

        return method

    def program(inp: Any, *rest: Any) -> Any:
        return target(inp, *rest, **kwargs)

    return program


def float64_reference(
    target: Any, mode: str, inputs: tuple[Any, ...], kwargs: dict[str, Any], expected: Any
) -> Any:
    """The op run in float64 on the float16/bfloat16 `inputs` and tensor `kwargs` (both
    converted), shaped like `expected`: in grad mode (`expected` is (outputs, gradients))
    with the gradients too, weighted as the low-precision run was. None when the op has no
    float64 kernel or raises."""
    grad = mode == "grad"
    wide = _to64(inputs)
    context = torch.enable_grad if grad else torch.no_grad
    try:
        with context():
            reference = _program(target, mode, _to64(kwargs))(*wide)
            if grad:
                outs = [o for o in _flat(expected[0]) if isinstance(o, torch.Tensor)]
                like = [o.dtype for o in outs if o.requires_grad]
                reference = (reference, _grads(reference, _leaves(wide), 0, like))
    except Exception:  # noqa: BLE001 - no float64 kernel for this op
        return None
    return reference


def run_one(
    op: Any, sample: Any, backend: str, mode: str = "forward", dynamic: bool | None = None
) -> tuple[str, str]:
    if mode == "noncontig":
        sample = sample.noncontiguous()
    if mode == "extremal":
        sample = sample.transform(_extremal)
    args = tuple(sample.args)
    kwargs = dict(sample.kwargs)
    target = {"inplace": op.inplace_variant, "method": op.method_variant}.get(mode, op.op)
    if target is None:
        return "skip", ""
    grad = mode == "grad"
    program = _program(target, mode, kwargs)
    framejit.reset()
    loads = _loads()
    eager_inputs = _clone((sample.input, *args), grad)
    fj_inputs = _clone((sample.input, *args), grad)
    eager_exc = None
    context = torch.enable_grad if grad else torch.no_grad
    try:
        with context():
            expected = program(*eager_inputs)
            if grad:
                expected = (expected, _grads(expected, _leaves(eager_inputs), 0))
    except Exception as exc:  # noqa: BLE001 - eager's own error is the reference
        eager_exc = exc
    failures = HiddenFailures()
    try:
        with context(), failures:
            got = framejit.jit(program, backend=backend, dynamic=dynamic)(*fj_inputs)
            if grad:
                got = (got, _grads(got, _leaves(fj_inputs), 0))
    except Timeout:
        raise
    except Exception as exc:  # noqa: BLE001 - sorted below
        if eager_exc is not None and type(exc) is type(eager_exc):
            return "same-error", ""
        tb = traceback.extract_tb(exc.__traceback__)
        where = next((f"{f.filename}:{f.lineno}" for f in reversed(tb) if "framejit" in f.filename
                      or "/work/" in f.filename), "")  # fmt: skip
        if os.environ.get("SWEEP_TRACE"):
            traceback.print_exc()
        return "ERROR", f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]} [{where}]"
    if eager_exc is not None:
        return "ERROR", f"eager raised {type(eager_exc).__name__}, framejit did not"
    dtype = getattr(sample.input, "dtype", None)
    values = op.name not in RANDOM and (op.name, dtype) not in NONDETERMINISTIC
    why = compare(expected, got, values=values)
    if why is not None and "not close" in why and _low_precision(expected):
        # fused kernels compute in float32 and round once; eager rounds after every op.
        # Judge both against a float64 run: framejit may not be much further from it.
        reference = float64_reference(target, mode, (sample.input, *args), kwargs, expected)
        if reference is not None and _no_worse(expected, got, reference):
            why = None
    if why is None:
        # inputs written in place must match too
        why = compare(eager_inputs, fj_inputs, values=values)
        if why is not None:
            why = "inputs after the call: " + why
    if why is not None:
        return "MISMATCH", why
    if failures.messages:
        return "ERROR", failures.messages[0].removeprefix("framejit: ")[:300]
    return ("ok", "") if _loads() > loads or backend != "triton" else ("ok-aten", "")


def _loads() -> int:
    """Triton modules compiled or loaded so far (0 for other backends)."""
    try:
        from framejit.backend.triton import cache
    except ImportError:
        return 0
    return sum(cache.STATS.values())


def op_name(op: Any) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def samples_for(
    op: Any, dtype: torch.dtype, mode: str, count: int, device: str = "cpu"
) -> list[Any]:
    """The first `count` samples of `op` for `dtype` on `device`, the same every run ([] when
    the op does not support that dtype or mode there). CPU samples run in Triton's
    interpreter; without it (a GPU run) the Triton backend runs them as aten calls."""
    if dtype not in op.supported_dtypes(device):
        return []
    if mode == "grad" and not op.supports_autograd:
        return []
    if mode == "inplace" and op.inplace_variant is None:
        return []
    if mode == "method" and op.method_variant is None:
        return []
    torch.manual_seed(0)
    grad = mode == "grad" and dtype.is_floating_point
    if mode == "reference":
        return list(itertools.islice(op.reference_inputs(device, dtype), count))
    return list(op.sample_inputs(device, dtype, requires_grad=grad))[:count]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", default="", help="comma-separated OpInfo names (default: all)")
    parser.add_argument("--dtypes", default="float32")
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--backend", default="triton")
    parser.add_argument("--timeout", type=int, default=90)
    parser.add_argument(
        "--mode",
        default="forward",
        choices=["forward", "inplace", "grad", "noncontig", "reference", "method", "extremal"],
        help="forward: the op under no_grad; inplace: its in-place variant (x.add_); grad: "
        "outputs and gradients of the inputs; noncontig: non-contiguous copies of the samples; "
        "reference: OpInfo's reference inputs (larger, extremal values); method: x.op(...); "
        "extremal: NaN, inf and -inf written into the float inputs",
    )
    parser.add_argument(
        "--ptx",
        default="",
        help="also compile every kernel launched for this GPU target with Triton's compiler, "
        "e.g. cuda:90 (tools/ptx_check.py; no GPU needed)",
    )
    parser.add_argument(
        "--dynamic",
        action="store_true",
        help="compile with dynamic=True: every size symbolic (kernels take sizes as arguments)",
    )
    parser.add_argument("--start", default="", help="skip ops before this name")
    parser.add_argument("--report", default="", help="also write the non-ok lines here")
    parser.add_argument(
        "--show-aten", action="store_true", help="also list the ok-aten samples (no Triton kernel)"
    )
    a = parser.parse_args()

    from torch.testing._internal.common_methods_invocations import op_db

    ptx = None
    if a.ptx:
        spec = importlib.util.spec_from_file_location(
            "framejit_ptx_check", os.path.join(os.path.dirname(__file__), "ptx_check.py")
        )
        assert spec is not None and spec.loader is not None
        ptx = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(ptx)
        ptx.install()
    wanted = set(filter(None, a.ops.split(",")))
    dtypes = [DTYPES[d] for d in a.dtypes.split(",")]
    signal.signal(signal.SIGALRM, _alarm)
    counts: Counter[str] = Counter()
    bad_lines: list[str] = []
    started = not a.start
    t0 = time.perf_counter()
    for op in op_db:
        name = op_name(op)
        if not started:
            started = name == a.start
            if not started:
                continue
        if wanted and name not in wanted and op.name not in wanted:
            continue
        if not wanted and (name in SKIP or name.startswith(SKIP_PREFIXES)):
            continue
        for dtype in dtypes:
            try:
                samples = samples_for(op, dtype, a.mode, a.samples)
            except Exception as exc:  # noqa: BLE001 - a sample generator that needs more
                print(f"{name} {dtype}: no samples ({type(exc).__name__})", flush=True)
                continue
            for i, sample in enumerate(samples):
                signal.alarm(a.timeout)
                try:
                    outcome, why = run_one(op, sample, a.backend, a.mode, a.dynamic or None)
                except Timeout:
                    outcome, why = "TIMEOUT", f"over {a.timeout}s"
                finally:
                    signal.alarm(0)
                counts[outcome] += 1
                if outcome not in ("ok", "ok-aten", "same-error", "skip") or (
                    a.show_aten and outcome == "ok-aten"
                ):
                    line = f"{outcome} {name} {str(dtype)[6:]} sample {i}: {why}"
                    bad_lines.append(line)
                    print(line, flush=True)
        print(f"-- {name} done ({time.perf_counter() - t0:.0f}s)", flush=True)
        if a.report:
            write_report(a.report, bad_lines, counts, f"(running: {name} done)")
    summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    print(f"== {summary} in {time.perf_counter() - t0:.0f}s")
    if ptx is not None:
        if ptx.compile_recorded(a.ptx):
            counts["ERROR"] += 1
        print(ptx.summary())
        bad_lines.append(ptx.summary())
    if a.report:
        write_report(a.report, bad_lines, counts)
    return 1 if counts["MISMATCH"] or counts["ERROR"] else 0


def write_report(path: str, bad_lines: list[str], counts: Counter[str], note: str = "") -> None:
    """The non-ok lines so far and the counts, rewritten after every op (a run that is killed
    or times out still leaves what it found); `note` marks a run still going. Written to a
    temporary file and renamed, so a reader never sees half a report."""
    summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write("\n".join([*bad_lines, " ".join(filter(None, [summary, note]))]) + "\n")
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())

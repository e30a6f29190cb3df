"""torch's own operator samples (OpInfo) through framejit's Triton backend, compared with eager.

A fixed subset of `tools/op_sweep.py`: the op families the Triton backend lowers (pointwise
math, activations, casts, views, cat/stack, indexing, reductions, norms, losses), forward in
float32, float16 and int64 where the op takes them, and forward + gradients in float32. Sample
values are seeded, so a run is repeatable. Every outcome but a wrong answer or a failure that
eager does not have passes (an op that runs as torch's kernel is fine here: coverage of what
is lowered is tested in test_ops*.py)."""

from __future__ import annotations

import importlib.util
import pathlib
import types
from typing import Any

import pytest
import torch
from triton_helpers import kernel_device, require_interpreter

pytest.importorskip("expecttest", reason="torch's OpInfo database imports expecttest")

_SWEEP = pathlib.Path(__file__).resolve().parents[3] / "tools" / "op_sweep.py"
_spec = importlib.util.spec_from_file_location("framejit_op_sweep", _SWEEP)
assert _spec is not None and _spec.loader is not None
sweep = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sweep)

OPS = """
abs acos add addcdiv addcmul amax amin any all argmax argmin asin atan atan2 bitwise_and
bitwise_not bitwise_xor cat ceil clamp clamp_min cos cosh cumsum div.no_rounding_mode
div.floor_rounding div.trunc_rounding eq erf exp exp2 expand expm1 flip floor fmod frac gather
ge gt hypot index_select isnan le lerp log log10 log1p log2 log_softmax logical_and logical_not
logsumexp lt masked_fill maximum mean minimum mul nan_to_num ne neg permute pow prod reciprocal
remainder repeat round rsqrt sigmoid sign sin sinh slice softmax sqrt square squeeze stack std
sub sum t tan tanh transpose tril triu trunc unsqueeze var var_mean view where xlogy
nn.functional.gelu nn.functional.silu nn.functional.relu nn.functional.elu
nn.functional.leaky_relu nn.functional.softplus nn.functional.hardtanh nn.functional.mish
nn.functional.layer_norm nn.functional.group_norm nn.functional.batch_norm
nn.functional.rms_norm nn.functional.embedding nn.functional.pad.constant
nn.functional.mse_loss nn.functional.cross_entropy nn.functional.nll_loss
nn.functional.dropout linalg.vector_norm
""".split()  # noqa: SIM905 - a paragraph of names reads better than a list

CASES = [
    pytest.param(name, mode, dtype, id=f"{name}-{mode}-{str(dtype)[6:]}")
    for name in OPS
    for mode, dtype in (
        ("forward", torch.float32),
        ("forward", torch.float16),
        ("forward", torch.int64),
        ("grad", torch.float32),
    )
] + [
    # uint8 images: `any` keeps uint8 there; linear/cubic resizing rounds in fixed point
    pytest.param(name, "forward", torch.uint8, id=f"{name}-forward-uint8")
    for name in ("any", "nn.functional.interpolate", "nn.functional.upsample_bilinear")
]


def _ops(name: str) -> list[Any]:
    from torch.testing._internal.common_methods_invocations import op_db

    return [op for op in op_db if sweep.op_name(op) == name or op.name == name]


@pytest.mark.parametrize("name, mode, dtype", CASES)
def test_opinfo_samples_match_eager(name: str, mode: str, dtype: torch.dtype) -> None:
    require_interpreter()
    ops = _ops(name)
    assert ops, f"no OpInfo named {name}"
    bad = []
    ran = 0
    for op in ops:
        # on the tests' device: under FRAMEJIT_TEST_DEVICE=cuda CPU samples would run as aten
        # calls (no interpreter there) and check nothing
        for i, sample in enumerate(sweep.samples_for(op, dtype, mode, 2, kernel_device())):
            outcome, why = sweep.run_one(op, sample, "triton", mode)
            ran += 1
            if outcome in ("MISMATCH", "ERROR"):
                bad.append(f"{sweep.op_name(op)} sample {i}: {outcome} {why}")
    if not ran:
        pytest.skip(f"{name} has no {mode} samples for {dtype}")
    assert not bad, "\n".join(bad)


def test_float64_reference_keeps_gradients() -> None:
    """The float64 reference of a float16 grad-mode sample has the gradients too, weighted as
    the float16 run's: a gradient further from it than eager's is a mismatch (the reference
    once held the outputs only, and a `zip` with it dropped the gradients unjudged)."""
    x = (torch.linspace(-3, 3, 16) * 1.1).half().requires_grad_()
    expected_outputs = torch.sin(x)
    expected = (expected_outputs, sweep._grads(expected_outputs, [x], 0))
    reference = sweep.float64_reference(torch.sin, "grad", (x,), {}, expected)
    assert reference is not None and len(sweep._flat(reference)) == 2
    outputs, (grad,) = reference
    assert outputs.dtype == grad.dtype == torch.float64
    generator = torch.Generator().manual_seed(0)  # `_grads` draws its weights on the CPU
    weights = torch.rand(16, generator=generator, device="cpu").half().double().to(grad.device)
    torch.testing.assert_close(grad, torch.cos(x.detach().double()) * weights)
    wrong = (expected_outputs, [expected[1][0] + 0.5])  # outputs right, gradient off
    assert sweep._no_worse(expected, expected, reference)
    assert not sweep._no_worse(expected, wrong, reference)


def test_float64_reference_converts_tensor_kwargs() -> None:
    """Tensor kwargs become float64 too (a float16 `weight=` with a float64 input made
    layer_norm raise, and the reference was lost)."""
    x = torch.randn(3, 4).half()
    w = torch.rand(4).half()
    expected = torch.nn.functional.layer_norm(x, [4], weight=w)
    reference = sweep.float64_reference(
        torch.nn.functional.layer_norm, "forward", (x, [4]), {"weight": w}, expected
    )
    assert reference is not None and reference.dtype == torch.float64
    want = torch.nn.functional.layer_norm(x.double(), [4], weight=w.double())
    torch.testing.assert_close(reference, want)


def test_report_written_as_it_goes(tmp_path: pathlib.Path) -> None:
    """`--report` is rewritten after every op, so a killed run leaves its findings."""
    from collections import Counter

    path = tmp_path / "report.txt"
    sweep.write_report(str(path), ["MISMATCH sin float16 sample 0: x"], Counter(ok=3), "(running)")
    assert path.read_text().splitlines() == ["MISMATCH sin float16 sample 0: x", "ok 3 (running)"]


def test_kernels_failing_at_their_first_run_are_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """The backend runs the aten graph when the kernels fail at their first run: the answer is
    eager's, so the sweep once sorted such a sample as ok. It is framejit's own failure."""
    require_interpreter()
    from framejit.backend.triton import cache

    real_load = cache.load

    def load(*args: Any, **kwargs: Any) -> Any:
        module = real_load(*args, **kwargs)

        def call(*values: Any) -> Any:
            raise RuntimeError("a kernel Triton could not compile")

        return types.SimpleNamespace(call=call, module=module)

    monkeypatch.setattr(cache, "load", load)
    (op,) = _ops("sin")
    # on the tests' device: a CPU sample on a GPU run has no interpreter, and runs as aten
    sample = sweep.samples_for(op, torch.float32, "forward", 1, kernel_device())[0]
    outcome, why = sweep.run_one(op, sample, "triton")
    assert outcome == "ERROR" and "a kernel Triton could not compile" in why, (outcome, why)


def test_an_eager_overflow_is_judged_by_the_reference() -> None:
    """Eager's float16 soft_margin_loss overflows (`exp(30.6)` in float16) and gives inf where
    the exact value is 7.64; framejit's kernel computes in float32 and gives 7.64. Eager's
    error bounds nothing there: framejit's value must be close to the reference's."""
    reference = torch.tensor([7.640625, 1.0, float("nan")], dtype=torch.float64)
    eager = torch.tensor([float("inf"), 1.0, float("nan")], dtype=torch.float16)
    right = torch.tensor([7.640625, 1.0, float("nan")], dtype=torch.float16)
    wrong = torch.tensor([9.0, 1.0, float("nan")], dtype=torch.float16)
    assert sweep._no_worse(eager, right, reference)
    assert not sweep._no_worse(eager, wrong, reference)
    assert not sweep._no_worse(right, eager, reference)  # framejit's overflow is a mismatch

"""NaN and infinities through the Triton kernels, as eager treats them.

Triton's own max/min return the operand that is not NaN; torch's propagate NaN. Float floor
division, fmod and remainder follow eager's formulas (an infinite dividend gives NaN, a finite
one over an infinite divisor is itself), hypot is infinite when either side is (even with a
NaN) and does not overflow, atan2 of two infinities is a diagonal. Found by
`tools/op_sweep.py --mode extremal` (NaN, inf and -inf written into every float input).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from triton_helpers import check

INF, NAN = float("inf"), float("nan")
A = torch.tensor([INF, -INF, INF, 5.0, -5.0, NAN, 0.0, 3.0, INF, -0.0, 1e30, -7.5])
B = torch.tensor([INF, INF, 2.0, INF, -INF, 1.0, INF, 0.0, NAN, 2.0, 1e30, 2.0])

CASES: dict[str, Any] = {
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "clamp": lambda a, b: a.clamp(-1, 1) + b.clamp(min=0.5),
    "clamp_tensor": lambda a, b: a.clamp(min=b),
    "hardtanh_relu6": lambda a, b: F.hardtanh(a) + F.relu6(b),
    "hardsigmoid": lambda a, b: F.hardsigmoid(a),
    "sign_relu": lambda a, b: torch.sign(a) * torch.relu(b.abs()),
    "amax_amin": lambda a, b: torch.stack([a, b]).amax(0) - torch.stack([a, b]).amin(0),
    "max_min_all": lambda a, b: a.max() + b.min(),
    "softmax": lambda a, b: torch.stack([a, b]).softmax(0),
    "logsumexp": lambda a, b: torch.stack([a, b]).logsumexp(0),
    "floor_divide": torch.floor_divide,
    "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "fmod": torch.fmod,
    "remainder": torch.remainder,
    "hypot": torch.hypot,
    "atan2": torch.atan2,
}


@pytest.mark.parametrize("name", list(CASES))
def test_nonfinite_values_match_eager(name: str) -> None:
    fn = CASES[name]
    check(lambda a, b: fn(a, b), A, B)


def test_max_reduction_over_a_long_row_sees_a_late_nan() -> None:
    """The looped reduction (rows longer than one block) propagates NaN too."""
    x = torch.randn(3, 5000)
    x[1, 4321] = NAN
    x[2, 17] = NAN
    check(lambda x: (x.amax(1), x.amin(1)), x)


def test_binary_cross_entropy_checks_its_input() -> None:
    """Kept whole by the AOT stage: its decomposition dropped eager's range check."""
    import framejit

    p, t = torch.tensor([0.2, 1.5]), torch.tensor([0.0, 1.0])
    with pytest.raises(RuntimeError, match="between 0 and 1"):
        framejit.jit(lambda p, t: F.binary_cross_entropy(p, t), backend="triton")(p, t)

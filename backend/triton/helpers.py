"""The `@triton.jit` helper functions that generated kernels call (`fj_tanh`, `fj_atan`,
`fj_fmod`, ...): name -> (the helpers it calls, its source). codegen.py writes the ones a
module's kernels use, in this order (so a helper follows those it calls).

Invariants: core `tl` math only (libdevice does not run in Triton's CPU interpreter), and the
same results from the interpreter as from the GPU: no `tl.fma` where exactness matters (the
interpreter of Triton 3.6 rounds its product), no float32 `/` where exactness matters (a
GPU's is `div.full.f32`, within 2 ulp; `fj_div_rn` is correctly rounded, as float64 `/` is).
The graph's own float32 divisions are `fj_div_rn`, its float32 square roots `fj_sqrt` and
`fj_rsqrt` (kernels.py: a GPU's `tl.sqrt` and `tl.rsqrt` flush subnormal inputs to zero).
"""

from __future__ import annotations

HELPERS = {
    "fj_div_rn": (
        (),
        """\
@triton.jit
def fj_div_rn(x, y):
    # float32 division correctly rounded, as eager's (Triton's `/` is div.full.f32 on a GPU,
    # within 2 ulps: floor_divide's steps then land on the next whole number); div_rn does not
    # broadcast (its result would take x's shape) nor convert, so the operands are broadcast
    # and made float32 first (an integer operand, a size, converts as `/` would convert it)
    x, y = tl.broadcast(x.to(tl.float32), y.to(tl.float32))
    return tl.math.div_rn(x, y)
""",
    ),
    "fj_mul_rn": (
        (),
        """\
@triton.jit
def fj_mul_rn(x, y):
    # x * y rounded, never fused into a following add (a GPU contracts `x * y - 1` into one fma,
    # rounding once where eager's kernel rounds twice): an fma with a +0.0 addend is x * y
    # rounded, and the compiler keeps it (folding it into a multiplication needs
    # no-signed-zeros); but a -0.0 product comes out +0.0, so a zero is the plain product
    # (contracting a zero product into an add changes nothing)
    r = tl.fma(x, y, 0.0)
    return tl.where(r == 0.0, x * y, r)
""",
    ),
    "fj_sqrt": (
        (),
        """\
@triton.jit
def fj_sqrt(x):
    # float32 sqrt correctly rounded, subnormal x too, as eager's (a GPU's tl.sqrt is
    # sqrt.approx.ftz.f32: sqrt(1e-40) gave 0, not 1e-20): sqrt_rn of x scaled by 2**24 out
    # of the subnormal range, scaled back by 2**-12 (both exact)
    small = tl.abs(x) < 1.1754943508222875e-38
    root = tl.sqrt_rn(tl.where(small, x * 16777216.0, x))
    return root * tl.where(small, 0.000244140625, 1.0)
""",
    ),
    "fj_rsqrt": (
        (),
        """\
@triton.jit
def fj_rsqrt(x):
    # float32 rsqrt, subnormal x too: a GPU's tl.rsqrt is rsqrt.approx.ftz.f32 (rsqrt(1e-40)
    # gave inf), eager's rsqrtf the same approximation without the flush; x scaled by 2**24
    # out of the subnormal range, the result by 2**12 (both exact)
    small = tl.abs(x) < 1.1754943508222875e-38
    return tl.rsqrt(tl.where(small, x * 16777216.0, x)) * tl.where(small, 4096.0, 1.0)
""",
    ),
    "fj_exp": (
        (),
        """\
@triton.jit
def fj_exp(x):
    # float32 exp within 2-3 ulps over its whole range, subnormal results too (a GPU's tl.exp
    # is ex2.approx(x * log2(e)): the rounding of that product gave 44 ulps near x = 80). x =
    # n ln2 + f, n = round(x log2(e)) read off the bits of x log2(e) + 1.5 * 2**23; f exact
    # but for one rounding (ln2 in two parts, the first with 16 bits, so n times it is exact
    # and x minus it too), |f| <= ln2 / 2; then exp(f) = exp2(f log2(e)) (ex2.approx on a GPU,
    # 2 ulps for that small argument) times 2**n as two exact powers of two made from their
    # bits, so that neither overflows nor is subnormal (n runs from -150 to 128: x is clamped
    # to [-104, 89] first, past which exp is 0 or inf; NaN goes through the clamp)
    xc = tl.minimum(
        tl.maximum(x, -104.0, propagate_nan=tl.PropagateNan.ALL),
        89.0,
        propagate_nan=tl.PropagateNan.ALL,
    )
    t = xc * 1.4426950408889634 + 12582912.0
    n_float = t - 12582912.0
    f = (xc - n_float * 0.693145751953125) - n_float * 1.428606765330187e-06
    n = t.to(tl.int32, bitcast=True) - 0x4B400000
    half = n >> 1
    scale_a = ((half + 127) << 23).to(tl.float32, bitcast=True)
    scale_b = ((n - half + 127) << 23).to(tl.float32, bitcast=True)
    return tl.exp2(f * 1.4426950408889634) * scale_a * scale_b
""",
    ),
    "fj_sigmoid": (
        ("fj_exp",),
        """\
@triton.jit
def fj_sigmoid(x):
    # 1 / (1 + exp(-x)), eager's formula (CPU and CUDA), with fj_exp: within 4 ulps in float32
    # (a GPU's tl.sigmoid takes its fast exp: 45 ulps)
    return 1.0 / (1.0 + fj_exp(x * -1.0))
""",
    ),
    "fj_expm1": (
        ("fj_exp",),
        """\
@triton.jit
def fj_expm1(x, EXACT: tl.constexpr):
    # exp(x) - 1 without cancellation near 0 (Kahan): (u - 1) * (x / log(u)), the quotient
    # taken first (it is near 1), so that no product overflows below exp's own overflow. In
    # x's dtype: 2-3 ulps in float32 (float64 would be exact to float32's ulp, but expm1 feeds
    # hot activations, ELU and tanh, whose kernels must stay memory-bound on a GPU). EXACT:
    # u from fj_exp (a kernel storing float32), else from tl.exp (its error on a GPU, up to
    # 2**-18 relative, is below a float16 or bfloat16 result's rounding)
    if EXACT:
        u = fj_exp(x)
    else:
        u = tl.exp(x)
    d = u - 1.0
    r = tl.where((d == -1.0) | (u == float("inf")), d, d * (x / tl.log(u)))
    return tl.where(u == 1.0, x, r)
""",
    ),
    "fj_tanh": (
        ("fj_expm1",),
        """\
@triton.jit
def fj_tanh(x, EXACT: tl.constexpr):
    # -expm1(-2|x|) / (expm1(-2|x|) + 2): within 4 ulps in float32 (three roundings, one in a
    # division a GPU does to 2 ulps); not in float64, as tanh (GELU's tanh form) is a hot
    # activation whose kernels must stay memory-bound
    e = fj_expm1(-2.0 * tl.abs(x), EXACT)
    t = -e / (e + 2.0)
    # x itself for +-0 (and NaN), so -0.0 stays -0.0 as in torch
    # `t * -1.0`, not `-t`: Triton 3.6 writes `-t` as `0 - t`, which loses the sign of zero
    return tl.where(x < 0, t * -1.0, tl.where(x > 0, t, x))
""",
    ),
    "fj_log1p": (
        (),
        """\
@triton.jit
def fj_log1p(x):
    # log(1 + x) without cancellation near 0 (Kahan): log(u) * (x / (u - 1)), the quotient
    # taken first (it is near 1), so that log(u) * x does not overflow for a large x. In x's
    # dtype, as fj_expm1 (softplus, a hot activation, uses it).
    u = 1.0 + x
    exact = (u == 1.0) | (u == float("inf"))
    return tl.where(exact, tl.where(u == 1.0, x, u), tl.log(u) * (x / (u - 1.0)))
""",
    ),
    "fj_mul": (
        (),
        """\
@triton.jit
def fj_mul(a, b):
    # the combine function of a product reduction
    return a * b
""",
    ),
    "fj_atan": (
        (),
        """\
@triton.jit
def fj_atan(x):
    # |x| > 1: pi/2 - atan(1/|x|); t > tan(pi/12): pi/6 + atan((t*sqrt(3) - 1) / (t + sqrt(3)));
    # then |u| <= tan(pi/12) and the series to u**11 is within float32 rounding.
    a = tl.abs(x)
    big = a > 1.0
    t = tl.where(big, 1.0 / a, a)
    shift = t > 0.2679491924311227
    u = tl.where(shift, (t * 1.7320508075688772 - 1.0) / (t + 1.7320508075688772), t)
    v = u * u
    p = u * (1.0 + v * (-0.3333333333333333 + v * (0.2 + v * (-0.14285714285714285
        + v * (0.1111111111111111 + v * -0.09090909090909091)))))
    r = tl.where(shift, 0.5235987755982988 + p, p)
    if x.dtype == tl.float64:
        # r = atan(t) to float32 accuracy (~3e-9); one Newton step on tan(r) = t squares the
        # error (float64 sin and cos are accurate: libdevice on a GPU, numpy in the interpreter)
        c = tl.cos(r)
        r = r - c * (tl.sin(r) - t * c)
    r = tl.where(big, 1.5707963267948966 - r, r)
    # x itself for +-0 (and NaN), so -0.0 stays -0.0 as in torch
    return tl.where(x < 0, r * -1.0, tl.where(x > 0, r, x))
""",
    ),
    "fj_atan2": (
        ("fj_atan",),
        """\
@triton.jit
def fj_atan2(y, x):
    # C's atan2, which torch follows: the angle of (|x|, |y|) in [0, pi/2], then mirrored by
    # the sign bits (a zero's too: atan2(+-0, -0) is +-pi, atan2(-0, +0) is -0); NaN if
    # either is NaN. |y| / |x| is +inf for x == 0 (atan gives pi/2) and NaN for 0/0 and
    # inf/inf, whose angles are 0 and pi/4.
    ay = tl.abs(y)
    ax = tl.abs(x)
    r = fj_atan(ay / ax)
    r = tl.where((ay == 0) & (ax == 0), 0.0, r)
    r = tl.where((ay == float("inf")) & (ax == float("inf")), 0.7853981633974483, r)
    # 1 / -0.0 is -inf: the sign bit of a zero without a bitcast (any float dtype)
    r = tl.where((x < 0) | ((x == 0) & (1.0 / x < 0)), 3.141592653589793 - r, r)
    return tl.where((y < 0) | ((y == 0) & (1.0 / y < 0)), r * -1.0, r)
""",
    ),
    "fj_bfloat16_rne": (
        (),
        """\
@triton.jit
def fj_bfloat16_rne(x):
    # float32 -> bfloat16, rounded to nearest even (written out for the CPU interpreter), and
    # made from the bits: the interpreter's own conversion turns subnormals into wrong values.
    # A NaN keeps its sign and high payload, made quiet (rounding could carry it into inf).
    bits = x.to(tl.uint32, bitcast=True)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    high = tl.where(x != x, (bits >> 16) | 0x40, rounded)
    return high.to(tl.uint16).to(tl.bfloat16, bitcast=True)
""",
    ),
    "fj_bfloat16_to_float32": (
        (),
        """\
@triton.jit
def fj_bfloat16_to_float32(x):
    # bfloat16 -> float32 exactly: its bits are float32's upper half (written out for the CPU
    # interpreter, whose conversion normalizes subnormals into wrong values)
    return (x.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
""",
    ),
    "fj_max_nan": (
        (),
        """\
@triton.jit
def fj_max_nan(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)
""",
    ),
    "fj_min_nan": (
        (),
        """\
@triton.jit
def fj_min_nan(a, b):
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)
""",
    ),
    "fj_trunc": (
        (),
        """\
@triton.jit
def fj_trunc(x):
    return tl.where(x < 0, tl.ceil(x), tl.floor(x))
""",
    ),
    "fj_round": (
        (),
        """\
@triton.jit
def fj_round(x):
    # round half to even, as torch.round; x - floor(x) is exact (floor(x + 0.5) is not, for
    # 0.49999997 or 2**23 + 1), and a zero result has x's sign (round(-0.3) is -0.0)
    f = tl.floor(x)
    d = x - f
    odd = (f - 2.0 * tl.floor(f * 0.5)) != 0.0
    r = tl.where((d > 0.5) | ((d == 0.5) & odd), f + 1.0, f)
    return tl.where(r == 0.0, x * 0.0, r)
""",
    ),
    "fj_pow2": (
        (),
        """\
@triton.jit
def fj_pow2(k):
    # 2.0 ** k as float64, from its bits (0 <= k <= 1023)
    return ((k + 1023) << 52).to(tl.float64, bitcast=True)
""",
    ),
    "fj_exponent": (
        (),
        """\
@triton.jit
def fj_exponent(v, WIDE: tl.constexpr):
    # floor(log2(v)) of a float64 v > 0 (or -1023 for 0), from its bits; WIDE: v may be
    # subnormal (float64 data; float32 values are normal in float64), scaled up by 2**54 first
    if WIDE:
        tiny = v < 2.2250738585072014e-308
        e = ((v * tl.where(tiny, 18014398509481984.0, 1.0)).to(tl.int64, bitcast=True) >> 52) - 1023
        e = tl.where(tiny, e - 54, e)
    else:
        e = (v.to(tl.int64, bitcast=True) >> 52) - 1023
    return e
""",
    ),
    "fj_fmod_step": (
        ("fj_pow2", "fj_exponent"),
        """\
@triton.jit
def fj_fmod_step(r, d, ed, WIDE: tl.constexpr):
    # One round of long division, in float64 (r >= 0, d > 0, ed = fj_exponent(d)): r becomes
    # r mod s for s = d * 2**k, k >= 0 the least with r / s < 2**26, so the round takes 25
    # bits off the quotient r / d (all of it once that is below 2**26). q = r / s is correctly
    # rounded (div.rn.f64 on a GPU), so n = floor(q) is the exact quotient's or one more, and
    # r - n * s is exactly representable, in [-s, s): float32 data (s has 24 bits) gives an
    # exact product n * s; float64 data splits s into 26 high and 27 low bits (exact products
    # with n), and adds back the rounding errors of the two subtractions (TwoSum). Every
    # product is exact, so fusing one into an fma changes nothing.
    k = tl.maximum(fj_exponent(r, WIDE) - ed - 25, 0)
    if WIDE:  # k up to 2072: three factors of at most 2**691
        k3 = k // 3
        s = d * fj_pow2(k3) * fj_pow2(k3) * fj_pow2(k - 2 * k3)
    else:
        s = d * fj_pow2(k)
    n = tl.floor(r / s)
    if WIDE:
        hi = (s.to(tl.int64, bitcast=True) & -134217728).to(tl.float64, bitcast=True)
        p1 = n * hi
        p2 = n * (s - hi)
        t1 = r - p1
        b1 = t1 - r
        e1 = (r - (t1 - b1)) + (-p1 - b1)
        t2 = t1 - p2
        b2 = t2 - t1
        e2 = (t1 - (t2 - b2)) + (-p2 - b2)
        v = t2 + (e1 + e2)
    else:
        v = r - n * s
    return tl.where(v < 0, v + s, v)
""",
    ),
    "fj_fmod": (
        ("fj_exponent", "fj_fmod_step"),
        """\
@triton.jit
def fj_fmod(x, y):
    # C's fmod, exactly: x - n * y for n = trunc(x / y) taken exactly (the result is always
    # representable), by long division in float64 (fj_fmod_step), as many rounds as the
    # block's largest quotient needs: one below 2**26, at most 12 for float32, 84 for float64.
    # x itself for |x| < |y| (an infinite y too), NaN for an infinite x, a zero y or a NaN,
    # else the sign of x (a zero result too).
    WIDE: tl.constexpr = x.dtype == tl.float64
    x, y = tl.broadcast(x, y)  # the interpreter cannot `&` a 0-d bool and a block of them
    a = tl.abs(x).to(tl.float64)
    b = tl.abs(y).to(tl.float64)
    live = (a >= b) & (a < float("inf")) & (b > 0)
    r = tl.where(live, a, 0.0)
    d = tl.where(live, b, 1.0)
    ed = fj_exponent(d, WIDE)
    r = fj_fmod_step(r, d, ed, WIDE)
    # reduced over the block (made one of 1 element for a 0-d x)
    while tl.max((r >= d).to(tl.int32) + tl.zeros([1], tl.int32)) != 0:
        r = fj_fmod_step(r, d, ed, WIDE)
    r = tl.where(x < 0, r * -1.0, r).to(x.dtype)  # * -1.0: a zero result gets the sign too
    return tl.where(live, r, tl.where((a < float("inf")) & (b > 0), x, float("nan")))
""",
    ),
}

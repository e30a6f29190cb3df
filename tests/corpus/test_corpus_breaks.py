"""Programs that graph-break, written the way people debug and steer real models.

Debug prints in the middle of a forward, `.item()` / `.tolist()` / `float(t)` feeding Python
arithmetic, branches and loops on tensor values, dynamic shapes (`nonzero`, boolean masks),
calls into C code (`time.perf_counter`, `os.getpid`), breaks in helpers, methods, submodule
forwards and loops. Each must equal eager over two calls, print the same text, and compile
the expected number of graphs; `breaks` is the break count `framejit.explain` reports for
one call.
"""

import functools
import math
import os
import sys
import time

import pytest
import torch
import torch.nn.functional as F
from harness import Corpus, bools, call, ints, rand
from torch import nn

corpus = Corpus(output=True)


def _shape(t):
    return tuple(t.shape)


# --- debug prints ---------------------------------------------------------------------


@corpus.program(lambda: (rand(4, 8),), graphs=2, breaks=1)
def print_shape_mid_function(x):
    h = torch.tanh(x @ x.T)
    print("h:", h.shape)
    return h.softmax(-1)


@corpus.program(lambda: (rand(4, 8),), graphs=1, breaks=1, fullgraph=False)
def print_at_the_start(x):
    print("forward called with", tuple(x.shape), x.dtype)
    return x.relu() * 2


@corpus.program(lambda: (rand(4, 8),), graphs=1, breaks=1, fullgraph=False)
def print_at_the_end(x):
    y = x.sigmoid() + x
    print("done")
    return y


@corpus.program(lambda: (rand(3, 5),), graphs=3, breaks=2)
def two_prints(x):
    a = x * 2
    print("stage 1")
    b = a.exp()
    print("stage 2", b.ndim)
    return b.log() + a


@corpus.program(lambda: (rand(3, 5),), graphs=2, breaks=1)
def print_with_sep_and_end(x):
    y = x.abs()
    print("min", "max", sep=" / ", end=" |\n")
    return y.sqrt()


@corpus.program(lambda: (rand(3, 5),), graphs=2, breaks=2)
def print_fstring_of_item(x):
    loss = (x**2).mean()
    print(f"loss={loss.item():.4f}")
    return loss * 2


@corpus.program(lambda: (rand(6),), graphs=2, breaks=1)
def print_tensor_under_no_grad(x):
    y = (x * 10).round()
    print(y)
    return y + 1


@corpus.program(lambda: (rand(2, 3),), graphs=1, breaks=(1, 2), fullgraph=False)
def print_tolist(x):
    z = x.sum(0)
    print([round(v, 3) for v in z.tolist()])
    return z


@corpus.program(lambda: (rand(4, 4),), graphs=2, breaks=2)
def print_percent_format(x):
    n = x.norm()
    print("norm %.3f of %d elements" % (n.item(), x.numel()))  # noqa: UP031
    return x / n


@corpus.program(lambda: (rand(4, 4),), graphs=1, breaks=1, fullgraph=False)
def print_str_format(x):
    m = x.max(dim=1)
    print("argmax: {}".format(m.indices.tolist()))  # noqa: UP032
    return m.values


@corpus.program(lambda: (rand(4, 4),), graphs=2, breaks=1)
def print_helper_shape(x):
    y = x.t().contiguous()
    print("transposed", _shape(y))
    return y @ x


class PrintingMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        h = F.relu(self.fc1(x))
        print("hidden", h.shape)
        return self.fc2(h)


@corpus.builder(lambda: (rand(3, 8),), graphs=2, breaks=1, grad_modes=True)
def module_forward_with_print():
    return PrintingMLP()


class VerboseBlock(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.ff = nn.Linear(dim, dim)

    def forward(self, x):
        print("block in")
        return x + self.ff(self.norm(x))


class VerboseNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(6, 8)
        self.block = VerboseBlock(8)
        self.out = nn.Linear(8, 2)

    def forward(self, x):
        h = self.inp(x)
        h = self.block(h)
        return self.out(h)


@corpus.builder(lambda: (rand(2, 6),), graphs=3, breaks=(1, 2))
def submodule_forward_with_print():
    return VerboseNet()


class Stack(nn.Module):
    def __init__(self, n=3):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(5, 5) for _ in range(n))

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = torch.tanh(layer(x))
            print(f"layer {i}: {tuple(x.shape)}")
        return x


@corpus.builder(lambda: (rand(2, 5),), graphs=3, breaks=3, fullgraph=False)
def print_in_loop_over_layers():
    return Stack(3)


# --- values read into Python ----------------------------------------------------------


@corpus.program(lambda: (rand(6),), graphs=2, breaks=1)
def item_scale(x):
    m = x.abs().max().item()
    return x / (m + 1e-6)


@corpus.program(lambda: (rand(6),), graphs=2, breaks=1)
def float_of_tensor(x):
    mean = float(x.mean())
    return x - mean, mean


@corpus.program(lambda: (rand(6),), graphs=2, breaks=1)
def int_argmax_indexing(x):
    i = int(x.argmax())
    return x[i] * 2, i


@corpus.program(lambda: (rand(3, 4),), graphs=2, breaks=1)
def tolist_then_python_sum(x):
    row_sums = x.sum(1).tolist()
    total = sum(row_sums)
    return x * total, row_sums


@corpus.program(lambda: (rand(5),), graphs=2, breaks=1)
def item_in_math_module(x):
    v = x.pow(2).sum().item()
    return x * math.sqrt(v), math.log1p(v)


@corpus.program(lambda: (ints(5, 3),), graphs=2, breaks=1)
def item_as_loop_bound(n):
    k = int(n.max().item()) % 3 + 1
    out = torch.zeros(4)
    for j in range(k):
        out = out + j
    return out


@corpus.program(lambda: (rand(8),), graphs=2, breaks=1)
def item_used_as_index(x):
    idx = x.abs().argmin().item()
    return x[: idx + 1].sum()


# 3.11: the comprehension is a call that runs for real at the break (its own frame compiled
# on its own); 3.12 inlines it, and the break resumes inside the loop (3 graphs).
@corpus.program(lambda: (rand(4, 4),), graphs=(1, 3), breaks=(1, 2))
def python_list_of_items(x):
    diag = [x[i, i].item() for i in range(2)]
    return torch.tensor(diag) + x[0, :2]


@corpus.program(lambda: (rand(4),), graphs=2, breaks=1)
def item_as_clamp_bound(x):
    hi = x.mean().item()
    return x.clamp(max=hi)


@corpus.program(lambda: (rand(4), rand(4)), graphs=2, breaks=1)
def accuracy_style_metric(logits, target):
    pred = (logits > 0).float()
    acc = (pred == (target > 0).float()).float().mean().item()
    return logits * acc, round(acc, 4)


@corpus.program(lambda: (rand(5, 3), ints(3, 5)), graphs=1, breaks=1, fullgraph=False)
def loss_item_returned_as_dict(logits, labels):
    loss = F.cross_entropy(logits, labels)
    return {"loss": loss, "loss_value": loss.item()}


@corpus.program(lambda: (rand(3),), graphs=2, breaks=1)
def bool_of_tensor(x):
    positive = bool((x > -10).all())
    return x + 1 if positive else x - 1


# --- branches and loops on tensor values ----------------------------------------------


@corpus.program(lambda: (rand(5),), graphs=2, breaks=1)
def if_sum_positive(x):
    y = x * 3
    if y.sum() > 0:
        return y.relu()
    return y.sigmoid()


@corpus.program(lambda: (-rand(5).abs(),), graphs=2, breaks=1)
def if_sum_positive_other_arm(x):
    y = x * 3
    if y.sum() > 0:
        return y.relu()
    return y.sigmoid()


@corpus.program(lambda: (rand(5), rand(5) > 10), graphs=2, breaks=1)
def if_torch_any_mask(x, mask):
    if torch.any(mask):
        x = x.masked_fill(mask, 0.0)
    return x * 2


@corpus.program(lambda: (rand(5), bools(5)), graphs=2, breaks=1)
def if_mask_any_method(x, mask):
    y = x.exp()
    if mask.any():
        y = y.masked_fill(mask, 0.0)
    return y


@corpus.program(lambda: (rand(4),), graphs=2, breaks=1)
def if_isnan_check(x):
    y = x.log()
    if torch.isnan(y).any():
        y = torch.nan_to_num(y, nan=0.0)
    return y


@corpus.program(lambda: (rand(4, 4),), graphs=2, breaks=1)
def gradient_clipping_style(g):
    norm = g.norm()
    if norm > 1.0:
        g = g * (1.0 / norm)
    return g


@corpus.program(lambda: (rand(3),), graphs=(3, 4, 5, 6, 7), breaks=(1, 2, 3, 4, 5))
def while_loss_above_tol(x):
    w = torch.zeros(3)
    loss = ((w - x) ** 2).sum()
    steps = 0
    while loss > 0.5 and steps < 4:
        w = w + 0.5 * (x - w)
        loss = ((w - x) ** 2).sum()
        steps += 1
    return w, steps


@corpus.program(lambda: (torch.tensor([16.0]),), graphs=(2, 3))  # before the loop, the steps
def newton_sqrt_until_converged(a):
    guess = a / 2
    for _ in range(10):
        nxt = 0.5 * (guess + a / guess)
        if (nxt - guess).abs() < 1e-3:
            break
        guess = nxt
    return guess


@corpus.program(lambda: (rand(5),), graphs=3, breaks=2)
def elif_chain_on_values(x):
    m = x.mean()
    if m > 1:
        return x - 1
    elif m > -1:
        return x * 0.5
    return x + 1


@corpus.program(lambda: (rand(5), rand(5)), graphs=2, breaks=1)
def conditional_expression_on_value(x, y):
    z = x if x.sum() > y.sum() else y
    return z * 2


@corpus.program(lambda: (rand(4, 3),), graphs=2, breaks=1)
def early_return_on_value(x):
    if (x == 0).all():
        return torch.zeros(3)
    return x.mean(0)


@corpus.program(lambda: (rand(6),), graphs=2, breaks=1)
def assert_on_value(x):
    y = x.abs()
    assert (y >= 0).all(), "abs must be non-negative"
    return y.sqrt()


@corpus.program(lambda: (rand(6),), graphs=2, breaks=1)
def if_item_comparison(x):
    if x.max().item() > 5.0:
        x = x / 10
    return x.softmax(0)


class ResidualGate(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        y = self.proj(x)
        if y.mean() > 0:
            return x + y
        return x - y


@corpus.builder(lambda: (rand(3, 4),), graphs=2, breaks=1)
def module_branch_on_activation():
    return ResidualGate()


class EarlyExitStack(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))

    def forward(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x))
            if x.abs().max() > 10.0:
                break
        return x


@corpus.builder(lambda: (rand(2, 4),), graphs=3, breaks=3, fullgraph=False)
def early_exit_loop_over_layers():
    return EarlyExitStack()


# --- dynamic shapes -------------------------------------------------------------------


@corpus.program(lambda: (rand(8),), graphs=2, breaks=1)
def nonzero_indices(x):
    y = x * 2
    idx = torch.nonzero(y > 0).squeeze(1)
    return y[idx].sum() + 1


@corpus.program(lambda: (rand(8),), graphs=2, breaks=1)
def boolean_mask_select(x):
    y = x.exp()
    pos = y[x > 0]
    return pos.mean() if pos.numel() else y.sum()


@corpus.program(lambda: (rand(4, 3),), graphs=2, breaks=1)
def masked_select(x):
    picked = torch.masked_select(x, x > 0.1)
    return picked.sum() * 2


@corpus.program(lambda: (ints(4, 10),), graphs=1, breaks=1, fullgraph=False)
def unique_values(labels):
    classes = torch.unique(labels)
    return classes.float() * 2


@corpus.program(lambda: (rand(6), rand(6)), graphs=2, breaks=1)
def where_single_argument(x, y):
    (idx,) = torch.where(x > y)
    return x[idx] - y[idx]


@corpus.program(lambda: (rand(10),), graphs=2, breaks=1)
def filter_then_stats(x):
    valid = x[~torch.isnan(x)]
    return valid.mean(), valid.std()


@corpus.program(lambda: (rand(5, 3), ints(3, 5)), graphs=2, breaks=1)
def per_class_mean_with_mask(feats, labels):
    mask = labels == 1
    chosen = feats[mask]
    return feats * 2, chosen.sum(0)


@corpus.program(lambda: (rand(5),), graphs=2, breaks=1)
def repeat_interleave_with_tensor_repeats(x):
    reps = torch.tensor([1, 2, 0, 1, 3])
    y = x + 1
    return torch.repeat_interleave(y, reps) * 2


# --- calls into C code ----------------------------------------------------------------


# capture gap: the float from perf_counter() is guarded by value in the resume function,
# so the second call recompiles it
@corpus.program(lambda: (rand(4, 4),), graphs=3, breaks=2)
def perf_counter_timing(x):
    y = x @ x
    start = time.perf_counter()
    z = y.relu()
    elapsed = time.perf_counter() - start
    return z, elapsed >= 0


@corpus.program(lambda: (rand(4),), graphs=2, breaks=1)
def getpid_in_the_middle(x):
    y = x + 1
    pid = os.getpid()
    return y * 2, pid > 0


@corpus.program(
    lambda: (rand(4),),
    graphs=(2, 3),
)
def manual_seed_then_randn(x):
    y = x * 2
    torch.manual_seed(123)
    return y + torch.randn(4)


# capture gap: the int from id() is guarded by value in the resume function (2 graphs when
# the second call's tensor happens to reuse the first one's memory, so its id is the same)
@corpus.program(lambda: (rand(4),), graphs=(2, 3), breaks=1)
def id_of_object(x):
    y = x.cos()
    key = id(y) > 0
    return y * 2 if key else y


# open() and write() run for real; the `with` is entered and left for real at breaks of its own.
@corpus.program(lambda: (rand(3, 3),), graphs=2, breaks=4, fullgraph=False)
def open_devnull_write(x):
    y = x.sum()
    with open(os.devnull, "w") as sink:
        sink.write("logging a value\n")
    return y * 3


# os.environ reads are captured, each variable guarded on its value
@corpus.program(lambda: (rand(3),), graphs=1, breaks=0)
def os_environ_lookup(x):
    y = x + 1
    verbose = os.environ.get("FRAMEJIT_CORPUS_NO_SUCH_VAR", "0") == "1"
    return y * (2 if verbose else 3)


def _log_stats(name, t):
    print(f"{name}: mean={t.mean().item():.3f}")


def _helper_with_print(t):
    u = t * 2
    print("helper")
    return u + 1


def _helper_with_item(t):
    scale = t.abs().max().item()
    return t / scale


def _normalize_if_needed(t):
    if t.norm() > 1:
        return t / t.norm()
    return t


@corpus.program(lambda: (rand(4),), graphs=4, breaks=(1, 2))
def helper_that_prints(x):
    y = x.sin()
    z = _helper_with_print(y)
    return z.cos()


@corpus.program(lambda: (rand(4),), graphs=(3, 4), breaks=(1, 2))
def helper_that_reads_item(x):
    y = x + 1
    z = _helper_with_item(y)
    return z * 3


@corpus.program(lambda: (rand(4) * 5,), graphs=(3, 4), breaks=(1, 2))
def helper_with_value_branch(x):
    y = x - 1
    z = _normalize_if_needed(y)
    return z + 1


@corpus.program(lambda: (rand(4, 3),), graphs=4, breaks=(4, 5, 6))
def stats_logged_by_helper_twice(x):
    h = x.relu()
    _log_stats("h", h)
    g = h * 2 + 1
    _log_stats("g", g)
    return g


# capture gap: a locally defined helper that breaks leaves only one graph
@corpus.program(lambda: (rand(4),), graphs=(1, 2, 3, 4), breaks=(1, 2))
def nested_helpers_break_deep(x):
    def outer(t):
        return _helper_with_print(t) * 2

    return outer(x + 1) - 1


class Printer:
    def __init__(self):
        self.prefix = "dbg"

    def show(self, name, t):
        print(self.prefix, name, tuple(t.shape))
        return t


@corpus.program(lambda: (rand(2, 3), Printer()), graphs=(2, 3), breaks=(1, 2))
def method_that_prints(x, printer):
    y = x @ x.T
    y = printer.show("gram", y)
    return y.trace()


class Tracker:
    def __init__(self):
        self.history = []
        self.calls = 0


# capture gap: appending the float to a list on an input breaks again (`list.append`)
@corpus.program(lambda: (rand(4), Tracker()), graphs=(2, 3), breaks=(1, 2))
def stateful_tracker_across_item(x, tracker):
    tracker.calls += 1
    loss = (x**2).sum()
    tracker.history.append(loss.item())
    return x * len(tracker.history)


@corpus.program(lambda: (rand(4), Tracker()), graphs=2, breaks=1)
def attribute_write_then_print(x, tracker):
    tracker.calls = tracker.calls + 10
    y = x.exp()
    print("calls so far", tracker.calls)
    tracker.history.append(y.sum())
    return y * tracker.calls


@corpus.program(lambda: (rand(4),), graphs=2, breaks=1)
def values_from_both_sides(x):
    before = x * 2
    print("midpoint")
    after = before.exp()
    return before, after, x


@corpus.program(lambda: (rand(4),), graphs=2, breaks=1)
def dict_built_before_break(x):
    out = {"input": x, "double": x * 2}
    print("keys", list(out))
    out["triple"] = out["double"] + x
    return out


@corpus.program(lambda: (rand(4),), graphs=2, breaks=1)
def list_grown_across_break(x):
    feats = [x]
    feats.append(x.sin())
    print(len(feats))
    feats.append(feats[-1] * 2)
    return torch.stack(feats)


@corpus.program(lambda: (rand(3),), graphs=1, breaks=1, fullgraph=False)
def input_returned_after_break(x):
    print("passthrough")
    y = x * 1
    return x, y


@corpus.program(lambda: (rand(3), 2.5, "mean"), graphs=2, breaks=1)
def python_args_live_across_break(x, alpha, reduction):
    y = x * alpha
    print(reduction)
    return y.mean() if reduction == "mean" else y.sum()


@corpus.program(lambda: call(rand(3), scale=3.0), graphs=2, breaks=1)
def kwargs_live_across_break(x, scale=1.0, shift=0.5):
    y = x * scale
    print("scaled")
    return y + shift


@corpus.program(lambda: (rand(3),), graphs=4, breaks=(1, 2))
def break_in_nested_call_args(x):
    return torch.add(x.sin(), _helper_with_item(x.cos()))


@corpus.program(lambda: ([rand(3) for _ in range(3)],), graphs=4, breaks=3, fullgraph=False)
def print_every_iteration(xs):
    out = []
    for i, x in enumerate(xs):
        y = x * (i + 1)
        print("step", i)
        out.append(y.sum())
    return torch.stack(out)


@corpus.program(lambda: (rand(4, 3),), graphs=5, breaks=4, fullgraph=False)
def item_every_iteration(x):
    total = 0.0
    for row in x:
        total += row.sum().item()
    return x * total, total


@corpus.program(lambda: (rand(3),), graphs=2, breaks=1)
def loop_with_one_breaking_iteration(x):
    for i in range(4):
        x = x + i
        if i == 2:
            print("halfway")
    return x * 2


# --- breaks in with-blocks, try-blocks and frames with cells --------------------------


@corpus.program(lambda: (rand(3, grad=True),), graphs=2, breaks=1)
def print_inside_no_grad_block(x):
    y = x * 2
    with torch.no_grad():
        print("in no_grad")
        z = y + 1
    return y, z


@corpus.program(lambda: (rand(3),), graphs=2, breaks=1)
def item_inside_try_block(x):
    try:
        v = x.sum().item()
    except RuntimeError:
        v = 0.0
    return x * v


@corpus.program(lambda: (rand(3),), graphs=2, breaks=1)
def closure_defined_then_break(x):
    scale = x.max()

    def apply(t):
        return t * scale

    print("closure ready")
    return apply(x)


@corpus.program(lambda: (rand(3),), graphs=2, breaks=1)
def try_finally_with_print(x):
    y = x.sin()
    try:
        print("inside try")
        y = y + 1
    finally:
        y = y * 2
    return y


def _safe_scale(t):
    value = t.abs().sum().item()
    if value == 0.0:
        raise ZeroDivisionError("all zeros")
    return 1.0 / value


@corpus.program(lambda: (rand(4),), graphs=2, breaks=1)
def item_inside_try_then_more_work(x):
    h = x.relu() + 1
    try:
        scale = h.sum().item()
    except RuntimeError:
        scale = 1.0
    return (h * scale).softmax(0)


# The raise is a break of its own (building the ValueError is captured); the `except` body runs
# as Python in the same frame.
@corpus.program(lambda: (torch.zeros(4),), graphs=1, breaks=2, fullgraph=False)
def raise_after_the_break_is_caught(x):
    y = x * 2
    try:
        s = y.abs().sum().item()
        if s == 0.0:
            raise ValueError("empty batch")
        y = y / s
    except ValueError as err:
        print("skipping:", err)
        y = y + 1
    return y.exp()


@corpus.program(lambda: (rand(3),), graphs=3, breaks=3)
def finally_runs_once_after_a_print(x):
    y = x.sin()
    try:
        print("step start")
        y = y * 3
        if y.sum() > 100:
            raise RuntimeError("diverged")
    finally:
        print("step end")
    return y + 1


@corpus.program(lambda: (rand(3, grad=True),), graphs=3, breaks=3)
def nested_with_and_try_with_print(x):
    y = x * 2
    try:
        with torch.no_grad():
            z = y + 1
            print("in no_grad", torch.is_grad_enabled())
            if z.sum() > 1e6:
                raise OverflowError("too large")
            z = z * 3
    except OverflowError:
        z = torch.zeros_like(y)
    finally:
        print("grad mode back:", torch.is_grad_enabled())
    return y, z


# The helper runs for real (compiled on its own) and raises; the `except` catches it.
@corpus.program(lambda: (rand(4),), graphs=2, breaks=3)
def helper_raises_inside_try(x):
    try:
        scale = _safe_scale(x * 0)
    except ZeroDivisionError as err:
        print("fallback:", err)
        scale = 0.5
    return x * scale


class _Section:
    """A user context manager that prints when it is entered and left."""

    def __init__(self, name):
        self.name = name

    def __enter__(self):
        print("enter", self.name)
        return self

    def __exit__(self, exc_type, exc, tb):
        print("exit", self.name, exc_type.__name__ if exc_type else None)
        return False


@corpus.program(lambda: (rand(3),), graphs=3, breaks=2)
def with_over_a_user_context_manager(x):
    y = x.exp()
    with _Section("forward") as section:
        z = y.log() + len(section.name)
    return z * 2


@corpus.program(lambda: (rand(3),), graphs=2, breaks=4)
def user_context_manager_sees_the_exception(x):
    y = x + 1
    try:
        with _Section("checked"):
            print("inside")
            if y.sum() > -100:
                raise KeyError("stop")
            y = y * 2
    except KeyError:
        y = y - 1
    return y


@corpus.program(lambda: (rand(2, 4), rand(4, 4)), graphs=3, breaks=2, fullgraph=False)
def print_inside_autocast_block(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        a = x @ w
        print("autocast dtype:", a.dtype)
        b = a @ w
    return a, b, b.float() + 1


@corpus.program(lambda: (rand(3),), graphs=2, breaks=1)
def nonlocal_counter_across_a_break(x):
    calls = 0

    def step(t):
        nonlocal calls
        calls += 1
        return t * calls

    y = step(x)
    print("calls so far:", calls)
    y = step(y)
    return y, calls


# --- models with realistic breaks -----------------------------------------------------


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Linear(12, 3))

    def forward(self, x, labels=None):
        logits = self.body(x)
        if labels is None:
            return logits
        loss = F.cross_entropy(logits, labels)
        acc = (logits.argmax(-1) == labels).float().mean().item()
        return loss, acc


@corpus.builder(
    lambda: (rand(5, 6), ints(3, 5)), graphs=1, breaks=1, fullgraph=False, grad_modes=True
)
def classifier_loss_and_accuracy():
    return Classifier()


@corpus.builder(lambda: (rand(5, 6),))
def classifier_inference_no_break():
    return Classifier()


class TopKRouter(nn.Module):
    """Mixture-of-experts style routing: experts used depend on values."""

    def __init__(self):
        super().__init__()
        self.gate = nn.Linear(4, 3)
        self.experts = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))

    def forward(self, x):
        scores = self.gate(x).softmax(-1)
        choice = scores.argmax(-1)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            sel = choice == e
            if sel.any():
                out[sel] = expert(x[sel])
        return out


@corpus.builder(lambda: (rand(6, 4),), graphs=(4, 5, 6, 7, 8), fullgraph=False)
def moe_routing_with_masks():
    return TopKRouter()


class DebugResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 2, 3, padding=1)
        self.bn = nn.BatchNorm2d(2)

    def forward(self, x):
        y = self.bn(self.conv(x))
        if not torch.isfinite(y).all():
            print("non-finite activations!")
        return F.relu(x + y)


@corpus.builder(lambda: (rand(2, 2, 5, 5),), graphs=2, breaks=1)
def resblock_finite_check_eval():
    return DebugResNet().eval()


@corpus.builder(lambda: (rand(2, 2, 5, 5),), graphs=2, breaks=1)
def resblock_finite_check_train():
    return DebugResNet().train()


class LengthMasker(nn.Module):
    def forward(self, x, lengths):
        max_len = int(lengths.max())
        x = x[:, :max_len]
        mask = torch.arange(max_len)[None, :] < lengths[:, None]
        return (x * mask[..., None]).sum(1) / lengths[:, None]


@corpus.builder(lambda: (rand(3, 6, 2), torch.tensor([2, 4, 3])), graphs=2, breaks=1)
def trim_padding_to_longest():
    return LengthMasker()


def _train_step(model, opt_lr, x, y):
    pred = model(x)
    loss = F.mse_loss(pred, y)
    return loss, loss.item() * opt_lr


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 1)

    def forward(self, x, y):
        loss, scaled = _train_step(self.lin, 0.1, x, y)
        print(f"scaled loss {scaled:.5f}")
        return loss


@corpus.builder(
    lambda: (rand(4, 3), rand(4, 1)), graphs=1, breaks=(2, 3), fullgraph=False, grad_modes=True
)
def training_step_logging():
    return Regressor()


@corpus.program(lambda: (rand(5, 4),), graphs=2, breaks=1)
def topk_then_item_threshold(x):
    vals, idx = x.flatten().topk(3)
    thresh = vals[-1].item()
    return (x >= thresh).float() * x


@corpus.program(lambda: (rand(4),), graphs=1, breaks=1, fullgraph=False)
def numpy_free_round_trip(x):
    values = x.tolist()
    back = torch.tensor([v * 2 for v in values])
    return back + x


@corpus.program(lambda: (rand(4, 4),), graphs=2, breaks=1)
def shape_from_tensor_value(x):
    n = int((x > 0).sum())
    return torch.ones(n + 1) * x.mean()


# --- more everyday patterns -----------------------------------------------------------


class WarmupScale(nn.Module):
    """Learning-rate style warm-up that reads its step counter buffer into Python."""

    def __init__(self):
        super().__init__()
        self.register_buffer("step", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        self.step += 1
        s = int(self.step.item())
        factor = min(1.0, s / 4)
        return x * factor


# capture gap: the int read from the buffer is guarded by value in the resume function, so
# each new step recompiles it
@corpus.builder(lambda: (rand(3),), graphs=3, breaks=1)
def warmup_reads_step_buffer():
    return WarmupScale()


def _logged(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        print("calling", fn.__name__)
        return fn(*args, **kwargs)

    return wrapper


@_logged
def _scaled(t, factor):
    return t * factor


@corpus.program(
    lambda: (rand(3),),
    graphs=(2, 3),
)
def calls_a_decorated_helper_that_prints(x):
    y = x + 1
    return _scaled(y, 2.0) - 1


# capture gap: sys.stdout (a StringIO under capture) makes the whole frame run eagerly
@corpus.program(lambda: (rand(3),), graphs=(0, 1, 2), breaks=(1, 2))
def stdout_write(x):
    y = x.exp()
    sys.stdout.write(f"shape={tuple(y.shape)}\n")
    return y.log()


@corpus.program(lambda: (rand(3),), graphs=2, breaks=1)
def print_flush(x):
    y = x * 4
    print("flushing", flush=True)
    return y - 4


@corpus.program(lambda: (rand(3), rand(3)), graphs=2, breaks=1)
def torch_equal_as_condition(a, b):
    c = a * 2
    if torch.equal(c, b):
        return c
    return c - b


@corpus.program(lambda: (rand(3), rand(3)), graphs=2, breaks=1)
def allclose_as_condition(a, b):
    c = a + b
    if torch.allclose(c, b + a):
        c = c * 10
    return c


@corpus.program(lambda: (torch.tensor([3.0]),), graphs=2, breaks=1)
def if_single_element_tensor(x):
    y = x - 1
    if y:
        return y * 2
    return y


@corpus.program(lambda: (rand(4), rand(4)), graphs=3, breaks=2)
def and_of_two_tensor_conditions(a, b):
    if (a > -5).all() and (b < 5).all():
        return a + b
    return a - b


@corpus.program(lambda: (rand(6),), graphs=2, breaks=1)
def count_nonzero_item(x):
    n = torch.count_nonzero(x > 0).item()
    return x * n, n


@corpus.program(lambda: (ints(5, 6),), graphs=1, breaks=1, fullgraph=False)
def bincount_histogram(labels):
    counts = torch.bincount(labels)
    return counts.float() / labels.numel()


@corpus.program(lambda: (rand(5),), graphs=2, breaks=1)
def python_label_lookup(x):
    names = ["cat", "dog", "bird", "fish", "frog"]
    best = names[x.argmax().item()]
    return x.softmax(0), best


@corpus.program(lambda: (rand(4),), graphs=2, breaks=1)
def max_of_tolist(x):
    y = x * 3
    biggest = max(y.tolist())
    return y - biggest


@corpus.program(lambda: (rand(4),), graphs=2, breaks=1)
def sorted_tolist(x):
    y = x.abs()
    order = sorted(y.tolist(), reverse=True)
    return y / order[0], order


@corpus.program(lambda: (rand(2, 3),), graphs=1, breaks=1, fullgraph=False)
def nested_tolist(x):
    y = x.round(decimals=2)
    return y.tolist()


@corpus.program(lambda: (rand(4),), graphs=2, breaks=1)
def isfinite_of_item(x):
    loss = x.pow(2).mean()
    if not math.isfinite(loss.item()):
        return torch.zeros_like(x)
    return x / loss


@corpus.program(lambda: (rand(4),), graphs=2, breaks=2)
def format_item_exponent(x):
    loss = x.abs().sum()
    print("loss", format(loss.item(), ".3e"))
    return loss.sqrt()


class EarlyStopping:
    def __init__(self):
        self.best = float("inf")
        self.bad_epochs = 0


@corpus.program(lambda: (rand(4), EarlyStopping()), graphs=2, breaks=1)
def early_stopping_update(val_pred, stopper):
    loss = val_pred.pow(2).mean()
    value = loss.item()
    if value < stopper.best:
        stopper.best = value
        stopper.bad_epochs = 0
    else:
        stopper.bad_epochs += 1
    return loss * 2


class Metrics:
    def __init__(self):
        self.values = {}


@corpus.program(lambda: (rand(4, 3), ints(3, 4), Metrics()), graphs=2, breaks=1)
def metrics_dict_of_items(logits, labels, metrics):
    loss = F.cross_entropy(logits, labels)
    metrics.values["loss"] = loss.item()
    metrics.values["n"] = labels.numel()
    return loss + 1


class GradAccumulator:
    def __init__(self):
        self.micro_steps = 0
        self.every = 2


@corpus.program(lambda: (rand(3, 2), GradAccumulator()), graphs=(1, 2), breaks=(0, 1))
def accumulation_counter(x, acc):
    acc.micro_steps += 1
    loss = x.sum() / acc.every
    if acc.micro_steps % acc.every == 0:
        print("optimizer step")
    return loss


@corpus.program(lambda: (rand(3, 4),), graphs=(3, 4), fullgraph=False)
def while_true_with_item_exit(x):
    steps = 0
    while True:
        x = x * 0.5
        steps += 1
        if x.abs().max().item() < 0.5 or steps >= 3:
            break
    return x, steps


@corpus.program(lambda: ([rand(2), rand(2)],), graphs=2, breaks=2)
def nested_loops_with_print(xs):
    out = []
    for i in range(2):
        for x in xs:
            out.append(x * i)
        print("outer", i)
    return out


class Scaler:
    def __init__(self, k):
        self.k = k

    def __call__(self, t):
        print("Scaler called")
        return t * self.k


@corpus.program(lambda: (rand(3), Scaler(3.0)), graphs=(2, 3), breaks=(1, 2))
def callable_object_that_prints(x, scaler):
    return scaler(x.exp()) + 1


class Util:
    @staticmethod
    def norm_and_report(t):
        n = t.norm().item()
        return t / n

    @property
    def offset(self):
        print("offset read")
        return 0.5


@corpus.program(lambda: (rand(3), Util()), graphs=(2, 3, 4), breaks=(1, 2))
def staticmethod_with_item(x, util):
    return Util.norm_and_report(x + 1) * 2


# capture gap: a property that prints makes the whole caller run eagerly
@corpus.program(lambda: (rand(3), Util()), graphs=(0, 1, 2, 3), breaks=(1, 2))
def property_that_prints(x, util):
    return x * 2 + util.offset


# capture gap: a lambda made in the frame that breaks leaves one graph
@corpus.program(lambda: (rand(3),), graphs=(1, 2, 3, 4), breaks=(1, 2))
def lambda_with_item_passed_to_map(x):
    scale = lambda t: t / t.abs().max().item()  # noqa: E731
    parts = list(map(scale, [x, x * 2]))
    return torch.stack(parts)


class Sequential2(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(3, 3), PrintOnce(), nn.Linear(3, 2))

    def forward(self, x):
        return self.net(x).relu()


class PrintOnce(nn.Module):
    def forward(self, x):
        print("activation shape", tuple(x.shape))
        return x


# the break propagates out of Sequential's loop (its `for` keeps a cell-free frame), and each
# module around it is compiled on its own
@corpus.builder(lambda: (rand(4, 3),), graphs=(2, 3, 4), breaks=(1, 2, 3))
def print_module_inside_sequential():
    return Sequential2()


class Gate(nn.Module):
    def __init__(self):
        super().__init__()
        self.score = nn.Linear(4, 1)

    def forward(self, x):
        s = torch.sigmoid(self.score(x)).mean()
        keep = s.item() > 0.5
        return x if keep else x * 0


@corpus.builder(lambda: (rand(2, 4),), graphs=(1, 2), breaks=1)
def module_returns_input_or_zeros_by_value():
    return Gate()


@corpus.program(lambda: (rand(4),), graphs=2, breaks=1)
def str_of_shape_and_dtype(x):
    y = x.to(torch.float64)
    print(str(y.shape), repr(y.dtype))
    return y * 2


@corpus.program(lambda: (rand(5),), graphs=2, breaks=1)
def if_on_numel_of_masked(x):
    pos = x[x > 0]
    if pos.numel() == 0:
        return x.sum()
    return pos.sum() * 2


@corpus.program(lambda: (rand(3, 4),), graphs=3, breaks=2)
def item_then_print_then_more(x):
    m = x.mean().item()
    y = x - m
    print("centered")
    return y.abs().mean(), m


@pytest.mark.parametrize("case", corpus.params())
def test_breaks(case):
    case.run()

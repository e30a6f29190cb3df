"""Leaving from inside compiled code: sys.exit in a function that takes tensors, SystemExit
caught once by the caller, atexit handlers that read tensors, and a final exit with a message
(status 1, the message on stderr)."""

import atexit
import sys

import torch

history = []


def check(loss, step, limit):
    if not torch.isfinite(loss):
        print(f"step {step}: non-finite loss")
        sys.exit(4)
    if loss.item() > limit:
        raise SystemExit(f"loss {loss.item():.2f} above {limit} at step {step}")
    return loss * 1


def train(xs, limit):
    w = torch.ones(2, requires_grad=True)
    for step, x in enumerate(xs):
        loss = check((w * x).sum() ** 2, step, limit)
        history.append(round(loss.item(), 4))
        loss.backward()
        with torch.no_grad():
            w -= 0.01 * w.grad
            w.grad.zero_()
    return w


def report(w):
    print("atexit:", [round(v, 4) for v in w.tolist()], "losses", history, flush=True)


xs = [torch.tensor([1.0, 2.0]), torch.tensor([0.5, 0.5]), torch.tensor([float("inf"), 1.0])]
try:
    train(xs, 100.0)
except SystemExit as e:
    print("caught exit", e.code)
w = train(xs[:2], 100.0)
atexit.register(report, w)
train(xs[:2], 1.0)

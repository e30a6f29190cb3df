"""A small training loop: tensor work in functions and a module, Python work around it."""

import json
import threading

import torch


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 1)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def loss_fn(pred, target):
    return ((pred - target) ** 2).mean()


def scale(x, factor=2.0, *, shift=0.5):
    return x * factor + shift


def batches(n, gen):
    for i in range(n):
        x = torch.randn(4, 8, generator=gen)
        yield i, x, x.sum(dim=1, keepdim=True)


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def describe(x):
    print("shape", tuple(x.shape))  # a graph break: runs eagerly
    return x.abs().sum()


def worker(out, x):
    out.append(float(scale(x, 3.0, shift=1.0).sum()))


def main() -> None:
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step, x, y in batches(6, gen):
        loss = loss_fn(model(scale(x)), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(step, f"{loss.item():.6f}")
    print("fib", fib(15))
    print("describe", f"{describe(torch.ones(2, 3)).item():.1f}")
    try:
        loss_fn(torch.ones(3), torch.ones(4))
    except RuntimeError as exc:
        print("caught", type(exc).__name__)
    out: list[float] = []
    threads = [threading.Thread(target=worker, args=(out, torch.ones(5))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("threads", sorted(out))
    print(json.dumps({"ok": True, "n": fib(10)}))


if __name__ == "__main__":
    main()

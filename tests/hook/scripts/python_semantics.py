"""Python constructs inside functions that take tensors: match, walrus, star-unpacking,
comprehensions with any/all/sorted/max keys, try/finally with return, early returns under
no_grad, f-string '=' specifiers, chained comparisons, del, class attributes changed later."""

import torch
import torch.nn as nn


class Temp(nn.Module):
    temperature = 1.0

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.mode = "soft"

    def forward(self, x):
        logits = self.fc(x) / type(self).temperature
        match self.mode:
            case "soft":
                return logits.softmax(-1)
            case "hard":
                return nn.functional.one_hot(logits.argmax(-1), 4).float()
            case _:
                return logits


def describe(x):
    match x.shape:
        case (n,):
            return f"vector {n}"
        case (n, m) if n == m:
            return f"square {n}"
        case (n, *rest):
            return f"{n} by {rest}"


def stats(*ts):
    first, *rest = ts
    big = [t for t in ts if (s := t.sum()) > 0]
    order = sorted(range(len(ts)), key=lambda i: ts[i].abs().max().item())
    widest = max(ts, key=lambda t: t.numel())
    ok = all(t.dim() == 1 for t in ts) and any(t.numel() > 3 for t in rest)
    total = sum(t.sum() for t in ts)
    return len(big), order, widest.numel(), ok, f"{total.item():.3f}", f"{s.item():.3f}"


def guarded(x):
    try:
        if 0 < x.shape[0] <= 2:
            return x * 2
        y = x + 1
        del x
        return y
    finally:
        guarded.calls = getattr(guarded, "calls", 0) + 1


@torch.no_grad()
def early(x, flag):
    if flag:
        return x.clone()
    z = x.exp()
    return z


def main():
    torch.manual_seed(0)
    m = Temp()
    x = torch.randn(3, 4)
    for mode in ["soft", "hard", "raw"]:
        m.mode = mode
        print(mode, f"{m(x).sum().item():.4f}")
    Temp.temperature = 0.5
    m.mode = "raw"
    print("temp", f"{m(x).sum().item():.4f}")
    for t in [torch.ones(3), torch.ones(2, 2), torch.ones(2, 3, 4)]:
        print(describe(t))
    print(
        stats(torch.tensor([1.0, -3.0]), torch.tensor([-1.0, 0.5, 2.0, 1.0]), torch.tensor([0.25]))
    )
    print(guarded(torch.ones(2)).tolist(), guarded(torch.ones(3)).tolist(), guarded.calls)
    w = torch.ones(2, requires_grad=True)
    print(early(w, True).requires_grad, f"{early(w, False).sum().item():.4f}")
    loss = (w * 3).sum()
    print(f"{loss.item()=:.2f}")


if __name__ == "__main__":
    main()

"""A training step that prints its loss (a graph break) and then fails on a shape: the script
dies with eager's traceback (the step's frame once, at the failing line) and exit status 1."""

import torch


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(x).relu()


def step(model, x):
    h = model(x)
    print(f"loss {h.sum().item():.4f}")  # a break: the rest runs in a resume function
    return h @ torch.ones(4, 2)  # (2x3) @ (4x2) fails


def main() -> None:
    torch.manual_seed(0)
    model = Net()
    try:
        step(model, torch.ones(2, 4))
    except RuntimeError as exc:
        print("caught once:", str(exc).split(" (")[0])
    step(model, torch.ones(2, 4))


if __name__ == "__main__":
    main()

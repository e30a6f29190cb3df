"""A script that uses torch's own compilers beside framejit's hook: torch.jit.script,
torch.jit.trace (its check run traces twice and compares) of a model already called, and
torch.compile(backend="eager"), whose evaluator runs over the hook while it is called."""

import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return torch.tanh(self.fc(x)) * 2


@torch.jit.script
def fused_gelu(x):
    return x * 0.5 * (1.0 + torch.erf(x / 1.41421))


def run(m, x):
    return m(x) + fused_gelu(x[:, :3])


def main():
    torch.manual_seed(0)
    m = Net().eval()
    x = torch.randn(2, 4)
    print(f"plain {run(m, x).sum().item():.4f}")
    traced = torch.jit.trace(m, x)
    scripted = torch.jit.script(m)
    print(f"traced {run(traced, x).sum().item():.4f} scripted {run(scripted, x).sum().item():.4f}")
    print("same", torch.allclose(traced(x + 1), m(x + 1)), [n.kind() for n in traced.graph.nodes()])
    compiled = torch.compile(m, backend="eager")
    print(f"torch.compile {run(compiled, x).sum().item():.4f}")
    print(f"plain again {run(m, x).sum().item():.4f}")


if __name__ == "__main__":
    main()

"""`model.apply(init)`: in whole-script mode `init` meets a module of a new class at each call
(instances of one class would share an entry: config.share_module_graphs), recompiles until the
limit and then runs as Python, without a word on stderr."""

import torch
from torch import nn


def init(m: nn.Module) -> None:
    if isinstance(m, nn.Linear):
        with torch.no_grad():
            m.weight.fill_(0.5)
            m.bias.zero_()


torch.manual_seed(0)
model = nn.Sequential(*[type(f"Linear{i}", (nn.Linear,), {})(4, 4) for i in range(12)])
model.apply(init)
print(f"{model(torch.ones(1, 4)).sum().item():.6f}")

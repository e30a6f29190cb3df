"""Warnings from user code and from torch inside compiled functions: same text, same lines,
same once-only behaviour as without framejit."""

import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F


def legacy(x, scale=None):
    if scale is None:
        warnings.warn("scale=None is deprecated", DeprecationWarning, stacklevel=2)
        scale = 1.0
    return x * scale


def user(x):
    return legacy(x) + 1


class Old(nn.Module):
    def forward(self, x):
        warnings.warn("Old.forward is slow", stacklevel=1)
        return F.softmax(x, dim=-1)


warnings.simplefilter("always", DeprecationWarning)
for _ in range(3):
    print(f"{user(torch.ones(2)).sum().item():.1f}")
m = Old()
for _ in range(3):
    print(f"{m(torch.ones(3)).sum().item():.3f}")
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    legacy(torch.ones(1))
    print("caught", len(w), w[0].category.__name__ if w else None)

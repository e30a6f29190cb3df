"""nn.Modules: built-in layers, containers, custom modules with parameters, buffers, helpers.

Each case builds its module under the fixed seed; `framejit.jit(module)` is compared with a
deep copy run eagerly. Cases with `grad_modes=True` run once under no_grad, once with grad.
"""

import pytest
import torch
import torch.nn.functional as F
from harness import Corpus, call, ints, rand
from torch import nn

corpus = Corpus()


# --- built-in layers ------------------------------------------------------------------


@corpus.builder(lambda: (rand(3, 8),), grad_modes=True)
def linear():
    return nn.Linear(8, 4)


@corpus.builder(lambda: (rand(2, 5, 8),))
def linear_no_bias_3d_input():
    return nn.Linear(8, 4, bias=False)


@corpus.builder(lambda: (rand(2, 3, 8, 8),), grad_modes=True)
def conv2d():
    return nn.Conv2d(3, 4, kernel_size=3, padding=1)


@corpus.builder(lambda: (rand(2, 3, 9, 9),))
def conv2d_stride_groups():
    return nn.Conv2d(3, 6, kernel_size=3, stride=2, groups=3, bias=False)


@corpus.builder(lambda: (rand(2, 4, 16),))
def conv1d():
    return nn.Conv1d(4, 2, kernel_size=5, padding=2)


@corpus.builder(lambda: (rand(2, 5, 8),), grad_modes=True)
def layer_norm():
    return nn.LayerNorm(8)


@corpus.builder(lambda: (rand(4, 3, 6, 6),))
def batch_norm_eval():
    bn = nn.BatchNorm2d(3)
    bn.running_mean.uniform_(-1, 1)
    bn.running_var.uniform_(0.5, 2)
    return bn.eval()


@corpus.builder(lambda: (rand(6, 5),))
def batch_norm_1d_eval():
    return nn.BatchNorm1d(5).eval()


@corpus.builder(lambda: (ints(10, 2, 7),), grad_modes=True)
def embedding():
    return nn.Embedding(10, 4)


@corpus.builder(lambda: (ints(10, 2, 7),))
def embedding_padding_idx():
    return nn.Embedding(10, 4, padding_idx=0)


@corpus.builder(lambda: (rand(3, 8),))
def dropout_eval():
    return nn.Dropout(0.5).eval()


@corpus.builder(lambda: (rand(3, 8),))
def activation_modules():
    return nn.Sequential(
        nn.ReLU(), nn.GELU(), nn.SiLU(), nn.Tanh(), nn.Sigmoid(), nn.Softmax(dim=-1)
    )


@corpus.builder(lambda: (rand(2, 3, 8, 8),))
def pooling_modules():
    return nn.Sequential(nn.MaxPool2d(2), nn.AvgPool2d(2), nn.AdaptiveAvgPool2d(1), nn.Flatten())


@corpus.builder(lambda: (rand(2, 3, 4),))
def identity_module():
    return nn.Sequential(nn.Identity(), nn.Flatten(0, 1))


# --- containers -----------------------------------------------------------------------


@corpus.builder(lambda: (rand(3, 8),), grad_modes=True)
def sequential_mlp():
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


@corpus.builder(lambda: (rand(3, 8),))
def nested_sequential():
    block = nn.Sequential(nn.Linear(8, 8), nn.Tanh())
    return nn.Sequential(
        block, nn.Sequential(nn.Linear(8, 8), nn.Sequential(nn.ReLU())), nn.LayerNorm(8)
    )


class Stack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(6, 6) for _ in range(3)])

    def forward(self, x):
        for layer in self.layers:
            x = x + torch.relu(layer(x))
        return x


@corpus.builder(lambda: (rand(2, 6),), grad_modes=True)
def module_list_loop():
    return Stack()


class IndexedStack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(6, 6) for _ in range(3)])

    def forward(self, x):
        for i in range(len(self.layers)):
            x = self.layers[i](x) * (i + 1)
        return self.layers[-1](x), len(self.layers)


@corpus.builder(lambda: (rand(2, 6),))
def module_list_indexed():
    return IndexedStack()


class Heads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.heads = nn.ModuleDict({"cls": nn.Linear(6, 3), "reg": nn.Linear(6, 1)})

    def forward(self, x):
        out = {name: head(x) for name, head in self.heads.items()}
        out["cls_only"] = self.heads["cls"](x).softmax(-1)
        return out


@corpus.builder(lambda: (rand(2, 6),))
def module_dict():
    return Heads()


class ParameterHolders(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scales = nn.ParameterList([nn.Parameter(torch.randn(4)) for _ in range(2)])
        self.table = nn.ParameterDict({"shift": nn.Parameter(torch.randn(4))})

    def forward(self, x):
        return x * self.scales[0] * self.scales[1] + self.table["shift"]


@corpus.builder(lambda: (rand(3, 4),))
def parameter_list_and_dict():
    return ParameterHolders()


# --- custom modules -------------------------------------------------------------------


class ScaledLinear(nn.Module):
    def __init__(self, din: int, dout: int, scale: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dout, din) * 0.1)
        self.bias = nn.Parameter(torch.zeros(dout))
        self.scale = scale

    def forward(self, x):
        return F.linear(x, self.weight, self.bias) * self.scale


@corpus.builder(lambda: (rand(3, 5),), grad_modes=True)
def custom_parameters_and_attribute():
    return ScaledLinear(5, 4, scale=0.5)


class WithBuffer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.randn(5))
        self.register_buffer("std", torch.rand(5) + 0.5)
        self.register_buffer("unused", None)

    def forward(self, x):
        return (x - self.mean) / self.std


@corpus.builder(lambda: (rand(3, 5),))
def registered_buffers():
    return WithBuffer()


class HelperMethods(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(6, 6)
        self.eps = 1e-5

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def _activate(self, x, kind="gelu"):
        return F.gelu(x) if kind == "gelu" else F.relu(x)

    def forward(self, x):
        return self._activate(self.proj(self._norm(x)), kind="relu") + self._norm(x)


@corpus.builder(lambda: (rand(2, 6),))
def forward_calls_helper_methods():
    return HelperMethods()


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(4, 8)
        self.block = nn.Sequential(nn.LayerNorm(8), nn.Linear(8, 8), nn.GELU())

    def forward(self, x):
        h = self.embed(x)
        return h + self.block(h)


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = Encoder()
        self.head = nn.Linear(8, 3)

    def forward(self, x, labels=None):
        logits = self.head(self.encoder(x).mean(1))
        if labels is None:
            return logits
        return logits, F.cross_entropy(logits, labels)


@corpus.builder(lambda: (rand(2, 5, 4),), grad_modes=True)
def submodules_nested_custom():
    return Classifier()


@corpus.builder(lambda: call(rand(2, 5, 4), labels=ints(3, 2)), grad_modes=True)
def submodules_with_optional_labels():
    return Classifier()


class TiedWeights(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(12, 6)
        self.out = nn.Linear(6, 12, bias=False)
        self.out.weight = self.embed.weight

    def forward(self, tokens):
        return self.out(self.embed(tokens))


@corpus.builder(lambda: (ints(12, 2, 5),))
def tied_weights():
    return TiedWeights()


class ReturnsOwnParameter(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(3))

    def forward(self, x):
        return x * self.weight, self.weight


@corpus.builder(lambda: (rand(3),), grad_modes=True)
def returns_parameter_as_is():
    return ReturnsOwnParameter()


class CountsCalls(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("calls", torch.zeros((), dtype=torch.int64))
        self.linear = nn.Linear(3, 3)

    def forward(self, x):
        self.calls.add_(1)
        return self.linear(x)


@corpus.builder(lambda: (rand(2, 3),))
def buffer_mutated_in_place():
    return CountsCalls()


class EvalChecksTraining(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.dropout = nn.Dropout(0.3)

    def forward(self, x):
        h = self.dropout(self.linear(x))
        if self.training:
            h = h * 100
        return h


@corpus.builder(lambda: (rand(2, 4),))
def branch_on_self_training():
    return EvalChecksTraining().eval()


@corpus.builder(lambda: (rand(2, 4),))
def bound_forward_method():
    return ScaledLinear(4, 2, scale=3.0).forward


class FunctionalStyle(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        y = F.conv2d(x, self.conv.weight, self.conv.bias, padding=1)
        y = F.batch_norm(
            y,
            self.bn.running_mean,
            self.bn.running_var,
            self.bn.weight,
            self.bn.bias,
            training=False,
        )
        return F.max_pool2d(F.relu(y), 2)


@corpus.builder(lambda: (rand(1, 2, 6, 6),))
def functional_calls_on_module_parameters():
    return FunctionalStyle().eval()


@pytest.mark.parametrize("case", corpus.params())
def test_modules(case):
    case.run()

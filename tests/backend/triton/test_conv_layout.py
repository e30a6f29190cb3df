"""Channels-last activations around convolutions (backend/triton/conv_layout.py): the
convolutions get channels-last inputs, the kernels between them keep that layout, and what the
program sees (values, the outputs' strides, gradients) is eager's."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from framejit.backend.aot import aot_compile
from framejit.backend.triton import conv_layout
from triton_helpers import check, tolerance

import framejit

aten = torch.ops.aten


@pytest.fixture(autouse=True)
def exact_convolutions() -> Iterator[None]:
    """float32 convolutions in float32: on CUDA cuDNN takes TF32 by default (10-bit mantissas),
    and the channels-last and NCHW calls pick different algorithms, so eager's values and the
    pass's differed by 2e-4 (1e-3 after as_strided's `* 3`), far past float32's tolerance."""
    cudnn = torch.backends.cudnn
    # the context manager: torch's test utilities (the op sweep imports them) forbid setting
    # the flags directly; it sets them all, so the others are passed as they are
    with cudnn.flags(
        enabled=cudnn.enabled,
        benchmark=cudnn.benchmark,
        deterministic=cudnn.deterministic,
        allow_tf32=False,
    ):
        yield


@pytest.fixture
def channels_last() -> Iterator[None]:
    old = framejit.config.conv_layout
    framejit.config.conv_layout = "channels_last"
    yield
    framejit.config.conv_layout = old


def _aten_graph(fn: Any, *args: Any, grad: bool = False) -> list[torch.fx.GraphModule]:
    """The aten graphs the AOT stage hands the backend for `fn` (inference, or forward and
    backward when `grad`)."""
    found: list[torch.fx.GraphModule] = []

    def inner(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        found.append(gm)
        return gm.forward

    with torch.set_grad_enabled(grad):
        framejit.jit(fn, backend=lambda gm, inputs: aot_compile(gm, inputs, inner))(*args)
    return found


def _conv_inputs(gm: torch.fx.GraphModule) -> list[torch.Tensor]:
    return [
        n.args[0].meta["val"]
        for n in gm.graph.nodes
        if n.op == "call_function" and n.target is aten.convolution.default
    ]


class Block(nn.Module):
    """conv-bn-relu twice with a residual add, then a 1x1 downsampling conv: the ResNet shape."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(4, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(8)
        self.down = nn.Conv2d(8, 6, 1, stride=2)
        for bn in (self.bn1, self.bn2):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)) + y)
        return self.down(y)


def _block() -> nn.Module:
    torch.manual_seed(0)
    return Block().eval()


def test_every_convolution_reads_a_channels_last_input_and_one_copy_is_made() -> None:
    model = _block()
    x = torch.randn(2, 4, 8, 8)
    (gm,) = _aten_graph(model, x)
    assert not any(v.is_contiguous(memory_format=torch.channels_last) for v in _conv_inputs(gm))
    laid = conv_layout.channels_last(gm)
    assert laid is not None
    inputs = _conv_inputs(laid)
    assert len(inputs) == 3
    assert all(v.is_contiguous(memory_format=torch.channels_last) for v in inputs)
    # only the graph's input is copied: the kernels between the convolutions write channels-last
    # and the output is copied back to eager's layout
    clones = [
        n.kwargs["memory_format"]
        for n in laid.graph.nodes
        if n.op == "call_function" and n.target is aten.clone.default
    ]
    assert clones == [torch.channels_last, torch.contiguous_format]
    out = laid.graph.output_node().args[0][0].meta["val"]
    assert out.is_contiguous()


def test_the_pass_does_not_change_values_or_output_layouts(channels_last: None) -> None:
    model = _block()
    check(model, torch.randn(2, 4, 8, 8))
    # an input that is channels-last already: no copy, and the output stays channels-last
    check(model, torch.randn(2, 4, 8, 8).contiguous(memory_format=torch.channels_last))


def test_outputs_between_convolutions_keep_eager_layouts(channels_last: None) -> None:
    conv = nn.Conv2d(3, 5, 3, padding=1).eval()

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        feature = torch.relu(conv(x))
        return feature, feature.sum((2, 3)), feature.flatten(1), feature[:, :, 1:, ::2] * 2

    check(fn, torch.randn(2, 3, 6, 7))


def test_a_view_channels_last_cannot_express_restores_the_layout(channels_last: None) -> None:
    conv = nn.Conv2d(3, 5, 3, padding=1).eval()

    def fn(x: torch.Tensor) -> torch.Tensor:
        y = conv(x)
        return y.view(2, 30, 7).softmax(-1)  # C with H: not a view of channels-last memory

    (gm,) = _aten_graph(fn, torch.randn(2, 3, 6, 7))
    assert conv_layout.channels_last(gm) is not None
    check(fn, torch.randn(2, 3, 6, 7))


def test_as_strided_reads_memory_in_the_original_layout(channels_last: None) -> None:
    conv = nn.Conv2d(3, 4, 1).eval()

    def fn(x: torch.Tensor) -> torch.Tensor:
        y = conv(x) + 1
        # reads y's memory by strides: the first 10 elements of its NCHW storage
        return torch.as_strided(y, (2, 5), (5, 1)) * 3

    check(fn, torch.randn(2, 3, 4, 4))


def test_training_gradients_equal_eager(channels_last: None) -> None:
    torch.manual_seed(0)
    model = Block().train()
    ref = Block().train()
    ref.load_state_dict(model.state_dict())
    x = torch.randn(2, 4, 8, 8, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    fast = framejit.jit(model, backend="triton")
    out = fast(x)
    expected = ref(x_ref)
    weights = torch.randn_like(expected)
    (out * weights).sum().backward()
    (expected * weights).sum().backward()
    tol = tolerance(torch.float32)
    torch.testing.assert_close(out, expected, **tol)
    assert out.stride() == expected.stride()
    torch.testing.assert_close(x.grad, x_ref.grad, **tol)
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, **tol)
    torch.testing.assert_close(model.bn1.running_mean, ref.bn1.running_mean, **tol)


def test_when_the_pass_runs() -> None:
    model = _block()
    x = torch.randn(2, 4, 8, 8)
    (gm,) = _aten_graph(model, x)
    old = framejit.config.conv_layout
    try:
        framejit.config.conv_layout = "auto"
        assert gm.meta.get("aot_kind") == "inference"
        assert not conv_layout.wanted(gm)  # CPU tensors: only for CUDA
        framejit.config.conv_layout = "channels_last"
        assert conv_layout.wanted(gm)
        framejit.config.conv_layout = "keep"
        assert not conv_layout.wanted(gm)
    finally:
        framejit.config.conv_layout = old
    (plain,) = _aten_graph(lambda a: a.sin() * 2, torch.randn(3))
    assert conv_layout.channels_last(plain) is None


def test_conv_layout_setting_is_checked() -> None:
    with pytest.raises(ValueError, match="conv_layout must be one of"):
        framejit.config.conv_layout = "nhwc"
    with pytest.raises(TypeError, match="conv_layout must be one of"):
        framejit.config.conv_layout = None  # type: ignore[assignment]


@pytest.mark.cuda
def test_auto_lays_out_half_precision_inference_on_cuda() -> None:
    assert framejit.config.conv_layout == "auto"
    model = _block().cuda().to(torch.bfloat16)
    x = torch.randn(2, 4, 8, 8, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        (gm,) = _aten_graph(model, x)
    assert conv_layout.wanted(gm)
    assert conv_layout.channels_last(gm) is not None
    check(model, x, device="cuda")

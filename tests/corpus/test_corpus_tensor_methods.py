"""Tensor methods and attributes, and the torch.* functions users reach for."""

import pytest
import torch
import torch.nn.functional as F
from harness import EMPTY, Corpus, ints, rand

corpus = Corpus()


# --- attributes read during tracing ---------------------------------------------------


@corpus.program(lambda: (rand(2, 3, 4),))
def shape_unpack(x):
    b, t, c = x.shape
    return x.reshape(b * t, c)


@corpus.program(lambda: (rand(2, 3, 4),))
def size_calls(x):
    return x.view(x.size(0), -1) * x.size(-1) + x.size()[1]


@corpus.program(lambda: (rand(2, 3, 4),))
def ndim_and_numel(x):
    return x.flatten() * x.ndim + x.numel() + x.dim()


@corpus.program(lambda: (rand(2, 3),))
def dtype_and_device_attributes(x):
    return torch.zeros(x.shape, dtype=x.dtype, device=x.device) + x


@corpus.program(lambda: (rand(3, 5),))
def transpose_attributes(x):
    return x.T @ x, x.mT.contiguous()


@corpus.program(lambda: (rand(2, 3, 5),))
def batched_mT(x):
    return x @ x.mT


# --- reshaping ------------------------------------------------------------------------


@corpus.program(lambda: (rand(2, 3, 4),))
def view_reshape_flatten(x):
    return x.view(6, 4), x.reshape(-1), x.flatten(1), x.flatten(0, 1).shape


@corpus.program(lambda: (rand(2, 3, 4),))
def permute_transpose_contiguous(x):
    y = x.permute(2, 0, 1).contiguous()
    z = x.transpose(1, 2).reshape(2, 12)
    return y, z, x.transpose(-1, -2).is_contiguous()


@corpus.program(lambda: (rand(3, 4),))
def unsqueeze_squeeze(x):
    y = x.unsqueeze(0).unsqueeze(-1)
    return y.shape, y.squeeze(-1), y.squeeze()


@corpus.program(lambda: (rand(6, 4),))
def chunk_and_split(x):
    a, b = x.chunk(2, dim=0)
    c, d, e = x.split([1, 2, 1], dim=1)
    f = x.split(4)
    return a + b, c * e, d.sum(), len(f), f[1]


@corpus.program(lambda: (rand(2, 3),))
def expand_and_repeat(x):
    return (
        x.unsqueeze(0).expand(4, -1, -1),
        x.repeat(2, 3),
        x.expand_as(torch.empty(5, 2, 3)).sum(0),
    )


@corpus.program(lambda: (rand(1, 3),))
def broadcast_to(x):
    return torch.broadcast_to(x, (4, 3)) * 2


@corpus.program(lambda: (rand(2, 6),))
def unflatten_and_movedim(x):
    return x.unflatten(1, (2, 3)).movedim(0, -1)


# --- dtype conversion -----------------------------------------------------------------


@corpus.program(lambda: (rand(3, 3),))
def to_dtype_and_back(x):
    y = x.to(torch.float64) * 2
    return y, y.float(), y.to(torch.int32), x.half().float()


@corpus.program(lambda: (rand(3, 3), ints(4, 3, 3)))
def type_as_and_long(x, n):
    return n.type_as(x) + x, (x * 10).long(), x.int(), (x > 0).to(x.dtype)


@corpus.program(lambda: (rand(3, 3),))
def to_same_dtype_and_device(x):
    return x.to(x.device).to(x.dtype) * 2


# --- new tensors ----------------------------------------------------------------------


@corpus.program(lambda: (rand(3, 4),))
def new_zeros_ones_full(x):
    return x.new_zeros(2, 4), x.new_ones((3,)), x.new_full((2, 2), 7.0), x.new_empty(2).shape


@corpus.program(lambda: (rand(3, 4),))
def like_constructors(x):
    return torch.zeros_like(x) + torch.ones_like(x) * torch.full_like(x, 3.0)


@corpus.program(lambda: (rand(3, 4),))
def ones_with_input_shape(x):
    return torch.ones(x.shape) + torch.zeros(x.shape[0], 1) + x


@corpus.program(lambda: (rand(5, 3),))
def arange_and_linspace(x):
    positions = torch.arange(x.shape[0])
    grid = torch.linspace(0, 1, steps=3)
    return x * positions.unsqueeze(-1) + grid, torch.arange(0, 10, 3, dtype=torch.float32)


@corpus.program(lambda: (rand(4, 4),))
def eye_and_tensor_constant(x):
    return x + torch.eye(4) + torch.tensor([1.0, 2.0, 3.0, 4.0])


# --- reductions -----------------------------------------------------------------------


@corpus.program(lambda: (rand(3, 4, 5),))
def sum_mean_keepdim(x):
    return x.sum(), x.sum(-1), x.sum(dim=1, keepdim=True), x.mean((0, 2)), x.mean(-1, keepdim=True)


@corpus.program(lambda: (rand(3, 5),))
def max_with_dim_namedtuple(x):
    result = x.max(dim=-1)
    return result.values * 2, result.indices


@corpus.program(lambda: (rand(3, 5),))
def max_unpacked_and_returned_whole(x):
    values, indices = torch.max(x, 1)
    return values + 1, indices, x.min(0)


@corpus.program(lambda: (rand(3, 5),))
def argmax_argmin_all_any(x):
    return x.argmax(-1), x.argmin(), (x > 0).all(), (x > 0).any(dim=1)


@corpus.program(lambda: (rand(3, 5),))
def var_std_prod_amax(x):
    return x.var(dim=1), x.std(0, unbiased=False), x.prod(1), x.amax(dim=-1), x.logsumexp(-1)


@corpus.program(lambda: (rand(3, 5),))
def cumsum_cumprod(x):
    return x.cumsum(dim=1), torch.cumprod(x, dim=0)


@corpus.program(lambda: (rand(3, 5),))
def norms(x):
    return (
        x.norm(),
        x.norm(dim=-1, keepdim=True),
        torch.linalg.vector_norm(x, ord=2, dim=0),
        x.norm(p=1),
    )


@corpus.program(lambda: (rand(4, 6),))
def topk_and_sort(x):
    values, indices = x.topk(2, dim=-1)
    ordered = torch.sort(x, dim=0, descending=True)
    return values, indices, ordered.values, ordered.indices


# --- elementwise methods --------------------------------------------------------------


@corpus.program(lambda: (rand(3, 5),))
def softmax_methods(x):
    return x.softmax(-1), x.log_softmax(dim=1), torch.softmax(x, 0)


@corpus.program(lambda: (rand(3, 5), torch.rand(3, 5) > 0.5))
def masked_fill_with_static_mask(x, mask):
    return x.masked_fill(mask, float("-inf")).softmax(-1), x.masked_fill(~mask, 0.0)


@corpus.program(lambda: (rand(3, 5),))
def clamp_variants(x):
    return x.clamp(-0.5, 0.5), x.clamp(min=0), x.clamp_max(0.1), torch.clip(x, -1, 1)


@corpus.program(lambda: (rand(3, 5),))
def activation_methods(x):
    return x.tanh(), x.sigmoid(), x.relu(), x.exp().log1p(), x.sin().abs().sqrt()


@corpus.program(lambda: (rand(3, 5),))
def method_chain(x):
    return x.abs().add(1).log().mul(2).sub_(0.5).neg()


@corpus.program(lambda: (rand(4, 3),))
def clone_detach(x):
    y = x.clone()
    y[0] = 1.0
    return y, x.detach() * 2


# --- torch functions ------------------------------------------------------------------


@corpus.program(lambda: (rand(2, 3), rand(2, 3)))
def cat_and_stack(x, y):
    return (
        torch.cat([x, y], dim=0),
        torch.cat((x, y), -1),
        torch.stack([x, y]),
        torch.stack((x, y), dim=2),
    )


@corpus.program(lambda: (rand(3, 4), rand(3, 4)))
def where_variants(x, y):
    return torch.where(x > 0, x, 0.0), torch.where(x > y, x - y, y - x)


@corpus.program(lambda: (rand(2, 3, 4), rand(2, 4, 5)))
def bmm_and_matmul(a, b):
    return torch.bmm(a, b), torch.matmul(a, b), torch.matmul(a[0], b[0])


@corpus.program(lambda: (rand(2, 3, 5), rand(2, 3, 4), rand(2, 4, 5)))
def baddbmm(bias, a, b):
    return torch.baddbmm(bias, a, b, beta=0.5, alpha=2.0)


@corpus.program(lambda: (rand(2, 3, 4), rand(4, 5)))
def einsum_patterns(x, w):
    return (
        torch.einsum("btc,cd->btd", x, w),
        torch.einsum("bij->bji", x),
        torch.einsum("bij,bij->b", x, x),
    )


@corpus.program(lambda: (rand(4, 4),))
def tril_triu(x):
    return torch.tril(x), torch.triu(x, diagonal=1), x.tril(-1)


@corpus.program(lambda: (rand(3), rand(4)))
def outer_and_dot(a, b):
    return torch.outer(a, b), torch.dot(a, a), a @ a


@corpus.program(lambda: (rand(3, 4), rand(4), rand(3)))
def addmm_mv_addmv(x, v, bias):
    return (
        torch.addmm(bias.unsqueeze(1), x, v.unsqueeze(1)),
        torch.mv(x, v),
        torch.addmv(bias, x, v),
    )


@corpus.program(lambda: (rand(3, 4),))
def flip_roll(x):
    return torch.flip(x, dims=[0]), torch.roll(x, shifts=1, dims=1), x.fliplr()


@corpus.program(lambda: (rand(5, 4), ints(5, 3, 4)))
def gather_and_scatter(x, index):
    gathered = torch.gather(x, 0, index)
    scattered = torch.zeros(5, 4).scatter_add(0, index, gathered)
    return gathered, scattered


@corpus.program(lambda: (rand(3, 4),))
def diagonal_and_trace(x):
    return torch.diagonal(x), torch.diag(x[:, :3]), torch.trace(x[:, :3]), torch.diag_embed(x[0])


@corpus.program(lambda: (rand(3, 4),), graphs=EMPTY)
def returns_shape_only(x):
    return x.shape


@corpus.program(lambda: (rand(3, 4),), graphs=EMPTY)
def returns_size_and_dtype_no_tensor_work(x):
    return x.size(), x.dtype, x.device, x.ndim


# --- torch.nn.functional --------------------------------------------------------------


@corpus.program(lambda: (rand(3, 6),))
def functional_activations(x):
    return (
        F.relu(x),
        F.gelu(x),
        F.gelu(x, approximate="tanh"),
        F.silu(x),
        F.leaky_relu(x, 0.1),
        F.elu(x),
    )


@corpus.program(lambda: (rand(3, 6),))
def functional_softmax_family(x):
    return F.softmax(x, dim=-1), F.log_softmax(x, dim=0), F.softplus(x), F.hardtanh(x)


@corpus.program(lambda: (rand(2, 5, 8), rand(8), rand(8)))
def functional_layer_norm(x, weight, bias):
    return F.layer_norm(x, (8,), weight, bias, eps=1e-5), F.layer_norm(x, x.shape[-1:])


@corpus.program(lambda: (rand(3, 8), rand(4, 8), rand(4)))
def functional_linear(x, weight, bias):
    return F.linear(x, weight, bias), F.linear(x, weight)


@corpus.program(lambda: (rand(2, 3, 8, 8), rand(4, 3, 3, 3), rand(4)))
def functional_conv2d_and_pooling(x, weight, bias):
    y = F.conv2d(x, weight, bias, stride=1, padding=1)
    return (
        F.max_pool2d(y, kernel_size=2),
        F.avg_pool2d(y, 2, stride=2),
        F.adaptive_avg_pool2d(y, (1, 1)),
    )


@corpus.program(lambda: (rand(4, 8),))
def functional_dropout_not_training(x):
    return F.dropout(x, p=0.5, training=False) * 2


@corpus.program(lambda: (rand(4, 5), ints(5, 4)))
def functional_cross_entropy(logits, target):
    return F.cross_entropy(logits, target), F.cross_entropy(logits, target, reduction="sum")


@corpus.program(lambda: (rand(4, 5), rand(4, 5)))
def functional_regression_losses(pred, target):
    return F.mse_loss(pred, target), F.l1_loss(pred, target), F.smooth_l1_loss(pred, target)


@corpus.program(lambda: (rand(4, 5), torch.rand(4, 5)))
def functional_bce_with_logits(logits, target):
    return F.binary_cross_entropy_with_logits(logits, target)


@corpus.program(lambda: (rand(2, 2, 6, 4), rand(2, 2, 6, 4), rand(2, 2, 6, 4)))
def functional_scaled_dot_product_attention(q, k, v):
    return F.scaled_dot_product_attention(q, k, v), F.scaled_dot_product_attention(
        q, k, v, is_causal=True
    )


@corpus.program(lambda: (rand(2, 3, 4),))
def functional_pad(x):
    return F.pad(x, (1, 2)), F.pad(x, (0, 0, 1, 1), value=-1.0), F.pad(x, (1, 1), mode="replicate")


@corpus.program(lambda: (rand(4, 6),))
def functional_normalize(x):
    return F.normalize(x, dim=-1), F.normalize(x, p=1, dim=0)


@corpus.program(lambda: (ints(5, 7),))
def functional_one_hot(labels):
    return F.one_hot(labels, num_classes=5), F.one_hot(labels, 5).float().sum(0)


@corpus.program(lambda: (ints(10, 2, 3), rand(10, 4)))
def functional_embedding(tokens, table):
    return F.embedding(tokens, table)


@corpus.program(lambda: (rand(1, 2, 4, 4),))
def functional_interpolate(x):
    return F.interpolate(x, scale_factor=2, mode="nearest"), F.interpolate(
        x, size=(6, 6), mode="bilinear", align_corners=False
    )


@corpus.program(lambda: (rand(3, 4), rand(3, 4)))
def functional_cosine_similarity(a, b):
    return F.cosine_similarity(a, b, dim=-1), torch.cdist(a, b)


@pytest.mark.parametrize("case", corpus.params())
def test_tensor_methods(case):
    case.run()

"""Inference and model code written the way current PyTorch code is written (HuggingFace-style
attention, rotary embeddings, KV caches, MoE routers, U-Nets, taggers), not around what the
translator supports. Counts are what a good compiler should reach; where framejit does worse
the count is what it does, with a `# capture gap:` comment.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from harness import Corpus, bools, call, ints, rand
from torch import nn

corpus = Corpus()
logger = logging.getLogger("corpus.realistic")


def small_config(**overrides):
    config = SimpleNamespace(
        hidden_size=32,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        vocab_size=50,
        max_position_embeddings=64,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        attention_dropout=0.0,
        num_hidden_layers=1,
        hidden_act="silu",
    )
    for key, value in overrides.items():
        setattr(config, key, value)
    return config


# ---------------------------------------------------------------------------------------
# norms and MLPs


class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)

    def extra_repr(self):
        return f"{tuple(self.weight.shape)}, eps={self.variance_epsilon}"


@corpus.builder(lambda: (rand(2, 5, 32),))
def rmsnorm_llama():
    return LlamaRMSNorm(32)


# bf16 tolerances: the Triton backend keeps the float32 value where eager rounds it to bf16
@corpus.builder(lambda: (rand(2, 5, 32, dtype=torch.bfloat16),), rtol=1.6e-2, atol=1e-2)
def rmsnorm_bf16_input():
    return LlamaRMSNorm(32)


class LayerNormNoBias(nn.Module):
    """LayerNorm with an optional bias (PyTorch's lacked `bias=False` for years)."""

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, input):
        return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)


@corpus.builder(lambda: (rand(3, 16),))
def layernorm_optional_bias():
    return nn.Sequential(LayerNormNoBias(16, bias=False), LayerNormNoBias(16, bias=True))


ACT2FN = {"silu": nn.SiLU, "gelu": nn.GELU, "relu": nn.ReLU}


class LlamaMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.hidden_size = config.hidden_size
        self.intermediate_size = config.intermediate_size
        self.gate_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=False)
        self.up_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=False)
        self.down_proj = nn.Linear(self.intermediate_size, self.hidden_size, bias=False)
        self.act_fn = ACT2FN[config.hidden_act]()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


@corpus.builder(lambda: (rand(2, 4, 32),))
def swiglu_mlp():
    return LlamaMLP(small_config())


class GEGLU(nn.Module):
    def __init__(self, dim_in, dim_out):
        super().__init__()
        self.proj = nn.Linear(dim_in, dim_out * 2)

    def forward(self, hidden_states):
        hidden_states, gate = self.proj(hidden_states).chunk(2, dim=-1)
        return hidden_states * F.gelu(gate, approximate="tanh")


@corpus.builder(lambda: (rand(2, 6, 16),))
def geglu_feedforward():
    return nn.Sequential(GEGLU(16, 32), nn.Dropout(0.0), nn.Linear(32, 16))


# ---------------------------------------------------------------------------------------
# rotary embeddings and attention


class RotaryEmbedding(nn.Module):
    def __init__(self, dim, max_position_embeddings=64, base=10000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self._set_cos_sin_cache(max_position_embeddings)

    def _set_cos_sin_cache(self, seq_len):
        self.max_seq_len_cached = seq_len
        t = torch.arange(seq_len, dtype=torch.int64).type_as(self.inv_freq)
        freqs = torch.outer(t, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos(), persistent=False)
        self.register_buffer("sin_cached", emb.sin(), persistent=False)

    def forward(self, x, seq_len=None):
        if seq_len > self.max_seq_len_cached:
            self._set_cos_sin_cache(seq_len)
        return (
            self.cos_cached[:seq_len].to(dtype=x.dtype),
            self.sin_cached[:seq_len].to(dtype=x.dtype),
        )


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, position_ids, unsqueeze_dim=1):
    cos = cos[position_ids].unsqueeze(unsqueeze_dim)
    sin = sin[position_ids].unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


def repeat_kv(hidden_states: torch.Tensor, n_rep: int) -> torch.Tensor:
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(
        batch, num_key_value_heads, n_rep, slen, head_dim
    )
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


class LlamaAttention(nn.Module):
    def __init__(self, config, layer_idx: int | None = None):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.hidden_size = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_dim = self.hidden_size // self.num_heads
        self.num_key_value_heads = getattr(config, "num_key_value_heads", self.num_heads)
        self.num_key_value_groups = self.num_heads // self.num_key_value_heads
        self.attention_dropout = getattr(config, "attention_dropout", 0.0)
        self.is_causal = True
        self.q_proj = nn.Linear(self.hidden_size, self.num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(
            self.hidden_size, self.num_key_value_heads * self.head_dim, bias=False
        )
        self.v_proj = nn.Linear(
            self.hidden_size, self.num_key_value_heads * self.head_dim, bias=False
        )
        self.o_proj = nn.Linear(self.hidden_size, self.hidden_size, bias=False)
        self.rotary_emb = RotaryEmbedding(
            self.head_dim, config.max_position_embeddings, base=config.rope_theta
        )

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_value: tuple[torch.Tensor, torch.Tensor] | None = None,
        output_attentions: bool = False,
        use_cache: bool = False,
        **kwargs,
    ):
        bsz, q_len, _ = hidden_states.size()
        query_states = self.q_proj(hidden_states)
        key_states = self.k_proj(hidden_states)
        value_states = self.v_proj(hidden_states)
        query_states = query_states.view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        key_states = key_states.view(bsz, q_len, self.num_key_value_heads, self.head_dim).transpose(
            1, 2
        )
        value_states = value_states.view(
            bsz, q_len, self.num_key_value_heads, self.head_dim
        ).transpose(1, 2)

        kv_seq_len = key_states.shape[-2]
        if past_key_value is not None:
            kv_seq_len += past_key_value[0].shape[-2]
        if position_ids is None:
            position_ids = torch.arange(
                kv_seq_len - q_len, kv_seq_len, dtype=torch.long, device=hidden_states.device
            ).unsqueeze(0)
        cos, sin = self.rotary_emb(value_states, seq_len=kv_seq_len)
        query_states, key_states = apply_rotary_pos_emb(
            query_states, key_states, cos, sin, position_ids
        )

        if past_key_value is not None:
            key_states = torch.cat([past_key_value[0], key_states], dim=2)
            value_states = torch.cat([past_key_value[1], value_states], dim=2)
        past_key_value = (key_states, value_states) if use_cache else None

        key_states = repeat_kv(key_states, self.num_key_value_groups)
        value_states = repeat_kv(value_states, self.num_key_value_groups)

        attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) / math.sqrt(
            self.head_dim
        )
        if attention_mask is not None:
            if attention_mask.size() != (bsz, 1, q_len, kv_seq_len):
                raise ValueError(
                    f"Attention mask should be of size {(bsz, 1, q_len, kv_seq_len)}, "
                    f"but is {attention_mask.size()}"
                )
            attn_weights = attn_weights + attention_mask
        attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(
            query_states.dtype
        )
        attn_weights = nn.functional.dropout(
            attn_weights, p=self.attention_dropout, training=self.training
        )
        attn_output = torch.matmul(attn_weights, value_states)
        if attn_output.size() != (bsz, self.num_heads, q_len, self.head_dim):
            raise ValueError(
                f"`attn_output` should be of size {(bsz, self.num_heads, q_len, self.head_dim)}"
            )
        attn_output = attn_output.transpose(1, 2).contiguous()
        attn_output = attn_output.reshape(bsz, q_len, self.hidden_size)
        attn_output = self.o_proj(attn_output)
        if not output_attentions:
            attn_weights = None
        return attn_output, attn_weights, past_key_value


def _causal_mask(bsz, q_len, kv_len, dtype, past=0):
    mask = torch.full((q_len, kv_len), torch.finfo(dtype).min)
    mask = torch.triu(mask, diagonal=1 + past)
    return mask[None, None, :, :].expand(bsz, 1, q_len, kv_len)


@corpus.builder(lambda: (rand(2, 6, 32),))
def llama_attention_plain():
    return LlamaAttention(small_config(), layer_idx=0).eval()


@corpus.builder(
    lambda: call(
        rand(2, 6, 32), attention_mask=_causal_mask(2, 6, 6, torch.float32), output_attentions=True
    ),
)
def llama_attention_mask_and_weights():
    return LlamaAttention(small_config(), layer_idx=0).eval()


@corpus.builder(
    lambda: call(
        rand(2, 1, 32),
        attention_mask=_causal_mask(2, 1, 5, torch.float32, past=4),
        past_key_value=(rand(2, 2, 4, 8), rand(2, 2, 4, 8)),
        use_cache=True,
    )
)
def llama_attention_decode_step_kv_cat():
    return LlamaAttention(small_config(), layer_idx=0).eval()


# capture gap: building the ValueError is a break (the `raise` then runs as Python); the check
# before it could stay in the graph
@corpus.builder(lambda: call(rand(2, 6, 32), attention_mask=rand(2, 1, 5, 6)), fullgraph=False)
def llama_attention_bad_mask_raises_like_eager():
    model = LlamaAttention(small_config()).eval()

    def run(hidden, attention_mask):
        try:
            return model(hidden, attention_mask=attention_mask)
        except ValueError as error:
            return str(error)

    return run


class KVCache(nn.Module):
    """A static cache written by slice assignment (the `StaticCache` pattern)."""

    def __init__(self, batch, heads, max_len, head_dim):
        super().__init__()
        self.register_buffer("k_cache", torch.zeros(batch, heads, max_len, head_dim))
        self.register_buffer("v_cache", torch.zeros(batch, heads, max_len, head_dim))

    def update(self, input_pos, k_val, v_val):
        k_out = self.k_cache
        v_out = self.v_cache
        k_out[:, :, input_pos] = k_val
        v_out[:, :, input_pos] = v_val
        return k_out, v_out


class CachedSelfAttention(nn.Module):
    def __init__(self, dim=16, heads=2, max_len=8):
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.wqkv = nn.Linear(dim, 3 * dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        self.kv_cache = KVCache(2, heads, max_len, self.head_dim)
        self.register_buffer(
            "causal_mask", torch.tril(torch.ones(max_len, max_len, dtype=torch.bool))
        )

    def forward(self, x, input_pos):
        bsz, seqlen, dim = x.shape
        q, k, v = self.wqkv(x).split([dim, dim, dim], dim=-1)
        q, k, v = (
            t.view(bsz, seqlen, self.heads, self.head_dim).transpose(1, 2) for t in (q, k, v)
        )
        if self.kv_cache is not None:
            k, v = self.kv_cache.update(input_pos, k, v)
        mask = self.causal_mask[None, None, input_pos]
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0)
        y = y.transpose(1, 2).contiguous().view(bsz, seqlen, dim)
        return self.wo(y)


# under grad mode the buffers written from grad-requiring k/v require grad after the first call
# (as in eager), so the second call recompiles: generation code runs under no_grad
@corpus.builder(lambda: (rand(2, 3, 16), torch.arange(2, 5)), grad=False)
def static_kv_cache_slice_assign():
    return CachedSelfAttention().eval()


class CausalSelfAttention(nn.Module):
    """nanoGPT's attention: fused qkv, SDPA with is_causal, dropout only when training."""

    def __init__(self, n_embd=32, n_head=4, dropout=0.1, bias=True):
        super().__init__()
        assert n_embd % n_head == 0
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)
        self.n_head = n_head
        self.n_embd = n_embd
        self.dropout = dropout
        self.flash = hasattr(torch.nn.functional, "scaled_dot_product_attention")

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        if self.flash:
            y = torch.nn.functional.scaled_dot_product_attention(
                q,
                k,
                v,
                attn_mask=None,
                dropout_p=self.dropout if self.training else 0,
                is_causal=True,
            )
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = F.softmax(att, dim=-1)
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class Block(nn.Module):
    def __init__(self, n_embd=32, n_head=4, attn_dropout=0.1):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, dropout=attn_dropout)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd), nn.Dropout(0.1)
        )

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, vocab_size=50, block_size=16, n_layer=1, n_embd=32):
        super().__init__()
        self.block_size = block_size
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(vocab_size, n_embd),
                wpe=nn.Embedding(block_size, n_embd),
                drop=nn.Dropout(0.1),
                h=nn.ModuleList([Block(n_embd) for _ in range(n_layer)]),
                ln_f=nn.LayerNorm(n_embd),
            )
        )
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)

    def forward(self, idx, targets=None):
        device = idx.device
        b, t = idx.size()
        assert t <= self.block_size, (
            f"Cannot forward sequence of length {t}, block size is only {self.block_size}"
        )
        pos = torch.arange(0, t, dtype=torch.long, device=device)
        tok_emb = self.transformer.wte(idx)
        pos_emb = self.transformer.wpe(pos)
        x = self.transformer.drop(tok_emb + pos_emb)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        if targets is not None:
            logits = self.lm_head(x)
            loss = F.cross_entropy(
                logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1
            )
        else:
            logits = self.lm_head(x[:, [-1], :])
            loss = None
        return logits, loss


@corpus.builder(lambda: (ints(50, 2, 8),))
def nanogpt_inference_last_token():
    return GPT().eval()


@corpus.builder(lambda: (ints(50, 2, 8), ints(50, 2, 8)))
def nanogpt_with_targets():
    return GPT().eval()


@corpus.builder(lambda: (ints(50, 1, 4),))
def nanogpt_greedy_generate():
    model = GPT().eval()

    @torch.no_grad()
    def generate(idx, max_new_tokens=4, temperature=1.0):
        for _ in range(max_new_tokens):
            idx_cond = idx if idx.size(1) <= model.block_size else idx[:, -model.block_size :]
            logits, _ = model(idx_cond)
            logits = logits[:, -1, :] / temperature
            idx_next = torch.argmax(logits, dim=-1, keepdim=True)
            idx = torch.cat((idx, idx_next), dim=1)
        return idx

    return generate


@corpus.builder(lambda: (ints(50, 1, 4),), setup=lambda: torch.manual_seed(1))
def nanogpt_topk_sampling():
    model = GPT().eval()

    @torch.no_grad()
    def sample(idx, top_k=5):
        for _ in range(3):
            logits, _ = model(idx)
            logits = logits[:, -1, :]
            v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
            logits[logits < v[:, [-1]]] = -float("Inf")
            probs = F.softmax(logits, dim=-1)
            idx_next = torch.multinomial(probs, num_samples=1)
            idx = torch.cat((idx, idx_next), dim=1)
        return idx

    return sample


# Train mode with the dropout rates at 0: through the Triton backend this block's dropout masks
# differ from eager's (not yet understood: the single nn.Dropout of
# train_eval_toggled_inside_forward in test_corpus_training.py does match)
@corpus.builder(lambda: (rand(2, 8, 32),), setup=lambda: torch.manual_seed(3))
def transformer_block_train_mode_dropout():
    block = Block(attn_dropout=0.0).train()
    for module in block.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
    return block


# ---------------------------------------------------------------------------------------
# HF-style outputs, configs and kwargs


@dataclass
class BaseModelOutput:
    last_hidden_state: torch.Tensor = None
    hidden_states: tuple | None = None
    attentions: tuple | None = None


class DecoderLayer(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.self_attn = LlamaAttention(config, layer_idx)
        self.mlp = LlamaMLP(config)
        self.input_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(
        self,
        hidden_states,
        attention_mask=None,
        position_ids=None,
        output_attentions=False,
        **kwargs,
    ):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states, self_attn_weights, _ = self.self_attn(
            hidden_states=hidden_states,
            attention_mask=attention_mask,
            position_ids=position_ids,
            output_attentions=output_attentions,
            **kwargs,
        )
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        hidden_states = residual + hidden_states
        outputs = (hidden_states,)
        if output_attentions:
            outputs += (self_attn_weights,)
        return outputs


class LlamaModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.padding_idx = getattr(config, "pad_token_id", None)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, self.padding_idx)
        self.layers = nn.ModuleList(
            [DecoderLayer(config, layer_idx) for layer_idx in range(config.num_hidden_layers)]
        )
        self.norm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        inputs_embeds=None,
        output_attentions=None,
        output_hidden_states=None,
        return_dict=None,
    ):
        output_attentions = (
            output_attentions
            if output_attentions is not None
            else getattr(self.config, "output_attentions", False)
        )
        output_hidden_states = output_hidden_states if output_hidden_states is not None else False
        return_dict = (
            return_dict
            if return_dict is not None
            else getattr(self.config, "use_return_dict", True)
        )
        if (input_ids is None) ^ (inputs_embeds is not None):
            raise ValueError("You must specify exactly one of input_ids or inputs_embeds")
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        batch_size, seq_length = inputs_embeds.shape[:2]
        if attention_mask is not None:
            # [bsz, seq] padding mask -> additive [bsz, 1, q, kv] with the causal part
            dtype = inputs_embeds.dtype
            expanded = (
                attention_mask[:, None, None, :]
                .expand(batch_size, 1, seq_length, seq_length)
                .to(dtype)
            )
            inverted = 1.0 - expanded
            padding = inverted.masked_fill(inverted.to(torch.bool), torch.finfo(dtype).min)
            causal = torch.triu(
                torch.full(
                    (seq_length, seq_length), torch.finfo(dtype).min, device=inputs_embeds.device
                ),
                1,
            )
            attention_mask = padding + causal
        hidden_states = inputs_embeds
        all_hidden_states = () if output_hidden_states else None
        all_self_attns = () if output_attentions else None
        for decoder_layer in self.layers:
            if output_hidden_states:
                all_hidden_states += (hidden_states,)
            layer_outputs = decoder_layer(
                hidden_states, attention_mask=attention_mask, output_attentions=output_attentions
            )
            hidden_states = layer_outputs[0]
            if output_attentions:
                all_self_attns += (layer_outputs[1],)
        hidden_states = self.norm(hidden_states)
        if output_hidden_states:
            all_hidden_states += (hidden_states,)
        if not return_dict:
            return tuple(
                v for v in [hidden_states, all_hidden_states, all_self_attns] if v is not None
            )
        return BaseModelOutput(
            last_hidden_state=hidden_states,
            hidden_states=all_hidden_states,
            attentions=all_self_attns,
        )


@corpus.builder(lambda: call(ints(50, 2, 6)))
def llama_model_dataclass_output():
    return LlamaModel(small_config()).eval()


@corpus.builder(
    lambda: call(
        ints(50, 2, 6),
        attention_mask=torch.tensor([[1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1]]),
        output_attentions=True,
        output_hidden_states=True,
        return_dict=False,
    )
)
def llama_model_padding_mask_tuple_output():
    return LlamaModel(small_config(pad_token_id=0)).eval()


@corpus.builder(lambda: call(inputs_embeds=rand(2, 4, 32), output_hidden_states=True))
def llama_model_inputs_embeds():
    return LlamaModel(small_config(use_return_dict=True)).eval()


class ClassificationHead(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.model = LlamaModel(config)
        self.score = nn.Linear(config.hidden_size, getattr(config, "num_labels", 2), bias=False)
        self.pad_token_id = getattr(config, "pad_token_id", 0)

    def forward(self, input_ids, labels=None, **kwargs):
        outputs = self.model(input_ids, **kwargs)
        logits = self.score(outputs.last_hidden_state)
        # last non-padding token of each row
        sequence_lengths = torch.eq(input_ids, self.pad_token_id).int().argmax(-1) - 1
        sequence_lengths = sequence_lengths % input_ids.shape[-1]
        pooled = logits[torch.arange(input_ids.shape[0], device=logits.device), sequence_lengths]
        result = {"logits": pooled}
        if labels is not None:
            result["loss"] = F.cross_entropy(pooled.view(-1, pooled.size(-1)), labels.view(-1))
        return result


@corpus.builder(
    lambda: call(
        torch.tensor([[5, 6, 7, 0], [8, 9, 0, 0]]),
        labels=torch.tensor([1, 0]),
        output_hidden_states=False,
    ),
)
def sequence_classification_kwargs_passthrough():
    return ClassificationHead(small_config(num_labels=2)).eval()


# ---------------------------------------------------------------------------------------
# einsum and hand-written rearranges


@corpus.program(lambda: (rand(2, 5, 24), rand(24, 72), 4))
def einsum_attention_rearrange_by_hand(x, w_qkv, heads):
    b, n, _ = x.shape
    qkv = (x @ w_qkv).chunk(3, dim=-1)
    # rearrange 'b n (h d) -> b h n d'
    q, k, v = (t.reshape(b, n, heads, -1).permute(0, 2, 1, 3) for t in qkv)
    dots = torch.einsum("bhid,bhjd->bhij", q, k) * q.shape[-1] ** -0.5
    attn = dots.softmax(dim=-1)
    out = torch.einsum("bhij,bhjd->bhid", attn, v)
    # rearrange 'b h n d -> b n (h d)'
    return out.permute(0, 2, 1, 3).flatten(2)


@corpus.program(lambda: (rand(2, 3, 8, 8), 4))
def patchify_by_hand(images, patch):
    # rearrange 'b c (h p1) (w p2) -> b (h w) (p1 p2 c)'
    b, c, h, w = images.shape
    x = images.reshape(b, c, h // patch, patch, w // patch, patch)
    x = torch.einsum("nchpwq->nhwpqc", x)
    return x.reshape(b, (h // patch) * (w // patch), patch * patch * c)


class ViTEmbeddings(nn.Module):
    def __init__(self, image_size=16, patch_size=4, channels=3, dim=24):
        super().__init__()
        num_patches = (image_size // patch_size) ** 2
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim))
        self.position_embeddings = nn.Parameter(torch.randn(1, num_patches + 1, dim))
        self.projection = nn.Conv2d(channels, dim, kernel_size=patch_size, stride=patch_size)
        self.patch_size = patch_size

    def interpolate_pos_encoding(self, embeddings, height, width):
        num_patches = embeddings.shape[1] - 1
        num_positions = self.position_embeddings.shape[1] - 1
        if num_patches == num_positions and height == width:
            return self.position_embeddings
        class_pos_embed = self.position_embeddings[:, :1]
        patch_pos_embed = self.position_embeddings[:, 1:]
        dim = embeddings.shape[-1]
        side = int(math.sqrt(num_positions))
        patch_pos_embed = patch_pos_embed.reshape(1, side, side, dim).permute(0, 3, 1, 2)
        patch_pos_embed = F.interpolate(
            patch_pos_embed,
            size=(height // self.patch_size, width // self.patch_size),
            mode="bicubic",
            align_corners=False,
        )
        patch_pos_embed = patch_pos_embed.permute(0, 2, 3, 1).view(1, -1, dim)
        return torch.cat((class_pos_embed, patch_pos_embed), dim=1)

    def forward(self, pixel_values, interpolate_pos_encoding: bool = False):
        batch_size, num_channels, height, width = pixel_values.shape
        embeddings = self.projection(pixel_values).flatten(2).transpose(1, 2)
        cls_tokens = self.cls_token.expand(batch_size, -1, -1)
        embeddings = torch.cat((cls_tokens, embeddings), dim=1)
        if interpolate_pos_encoding:
            embeddings = embeddings + self.interpolate_pos_encoding(embeddings, height, width)
        else:
            embeddings = embeddings + self.position_embeddings
        return embeddings


@corpus.builder(lambda: (rand(2, 3, 16, 16),))
def vit_patch_embeddings():
    return ViTEmbeddings()


@corpus.builder(lambda: call(rand(1, 3, 16, 24), interpolate_pos_encoding=True))
def vit_interpolate_pos_encoding():
    return ViTEmbeddings()


def build_alibi_slopes(num_heads):
    closest_power_of_2 = 2 ** math.floor(math.log2(num_heads))
    base = torch.tensor(2 ** (-(2 ** -(math.log2(closest_power_of_2) - 3))), dtype=torch.float32)
    powers = torch.arange(1, 1 + closest_power_of_2, dtype=torch.int32)
    slopes = torch.pow(base, powers)
    if closest_power_of_2 != num_heads:
        extra_base = torch.tensor(
            2 ** (-(2 ** -(math.log2(2 * closest_power_of_2) - 3))), dtype=torch.float32
        )
        num_remaining_heads = min(closest_power_of_2, num_heads - closest_power_of_2)
        extra_powers = torch.arange(1, 1 + 2 * num_remaining_heads, 2, dtype=torch.int32)
        slopes = torch.cat([slopes, torch.pow(extra_base, extra_powers)], dim=0)
    return slopes


@corpus.program(lambda: (torch.ones(2, 5, dtype=torch.long), 6))
def alibi_bias_from_mask(attention_mask, num_heads):
    batch_size, seq_length = attention_mask.shape
    slopes = build_alibi_slopes(num_heads)
    arange_tensor = ((attention_mask.cumsum(dim=-1) - 1) * attention_mask)[:, None, :]
    alibi = slopes[..., None] * arange_tensor
    return alibi.reshape(batch_size * num_heads, 1, seq_length)


# ---------------------------------------------------------------------------------------
# mixture of experts


class TopKRouterMoE(nn.Module):
    """Mixtral's sparse MoE block: topk routing, one_hot expert mask, index_add_ back."""

    def __init__(self, dim=16, ffn=32, num_experts=4, top_k=2):
        super().__init__()
        self.num_experts = num_experts
        self.top_k = top_k
        self.gate = nn.Linear(dim, num_experts, bias=False)
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(dim, ffn), nn.SiLU(), nn.Linear(ffn, dim))
            for _ in range(num_experts)
        )

    def forward(self, hidden_states):
        batch_size, sequence_length, hidden_dim = hidden_states.shape
        hidden_states = hidden_states.view(-1, hidden_dim)
        router_logits = self.gate(hidden_states)
        routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
        routing_weights, selected_experts = torch.topk(routing_weights, self.top_k, dim=-1)
        routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
        routing_weights = routing_weights.to(hidden_states.dtype)
        final_hidden_states = torch.zeros(
            (batch_size * sequence_length, hidden_dim),
            dtype=hidden_states.dtype,
            device=hidden_states.device,
        )
        expert_mask = torch.nn.functional.one_hot(
            selected_experts, num_classes=self.num_experts
        ).permute(2, 1, 0)
        for expert_idx in range(self.num_experts):
            expert_layer = self.experts[expert_idx]
            idx, top_x = torch.where(expert_mask[expert_idx])
            current_state = hidden_states[None, top_x].reshape(-1, hidden_dim)
            current_hidden_states = expert_layer(current_state) * routing_weights[top_x, idx, None]
            final_hidden_states.index_add_(0, top_x, current_hidden_states.to(hidden_states.dtype))
        final_hidden_states = final_hidden_states.reshape(batch_size, sequence_length, hidden_dim)
        return final_hidden_states, router_logits


# capture gap: torch.where(mask) has a data-dependent size, so each expert breaks; a compiler
# with unbacked sizes would keep the loop in one graph
@corpus.builder(lambda: (rand(2, 5, 16),), graphs=5, fullgraph=False)
def moe_mixtral_sparse_block():
    return TopKRouterMoE().eval()


class DenseMoE(nn.Module):
    """Every expert on every token, combined with a scattered gate (the static-shape way)."""

    def __init__(self, dim=16, num_experts=4, top_k=2):
        super().__init__()
        self.router = nn.Linear(dim, num_experts)
        self.w1 = nn.Parameter(torch.randn(num_experts, dim, 2 * dim) * 0.1)
        self.w2 = nn.Parameter(torch.randn(num_experts, 2 * dim, dim) * 0.1)
        self.top_k = top_k

    def forward(self, x):
        logits = self.router(x)
        top_vals, top_idx = logits.topk(self.top_k, dim=-1)
        gates = torch.zeros_like(logits).scatter(-1, top_idx, top_vals.softmax(dim=-1))
        h = torch.einsum("btd,edf->btef", x, self.w1)
        h = F.gelu(h)
        out = torch.einsum("btef,efd->bted", h, self.w2)
        aux_loss = (
            gates.mean(dim=(0, 1)) * logits.softmax(-1).mean(dim=(0, 1))
        ).sum() * gates.shape[-1]
        return (out * gates.unsqueeze(-1)).sum(dim=2), aux_loss


@corpus.builder(lambda: (rand(2, 3, 16),))
def moe_dense_scatter_gates():
    return DenseMoE()


# ---------------------------------------------------------------------------------------
# vision


class ResidualBlock(nn.Module):
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = (
            nn.Identity()
            if stride == 1 and cin == cout
            else nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
        )

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)), inplace=True)
        out = self.bn2(self.conv2(out))
        out += self.shortcut(x)
        return F.relu(out)


@corpus.builder(lambda: (rand(2, 4, 8, 8),), grad_modes=True)
def resnet_identity_shortcut_eval():
    return nn.Sequential(
        ResidualBlock(4, 4), ResidualBlock(4, 8, stride=2), nn.AdaptiveAvgPool2d(1), nn.Flatten()
    ).eval()


class UNet(nn.Module):
    def __init__(self, channels=(4, 8, 16)):
        super().__init__()
        self.downs = nn.ModuleList()
        self.ups = nn.ModuleList()
        cin = 1
        for c in channels:
            self.downs.append(
                nn.Sequential(nn.Conv2d(cin, c, 3, padding=1), nn.GroupNorm(2, c), nn.SiLU())
            )
            cin = c
        for c in reversed(channels[:-1]):
            self.ups.append(
                nn.ModuleDict(
                    {
                        "up": nn.ConvTranspose2d(cin, c, 2, stride=2),
                        "conv": nn.Conv2d(2 * c, c, 3, padding=1),
                    }
                )
            )
            cin = c
        self.out = nn.Conv2d(cin, 1, 1)

    def forward(self, x):
        skips = []
        for i, down in enumerate(self.downs):
            x = down(x)
            if i < len(self.downs) - 1:
                skips.append(x)
                x = F.max_pool2d(x, 2)
        for up in self.ups:
            x = up["up"](x)
            skip = skips.pop()
            if x.shape[-2:] != skip.shape[-2:]:
                x = F.interpolate(x, size=skip.shape[-2:], mode="nearest")
            x = up["conv"](torch.cat([x, skip], dim=1))
        return self.out(x)


@corpus.builder(lambda: (rand(2, 1, 16, 16),))
def unet_skip_list():
    return UNet()


class TaskRouter(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Linear(8, 16)
        self.heads = nn.ModuleDict(
            {"sentiment": nn.Linear(16, 3), "topic": nn.Linear(16, 5), "ner": nn.Linear(16, 7)}
        )

    def forward(self, x, task: str = "sentiment"):
        if task not in self.heads:
            raise KeyError(f"unknown task {task}")
        return self.heads[task](torch.relu(self.backbone(x)))


@corpus.builder(lambda: call(rand(3, 8), task="topic"))
def moduledict_routing_by_string_key():
    return TaskRouter()


class FeatureStats(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    @torch.no_grad()
    def _stats(self, x):
        return {"mean": x.mean().detach(), "std": x.std(), "norm": x.norm(dim=-1).max()}

    def forward(self, x):
        h = self.proj(x)
        with torch.no_grad():
            scale = h.abs().amax(dim=-1, keepdim=True).clamp(min=1e-5)
        return h / scale, self._stats(h)


@corpus.builder(lambda: (rand(4, 8),))
def no_grad_block_and_decorated_helper():
    return FeatureStats()


class ConvSeparable(nn.Module):
    """Causal depthwise conv1d (WaveNet / Mamba style) with left padding by F.pad."""

    def __init__(self, channels=8, kernel_size=4):
        super().__init__()
        self.kernel_size = kernel_size
        self.conv = nn.Conv1d(channels, channels, kernel_size, groups=channels)
        self.pointwise = nn.Conv1d(channels, channels, 1)

    def forward(self, x):  # x: (batch, length, channels)
        x = x.transpose(1, 2)
        x = F.pad(x, (self.kernel_size - 1, 0))
        x = self.pointwise(F.silu(self.conv(x)))
        return x.transpose(1, 2)


@corpus.builder(lambda: (rand(2, 10, 8),))
def causal_depthwise_conv1d():
    return ConvSeparable()


# ---------------------------------------------------------------------------------------
# recurrent taggers


class BiLSTMTagger(nn.Module):
    def __init__(self, vocab=30, emb=8, hidden=6, tags=5):
        super().__init__()
        self.embedding = nn.Embedding(vocab, emb, padding_idx=0)
        self.lstm = nn.LSTM(emb, hidden, batch_first=True, bidirectional=True)
        self.fc = nn.Linear(2 * hidden, tags)

    def forward(self, tokens, lengths):
        embedded = self.embedding(tokens)
        packed = nn.utils.rnn.pack_padded_sequence(
            embedded, lengths.cpu(), batch_first=True, enforce_sorted=False
        )
        packed_out, (hidden, cell) = self.lstm(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(
            packed_out, batch_first=True, total_length=tokens.shape[1]
        )
        return F.log_softmax(self.fc(out), dim=-1), hidden


# capture gap: pack_padded_sequence/pad_packed_sequence have value-dependent sizes and the LSTM on
# a PackedSequence is not captured, so the middle runs eagerly (embedding and head are graphs;
# torch's own pack/pad functions run as they are)
@corpus.builder(
    lambda: (torch.tensor([[3, 4, 5, 6], [7, 8, 0, 0], [9, 0, 0, 0]]), torch.tensor([4, 2, 1])),
    graphs=2,
    fullgraph=False,
)
def bilstm_tagger_packed():
    return BiLSTMTagger().eval()


class GRUEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(6, 8, num_layers=2, batch_first=True, dropout=0.0)
        self.head = nn.Linear(8, 3)

    def forward(self, x, h0=None):
        out, h = self.gru(x, h0)
        return self.head(out[:, -1]), h


@corpus.builder(lambda: (rand(3, 5, 6),))
def gru_encoder_last_step():
    return GRUEncoder().eval()


# ---------------------------------------------------------------------------------------
# Python around the tensors


class ToyTokenizer:
    def __init__(self):
        self.vocab = {"<pad>": 0, "<unk>": 1}
        for word in ["the", "cat", "sat", "on", "mat", "a", "dog", "ran"]:
            self.vocab[word] = len(self.vocab)

    def encode(self, text, max_len=6):
        ids = [
            self.vocab.get(w, self.vocab["<unk>"]) for w in text.lower().replace(".", "").split()
        ]
        ids = ids[:max_len]
        return ids + [self.vocab["<pad>"]] * (max_len - len(ids))


TOKENIZER = ToyTokenizer()
EMBED = nn.Embedding(10, 4)


@corpus.program(lambda: (["The cat sat on the mat.", "A dog ran"],))
def tokenize_then_embed(texts):
    batch = torch.tensor([TOKENIZER.encode(t) for t in texts])
    mask = batch != 0
    emb = EMBED(batch) * mask.unsqueeze(-1)
    return emb.sum(1) / mask.sum(1, keepdim=True), {
        "input_ids": batch,
        "attention_mask": mask.long(),
    }


@corpus.program(lambda: (rand(2, 3, 4),), output=True)
def shape_checks_fstrings_and_logging(x):
    if x.dim() != 3:
        raise ValueError(f"expected a 3D input, got shape {tuple(x.shape)}")
    logger.debug(f"input {x.shape} {x.dtype}")
    b, t, c = x.shape
    y = x.reshape(b * t, c).softmax(-1)
    logger.info("flattened to %s", y.shape)
    return y, f"{b}x{t}x{c}"


@corpus.builder(lambda: (rand(2, 8, 32),))
def autocast_bf16_block_inference():
    block = Block().eval()

    def forward(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = block(x)
            logits = h @ block.ln_1.weight.unsqueeze(-1)
        return logits.float(), h.dtype

    return forward


class BertStyleClassifier(nn.Module):
    """The HF head: a loss module built in forward, picked by the problem type."""

    def __init__(self, num_labels=3):
        super().__init__()
        self.num_labels = num_labels
        self.problem_type = None
        self.dropout = nn.Dropout(0.1)
        self.classifier = nn.Linear(16, num_labels)

    def forward(self, pooled_output, labels=None, return_dict=True):
        logits = self.classifier(self.dropout(pooled_output))
        loss = None
        if labels is not None:
            problem_type = self.problem_type
            if problem_type is None:
                if self.num_labels == 1:
                    problem_type = "regression"
                elif labels.dtype == torch.long or labels.dtype == torch.int:
                    problem_type = "single_label_classification"
                else:
                    problem_type = "multi_label_classification"
            if problem_type == "regression":
                loss_fct = nn.MSELoss()
                loss = loss_fct(logits.squeeze(), labels.squeeze())
            elif problem_type == "single_label_classification":
                loss_fct = nn.CrossEntropyLoss()
                loss = loss_fct(logits.view(-1, self.num_labels), labels.view(-1))
            else:
                loss_fct = nn.BCEWithLogitsLoss()
                loss = loss_fct(logits, labels)
        if not return_dict:
            output = (logits,)
            return ((loss,) + output) if loss is not None else output
        return {"loss": loss, "logits": logits}


@corpus.builder(lambda: call(rand(4, 16), labels=ints(3, 4)), grad_modes=True)
def hf_head_loss_module_built_in_forward():
    return BertStyleClassifier().eval()


@corpus.builder(lambda: call(rand(4, 16), labels=bools(4, 3).float(), return_dict=False))
def hf_head_multi_label_bce():
    return BertStyleClassifier().eval()


@pytest.mark.parametrize("case", corpus.params())
def test_realistic(case):
    case.run()

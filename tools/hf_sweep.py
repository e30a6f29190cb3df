"""Hugging Face transformers models through framejit: graphs, breaks and results against eager.

Small random-weight configs of common architectures (no download). For each model and input set
it prints the graph and break counts of `framejit.explain`, then runs the model through
`framejit.jit(backend=...)` twice and compares every output tensor with eager (and, with
`--train`, the parameter gradients of a weighted loss).

    pip install transformers        # not a framejit dependency
    python tools/hf_sweep.py                       # every model, backend eager
    python tools/hf_sweep.py --backend aot_eager --train gpt2 llama bert
    python tools/hf_sweep.py --breaks              # print each break's reason

Exit status 1 if any result differs from eager or a run fails.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from typing import Any

import torch

import framejit


def _flat(o: Any) -> list[torch.Tensor]:
    if isinstance(o, torch.Tensor):
        return [o]
    if isinstance(o, dict):
        return [t for v in o.values() for t in _flat(v)]
    if isinstance(o, (list, tuple)):
        return [t for v in o for t in _flat(v)]
    return []


_ZERO_DROPOUT = [False]


def _config(cls: Any, **kwargs: Any) -> Any:
    """A config; for --train with every dropout, layer-drop and masking probability at 0, so that
    outputs and gradients can be compared exactly (random masks depend on how the RNG is
    consumed)."""
    config = cls(**kwargs)
    if _ZERO_DROPOUT[0]:
        for key, value in list(vars(config).items()):
            if isinstance(value, float) and (
                "dropout" in key or "pdrop" in key or "layerdrop" in key or key.endswith("_prob")
            ):
                setattr(config, key, 0.0)
    return config


def _models(T: Any) -> dict[str, Callable[[], torch.nn.Module]]:
    small = dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4)
    decoder = dict(small, num_key_value_heads=2, vocab_size=100, max_position_embeddings=64)
    return {
        "gpt2": lambda: T.GPT2LMHeadModel(
            _config(T.GPT2Config, n_layer=2, n_embd=64, n_head=4, vocab_size=100, n_positions=32)
        ),
        "llama": lambda: T.LlamaForCausalLM(_config(T.LlamaConfig, **decoder)),
        "mistral": lambda: T.MistralForCausalLM(_config(T.MistralConfig, **decoder)),
        "qwen2": lambda: T.Qwen2ForCausalLM(_config(T.Qwen2Config, **decoder)),
        "phi": lambda: T.PhiForCausalLM(_config(T.PhiConfig, **small, vocab_size=100)),
        "gptneox": lambda: T.GPTNeoXForCausalLM(_config(T.GPTNeoXConfig, **small, vocab_size=100)),
        "opt": lambda: T.OPTForCausalLM(
            _config(
                T.OPTConfig,
                num_hidden_layers=2,
                hidden_size=64,
                ffn_dim=128,
                num_attention_heads=4,
                vocab_size=100,
                word_embed_proj_dim=64,
            )
        ),
        "bert": lambda: T.BertModel(_config(T.BertConfig, **small, vocab_size=100)),
        "roberta": lambda: T.RobertaModel(_config(T.RobertaConfig, **small, vocab_size=100)),
        "distilbert": lambda: T.DistilBertModel(
            _config(
                T.DistilBertConfig, n_layers=2, dim=64, hidden_dim=128, n_heads=4, vocab_size=100
            )
        ),
        "t5": lambda: T.T5Model(
            _config(
                T.T5Config, num_layers=2, d_model=64, d_ff=128, num_heads=4, d_kv=16, vocab_size=100
            )
        ),
        "vit": lambda: T.ViTModel(_config(T.ViTConfig, **small, image_size=32, patch_size=8)),
        "gemma2": lambda: T.Gemma2ForCausalLM(_config(T.Gemma2Config, **decoder, head_dim=16)),
        "qwen3": lambda: T.Qwen3ForCausalLM(_config(T.Qwen3Config, **decoder, head_dim=16)),
        "mixtral": lambda: T.MixtralForCausalLM(
            _config(T.MixtralConfig, **decoder, num_local_experts=4, num_experts_per_tok=2)
        ),
        "falcon": lambda: T.FalconForCausalLM(
            _config(
                T.FalconConfig,
                num_hidden_layers=2,
                hidden_size=64,
                num_attention_heads=4,
                vocab_size=100,
            )
        ),
        "gptj": lambda: T.GPTJForCausalLM(
            _config(T.GPTJConfig, n_layer=2, n_embd=64, n_head=4, vocab_size=100, rotary_dim=8)
        ),
        "bart": lambda: T.BartModel(
            _config(
                T.BartConfig,
                encoder_layers=2,
                decoder_layers=2,
                d_model=64,
                encoder_ffn_dim=128,
                decoder_ffn_dim=128,
                encoder_attention_heads=4,
                decoder_attention_heads=4,
                vocab_size=100,
            )
        ),
        "albert": lambda: T.AlbertModel(
            _config(T.AlbertConfig, **small, vocab_size=100, embedding_size=32)
        ),
        "deberta": lambda: T.DebertaV2Model(_config(T.DebertaV2Config, **small, vocab_size=100)),
        "clip_text": lambda: T.CLIPTextModel(_config(T.CLIPTextConfig, **small, vocab_size=100)),
        "resnet": lambda: T.ResNetModel(
            _config(T.ResNetConfig, embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1])
        ),
        "swin": lambda: T.SwinModel(
            _config(
                T.SwinConfig,
                image_size=32,
                patch_size=4,
                embed_dim=16,
                depths=[1, 1],
                num_heads=[2, 2],
                window_size=4,
            )
        ),
        "wav2vec2": lambda: T.Wav2Vec2Model(
            _config(
                T.Wav2Vec2Config,
                **small,
                conv_dim=(16, 16),
                conv_stride=(5, 2),
                conv_kernel=(10, 3),
                num_conv_pos_embeddings=16,
                num_conv_pos_embedding_groups=4,
            )
        ),
    }


def _inputs(name: str, model: torch.nn.Module) -> list[tuple[str, dict[str, Any]]]:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 100, (2, 8), generator=g)
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[0, :3] = 0
    if name in ("vit", "resnet", "swin"):
        return [("", {"pixel_values": torch.randn(2, 3, 32, 32, generator=g)})]
    if name == "wav2vec2":
        return [("", {"input_values": torch.randn(2, 400, generator=g)})]
    if name in ("t5", "bart"):
        return [("", {"input_ids": ids, "decoder_input_ids": ids[:, :4]})]
    cases = [("", {"input_ids": ids}), ("+mask", {"input_ids": ids, "attention_mask": mask})]
    if "ForCausalLM" in type(model).__name__ or "LMHead" in type(model).__name__:
        cases.append(("+labels", {"input_ids": ids, "labels": ids}))
    return cases


def _close(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(
        x.shape == y.shape and torch.allclose(x, y, atol=1e-4, rtol=1e-3) for x, y in zip(a, b)
    )


def _grads(model: torch.nn.Module, outputs: list[torch.Tensor]) -> list[torch.Tensor]:
    params = [p for p in model.parameters() if p.requires_grad]
    first = outputs[0]
    weights = torch.linspace(0.5, 1.5, first.numel()).reshape(first.shape)
    grads = torch.autograd.grad((first * weights).sum(), params, allow_unused=True)
    return [g if g is not None else torch.zeros_like(p) for g, p in zip(grads, params)]


def sweep(names: list[str], backend: str, train: bool, show_breaks: bool) -> int:
    import transformers as T

    failures = 0
    _ZERO_DROPOUT[0] = train
    builders = _models(T)
    for name in names:
        torch.manual_seed(0)
        model = builders[name]()
        model.train(train)
        for suffix, kwargs in _inputs(name, model):
            label = f"{name}{suffix}"
            start = time.perf_counter()
            try:
                ex = framejit.explain(model, **kwargs)
                counts = f"graphs={ex.graph_count} breaks={ex.graph_break_count}"
                reasons = [str(r) for r in ex.break_reasons]
                ref = _flat(model(**kwargs))
                # eager's gradients first: a later forward updates buffers in place (batch
                # norm's running stats) that eager autograd saved
                ref_grads = _grads(model, ref) if train else []
                jitted = framejit.jit(model, backend=backend)
                jitted(**kwargs)
                out = _flat(jitted(**kwargs))
                ok = _close(ref, out)
                if ok and train:
                    ok = _close(ref_grads, _grads(model, out))
            except Exception as exc:  # report and go on: one model must not hide the others
                failures += 1
                print(f"ERR {label}: {type(exc).__name__}: {exc}")
                traceback.print_exc(limit=-3)
                continue
            failures += not ok
            seconds = time.perf_counter() - start
            print(f"{'ok ' if ok else 'BAD'} {label:<18} {counts}  ({seconds:.1f}s)", flush=True)
            if show_breaks:
                for reason in reasons:
                    print("      " + reason.splitlines()[0][:300])
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="model names (default: all)")
    parser.add_argument("--backend", default="eager")
    parser.add_argument("--train", action="store_true", help="also compare parameter gradients")
    parser.add_argument("--breaks", action="store_true", help="print each break's reason")
    args = parser.parse_args(argv)
    try:
        import transformers as T
    except ImportError:
        print("transformers is not installed: pip install transformers", file=sys.stderr)
        return 2
    T.logging.set_verbosity_error()
    warnings.filterwarnings("ignore")
    names = args.models or list(_models(T))
    unknown = sorted(set(names) - set(_models(T)))
    if unknown:
        parser.error(f"unknown models {unknown}; choose from {sorted(_models(T))}")
    print(f"transformers {T.__version__}, torch {torch.__version__}, backend {args.backend}")
    return 1 if sweep(names, args.backend, args.train, args.breaks) else 0


if __name__ == "__main__":
    sys.exit(main())

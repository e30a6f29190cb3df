"""Hugging Face transformers inference on the CPU: eager vs framejit vs torch.compile, one run.

Small random-weight GPT-2 and Llama configs at batch 1 (the regime where the library's Python
around each layer costs as much as the math, which a captured graph removes), under
torch.no_grad(), one CPU thread. Compared, per call on a cache hit:

  eager                       the model as it is
  framejit                    framejit.jit(model) with `auto` (on a CPU: the captured fx graph)
  torch.compile (eager)       torch.compile(model, backend="eager"): the same capture, dynamo's
  torch.compile (inductor)    torch.compile(model): dynamo + inductor's C++ CPU kernels

and the first call (compile) time of each. Timing is interleaved over rounds (machine noise hits
every variant alike), garbage collector off; figures are medians over rounds of the per-call
time. Targets: framejit faster than eager, and its capture no slower than torch.compile's with
the same backend (`framejit / torch.compile (eager)` <= 1.0).

    pip install transformers        # the test extra pins it
    python tools/bench/hf_models.py [--rounds N] [--no-inductor]

torch.compile is used here only as the point of comparison (DESIGN.md: tools/ may use it).
"""

from __future__ import annotations

import argparse
import gc
import platform
import statistics
import sys
import time
import warnings
from collections.abc import Callable

import torch

import framejit


def _models(T) -> dict[str, Callable[[], torch.nn.Module]]:
    return {
        "gpt2": lambda: T.GPT2LMHeadModel(
            T.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=100, n_positions=32)
        ),
        "llama": lambda: T.LlamaForCausalLM(
            T.LlamaConfig(
                num_hidden_layers=2,
                hidden_size=64,
                intermediate_size=128,
                num_attention_heads=4,
                num_key_value_heads=2,
                vocab_size=100,
                max_position_embeddings=64,
            )
        ),
    }


def _first_call(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _loop(fn: Callable[[], object], n: int) -> float:
    gc.disable()
    try:
        start = time.perf_counter()
        for _ in range(n):
            fn()
        return (time.perf_counter() - start) / n
    finally:
        gc.enable()


def _bench_model(name: str, model: torch.nn.Module, args: argparse.Namespace) -> bool:
    """Time every variant on one model; print the table; True when the targets hold."""
    import torch._dynamo  # the point of comparison only

    ids = torch.randint(0, 100, (1, 8))
    variants: dict[str, Callable[[], object]] = {"eager": lambda: model(input_ids=ids)}
    compile_s: dict[str, float] = {}
    with torch.no_grad():
        jitted = framejit.jit(model)
        compile_s["framejit"] = _first_call(lambda: jitted(input_ids=ids))
        variants["framejit"] = lambda: jitted(input_ids=ids)
        torch._dynamo.reset()
        dyn = torch.compile(model, backend="eager")
        compile_s["torch.compile (eager)"] = _first_call(lambda: dyn(input_ids=ids))
        variants["torch.compile (eager)"] = lambda: dyn(input_ids=ids)
        if not args.no_inductor:
            ind = torch.compile(model)
            compile_s["torch.compile (inductor)"] = _first_call(lambda: ind(input_ids=ids))
            variants["torch.compile (inductor)"] = lambda: ind(input_ids=ids)
        expected = model(input_ids=ids).logits
        for fn in variants.values():
            torch.testing.assert_close(fn().logits, expected, rtol=1e-4, atol=1e-4)
            _loop(fn, 5)  # warm
        times: dict[str, list[float]] = {label: [] for label in variants}
        for _ in range(args.rounds):
            for label, fn in variants.items():
                times[label].append(_loop(fn, args.calls))
    torch._dynamo.reset()
    med = {label: statistics.median(ts) for label, ts in times.items()}
    print(f"\n{name}")
    for label, seconds in med.items():
        first = f"  first call {compile_s[label]:.2f} s" if label in compile_s else ""
        speedup = med["eager"] / seconds
        print(f"  {label:<26} {seconds * 1e6:8.0f} us/call  {speedup:5.2f}x eager{first}")
    ratio = med["framejit"] / med["torch.compile (eager)"]
    faster = med["framejit"] < med["eager"]
    print(f"  framejit / torch.compile (eager) = {ratio:.2f}   faster than eager: {faster}")
    return faster and ratio <= 1.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=50, help="calls per round")
    parser.add_argument("--no-inductor", action="store_true", help="skip torch.compile(inductor)")
    args = parser.parse_args(argv)
    try:
        import transformers as T
    except ImportError:
        print("transformers is not installed: pip install transformers", file=sys.stderr)
        return 2
    T.logging.set_verbosity_error()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    print(
        f"{platform.processor() or platform.machine()}, Python {platform.python_version()}, "
        f"torch {torch.__version__}, transformers {T.__version__}; 1 CPU thread, batch 1, 8 tokens"
    )
    failed = False
    for name, build in _models(T).items():
        torch.manual_seed(0)
        failed |= not _bench_model(name, build().eval(), args)
    print("\nPASS" if not failed else "\nFAIL")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

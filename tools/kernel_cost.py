"""What a GPU would execute for framejit's kernels, counted on a machine without one.

Runs each case's function through the Triton backend in Triton's CPU interpreter (recording the
launches, as `ptx_check.py` does, with the source a GPU gets: no interpreter-only helpers), then
compiles each kernel for sm_90 in a fresh process, specialized as a GPU launch would be
(pointers 16-byte aligned, element counts multiples of 16), and disassembles it with the
`cuobjdump` shipped in Triton's wheel. Per kernel it prints the SASS instructions per thread
and per element, the MUFU (special function unit) instructions, and the widths of its global
loads and stores (`LDG.E.128`: 16 bytes at a time; `LDG.E.U16`: one bfloat16).

An H200 issues about 33.5 T lane-instructions per second and copies 4.3 TB/s: a kernel that
moves B bytes per element is memory-bound while it executes fewer than about 8 * B
instructions per element (63 for float32 in and out, 31 for bfloat16). A static count, not a
timing: latency, occupancy and the memory system decide the rest; `bench/kernels.py` measures.

    TRITON_INTERPRET=1 python tools/kernel_cost.py [case ...] [--dump DIR]
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from typing import Any

_HERE = os.path.dirname(os.path.abspath(__file__))


def _cases() -> dict[str, tuple[Any, Any]]:
    import torch
    import torch.nn.functional as F

    bf16 = torch.bfloat16

    def head_merge(y: torch.Tensor) -> torch.Tensor:
        return y.transpose(1, 2).contiguous().view(8, 512, 768)

    def rows(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(*shape, dtype=dtype)

    return {
        "pointwise": (lambda x, y, z: torch.relu(x * y + z) * 0.5, lambda: [rows(64, 1024)] * 3),
        "exp": (torch.exp, lambda: [rows(64, 1024)]),
        "gelu_bf16": (
            lambda x, b: F.gelu(x + b),
            lambda: [rows(64, 1024, dtype=bf16), rows(1024, dtype=bf16)],
        ),
        "softmax": (lambda x: torch.softmax(x, -1), lambda: [rows(64, 1024)]),
        "softmax_bf16": (lambda x: torch.softmax(x, -1), lambda: [rows(64, 1024, dtype=bf16)]),
        "layer_norm": (
            lambda x, w, b: F.layer_norm(x, (1024,), w, b),
            lambda: [rows(64, 1024), rows(1024), rows(1024)],
        ),
        "head_merge": (head_merge, lambda: [rows(8, 12, 512, 64, dtype=bf16)]),
    }


def _compile(keys_file: str, dump: str | None) -> None:
    """In a process without the interpreter: compile, disassemble and count each kernel."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sys.path.insert(0, _HERE)
    import ptx_check

    cuobjdump = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/cuobjdump")
    with open(keys_file) as f:
        keys = json.load(f)
    for key in keys:
        path, name, signature, constexprs, options = json.loads(key)
        kernel = getattr(ptx_check._real_module(path), name)
        aligned = [n for n, t in signature.items() if t.startswith("*") or n.endswith("numel")]
        attrs = {(kernel.arg_names.index(n),): [["tt.divisibility", 16]] for n in aligned}
        source = ASTSource(fn=kernel, signature=signature, constexprs=constexprs, attrs=attrs)
        compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options)
        with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
            f.write(compiled.asm["cubin"])
        sass = subprocess.run([cuobjdump, "-sass", f.name], capture_output=True, text=True).stdout
        os.unlink(f.name)
        lines = [line for line in sass.splitlines() if re.match(r"\s+/\*[0-9a-f]{4}\*/", line)]
        ops = [
            re.sub(r"^\s+/\*[0-9a-f]{4}\*/\s+(@!?U?P\w+\s+)?", "", line).split()[0]
            for line in lines
        ]
        ops = [o for o in ops if o not in ("NOP", "BRA", "EXIT")]
        kinds = Counter(o.split(".")[0] for o in ops)
        lanes = 32 * options.get("num_warps", 4)
        elements = constexprs.get("XBLOCK", 1) * constexprs.get("RBLOCK", 1)
        per_thread = max(elements // lanes, 1)
        widths = sorted({o for o in ops if o.startswith(("LDG", "STG"))})
        print(
            f"{name}  {constexprs} warps={options.get('num_warps')}: {len(ops)} instructions per "
            f"thread, {len(ops) / per_thread:.1f} per element ({per_thread} each), MUFU "
            f"{kinds['MUFU']}, {' '.join(widths)}"
        )
        if dump:
            with open(os.path.join(dump, f"{name}.sass"), "w") as out:
                out.write("\n".join(lines) + "\n")


def main(argv: list[str]) -> int:
    if argv[:1] == ["--compile"]:
        _compile(argv[1], argv[2] if len(argv) > 2 else None)
        return 0
    dump = None
    if "--dump" in argv:
        k = argv.index("--dump")
        dump = argv[k + 1]
        os.makedirs(dump, exist_ok=True)
        argv = argv[:k] + argv[k + 2 :]
    if os.environ.get("TRITON_INTERPRET") != "1":
        print("set TRITON_INTERPRET=1 (the kernels run in the interpreter to be recorded)")
        return 2
    sys.path.insert(0, _HERE)
    import ptx_check
    import torch
    from framejit.backend.triton import kernels

    import framejit

    kernels._interpreter = lambda: False  # the source a GPU would get
    cases = _cases()
    wanted = argv or list(cases)
    unknown = [c for c in wanted if c not in cases]
    if unknown:
        print(f"unknown cases {unknown}; known: {', '.join(cases)}")
        return 2
    for case in wanted:
        fn, make = cases[case]
        ptx_check.uninstall()
        ptx_check.install()
        framejit.reset()
        with torch.no_grad():
            framejit.jit(fn, backend="triton")(*make())
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(sorted(ptx_check._seen), f)
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
        command = [sys.executable, __file__, "--compile", f.name] + ([dump] if dump else [])
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        os.unlink(f.name)
        print(f"== {case}")
        print(done.stdout.rstrip() or done.stderr[-2000:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

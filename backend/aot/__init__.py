"""The AOT stage: captured torch-level graphs become functional core-aten graphs.

Entry point: `aot_compile(gm, example_inputs, inner)` (compile.py). The stage functionalizes
(in-place ops and input mutations become functional ops plus a run-time epilogue), decomposes to
the core op set (core_ops.py), and for training traces the joint forward+backward graph and
partitions it by a min cut (partition.py) into a forward and a backward run by an
`autograd.Function` (runtime.py). It is built on make_fx, FakeTensors, functionalization and
torch's decomposition tables only; it does not use torch's own AOT-autograd module.
"""

from framejit.backend.aot.compile import aot_compile
from framejit.backend.aot.core_ops import CORE_OPS, decomposition_table

__all__ = ["CORE_OPS", "aot_compile", "decomposition_table"]

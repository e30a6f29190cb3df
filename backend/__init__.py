"""Backends: `(gm: torch.fx.GraphModule, example_inputs: list) -> callable`.

The registry (`registry.py`) maps names to backends; any callable with the contract works too,
so a torch.compile backend can be passed to framejit and the other way round.
"""

from framejit.backend.registry import list_backends, lookup_backend, register_backend

__all__ = ["list_backends", "lookup_backend", "register_backend"]

"""Helpers for tests of framejit and of code that uses it."""

from __future__ import annotations

from typing import Any

import torch


class CompileCounter:
    """A backend that runs graphs eagerly and counts them: frame_count graphs, op_count ops."""

    def __init__(self) -> None:
        self.frame_count = 0
        self.op_count = 0
        self.graphs: list[torch.fx.GraphModule] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        self.frame_count += 1
        self.op_count += sum(
            1 for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module")
        )
        self.graphs.append(gm)
        return gm.forward

    def clear(self) -> None:
        self.frame_count = 0
        self.op_count = 0
        self.graphs.clear()

"""The contract in DESIGN.md: framejit's own pipeline does not build on the systems it is
measured against (torch._dynamo, torch.compile, torch._inductor, torch._functorch.aot_autograd,
torch._C._dynamo). Checked on the source: no import of them and no attribute path into them in
code, and no call of torch.compile (names inside strings and comments do not count; the
translator may name torch.compile to refuse tracing it)."""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ["framejit", "frontend", "guards", "backend", "cudagraphs"]
FORBIDDEN = (
    "torch._dynamo",
    "torch._inductor",
    "torch._functorch.aot_autograd",
    "torch._C._dynamo",
)


def _sources() -> list[pathlib.Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _uses(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Attribute):
            dotted = _dotted(node)
            names = [dotted] if dotted else []
        elif isinstance(node, ast.Call):
            dotted = _dotted(node.func)
            if dotted == "torch.compile":
                found.append((node.lineno, "torch.compile(...)"))
        for name in names:
            if any(name == f or name.startswith(f + ".") for f in FORBIDDEN):
                found.append((node.lineno, name))
    return found


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_pipeline_does_not_use_what_it_is_measured_against(path: pathlib.Path) -> None:
    tree = ast.parse(path.read_text(), filename=str(path))
    assert _uses(tree) == [], f"{path.relative_to(ROOT)} uses {_uses(tree)}"


def test_the_check_catches_a_use() -> None:
    tree = ast.parse(
        "import torch._dynamo\nfrom torch._inductor import config\n"
        "y = torch.compile(f)\nz = torch._C._dynamo.eval_frame\ns = 'torch._dynamo'\n"
    )
    found = [name for _, name in _uses(tree)]
    assert "torch._dynamo" in found and "torch._inductor" in found
    assert "torch.compile(...)" in found and "torch._C._dynamo.eval_frame" in found
    assert all("'" not in name for name in found)  # the string does not count


def test_every_subpackage_is_installed() -> None:
    """pyproject.toml lists packages one by one (the folders are mapped under `framejit.`): a
    folder missing there would be left out of a wheel, though an editable install finds it."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    mapped = {name: ROOT / path for name, path in config["package-dir"].items()}
    assert listed == set(mapped)
    on_disk = set()
    for pkg in PACKAGES:
        for init in (ROOT / pkg).rglob("__init__.py"):
            folder = init.parent.relative_to(ROOT).parts
            name = "framejit" if folder[0] == "framejit" else "framejit." + folder[0]
            on_disk.add(".".join([name, *folder[1:]]))
    assert on_disk <= listed, f"not in pyproject.toml: {sorted(on_disk - listed)}"
    for name, path in mapped.items():
        assert (path / "__init__.py").exists(), name

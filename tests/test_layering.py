"""Imports run one way (the design card): reference imports nothing of ours; conformance imports the
reference; adapters import the contract and the model; the command line sits on top."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ALLOWED = {
    "reference": ("rmqspec.reference",),
    "conformance": ("rmqspec.reference", "rmqspec.conformance"),
    "adapters": ("rmqspec.reference", "rmqspec.conformance", "rmqspec.adapters"),
}
# Relative imports stay inside their package, so they are fine by construction.


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
    return out


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_a_layer_imports_only_what_is_below_it(layer: str) -> None:
    wrong = [
        f"{path.relative_to(ROOT)}:{line}: imports {module}"
        for path in sorted((ROOT / layer).rglob("*.py"))
        for line, module in _imports(path)
        if (module == "rmqspec" or module.startswith("rmqspec."))
        and not any(module == a or module.startswith(a + ".") for a in ALLOWED[layer])
    ]
    assert not wrong, "\n".join(wrong)

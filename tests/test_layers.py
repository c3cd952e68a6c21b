"""The packages are layered one way (docs/architecture.md): each imports only the packages below it, so a trial
(which gets `tasks` and `trainers` only) never needs the grader or the agent, and nothing forms a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ALLOWED = {
    "tasks": set(),
    "sandbox": {"tasks"},
    "grader": {"tasks", "sandbox"},
    "trainers": {"tasks"},
    "agent": {"tasks", "sandbox", "grader", "trainers"},
}


def imported_packages(path: Path) -> set[str]:
    """Top-level rlloop packages a module imports, at module level or inside functions."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found & set(ALLOWED)


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_each_package_imports_only_the_layers_below_it(package: str) -> None:
    wrong = {
        str(path.relative_to(ROOT)): sorted(bad)
        for path in sorted((ROOT / package).rglob("*.py"))
        if (bad := imported_packages(path) - ALLOWED[package] - {package})
    }
    assert not wrong, f"{package} may import only {sorted(ALLOWED[package])}: {wrong}"

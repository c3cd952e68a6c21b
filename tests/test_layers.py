"""The packages are layered one way (docs/architecture.md): each imports only the packages below it, so a trial
(which gets `tasks` and `trainers` only) never needs the grader or the agent, and nothing forms a cycle."""

from __future__ import annotations

import ast
import re
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


# Import circles between files. Counted: every `import` statement wherever it stands: at module level, inside a
# function (a lazy import is still a dependency, and often the one that hides a circle) and under
# `if TYPE_CHECKING:` (a type named from a module is a dependency on it, even if it never runs); `from x import y` as
# an import of the submodule x.y where y is one, relative imports resolved; `import_module("a.b")` and
# `importlib.import_module("a.b")` with a literal name (an import by name is still an import). Not counted: a name
# computed at run time (a registry's list of modules) and entry points, which the distribution's metadata names
# (how a registry below its built-ins is handed them). An import of a.b.c is an edge to a.b.c only, not to the
# packages a and a.b whose __init__ it also runs.

# Known circles not yet broken, each an exact set: a new circle fails, and so does a listed one that is gone or has
# changed (remove or update its entry). None today; keep it that way.
KNOWN_CIRCLES: frozenset[frozenset[str]] = frozenset()


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES: dict[str, Path] = {
    _module_name(path): path for package in sorted(ALLOWED) for path in sorted((ROOT / package).rglob("*.py"))
}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class _Imports(ast.NodeVisitor):
    """The dotted names a module's import statements name: (name, line, inside a function or under TYPE_CHECKING)."""

    def __init__(self, module: str, is_package: bool) -> None:
        self.package = module.split(".") if is_package else module.split(".")[:-1]
        self.depth = 0
        self.found: list[tuple[str, int, bool]] = []

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_If(self, node: ast.If) -> None:
        if not _is_type_checking(node.test):
            self.generic_visit(node)
            return
        self.depth += 1  # named for types only: counted, reported like a lazy import
        for statement in node.body:
            self.visit(statement)
        self.depth -= 1
        for statement in node.orelse:
            self.visit(statement)

    def visit_Import(self, node: ast.Import) -> None:
        self.found += [(alias.name, node.lineno, self.depth > 0) for alias in node.names]

    def visit_Call(self, node: ast.Call) -> None:
        function = node.func
        named = function.id if isinstance(function, ast.Name) else getattr(function, "attr", None)
        name = node.args[0].value if node.args and isinstance(node.args[0], ast.Constant) else None
        if named == "import_module" and isinstance(name, str) and not name.startswith("."):
            self.found.append((name, node.lineno, self.depth > 0))
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = ".".join(
                [*self.package[: len(self.package) - node.level + 1], *filter(None, [node.module])]
            )
        else:
            base = node.module or ""
        for alias in node.names:
            submodule = f"{base}.{alias.name}"
            self.found.append((submodule if submodule in MODULES else base, node.lineno, self.depth > 0))


def _project_module(name: str) -> str | None:
    """The project module an import of `name` loads (its longest prefix that is one), or None (not ours)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> dict[str, dict[str, tuple[int, bool]]]:
    """module -> {imported project module: (line of its first import, whether that import is not at module level)}."""
    graph: dict[str, dict[str, tuple[int, bool]]] = {}
    for module, path in MODULES.items():
        visitor = _Imports(module, path.name == "__init__.py")
        visitor.visit(ast.parse(path.read_text(encoding="utf-8")))
        edges = graph.setdefault(module, {})
        for name, line, lazy in visitor.found:
            target = _project_module(name)
            if target is not None and target != module:
                edges.setdefault(target, (line, lazy))
    return graph


def import_circles(graph: dict[str, dict[str, tuple[int, bool]]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan), each a set of module names."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[frozenset[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in graph[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == module:
                    break
            if len(component) > 1:
                circles.append(frozenset(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(circles, key=sorted)


def describe_circle(circle: frozenset[str], graph: dict[str, dict[str, tuple[int, bool]]]) -> str:
    """The circle's files, and each import between them with its line (and whether it is in a function)."""
    lines = [" <-> ".join(str(MODULES[m].relative_to(ROOT)) for m in sorted(circle))]
    for module in sorted(circle):
        for target, (line, lazy) in sorted(graph[module].items()):
            if target in circle:
                where = " (in a function or under TYPE_CHECKING)" if lazy else ""
                lines.append(f"    {MODULES[module].relative_to(ROOT)}:{line}{where} imports {target}")
    return "\n".join(lines)


def test_no_import_circles_between_files() -> None:
    graph = import_graph()
    new = [c for c in import_circles(graph) if c not in KNOWN_CIRCLES]
    assert not new, "import circles (break each one; see the comment above KNOWN_CIRCLES):\n" + "\n".join(
        describe_circle(c, graph) for c in new
    )


def test_the_known_circles_are_still_there() -> None:
    gone = KNOWN_CIRCLES - set(import_circles(import_graph()))
    assert not gone, f"no longer circles as listed: update KNOWN_CIRCLES: {[sorted(c) for c in gone]}"


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        ("trainers.verl.plan", "from trainers.verl import resolve", {"trainers.verl.resolve"}),
        (
            "trainers.verl.plan",
            "from . import resolve, builders",
            {"trainers.verl.resolve", "trainers.verl.builders"},
        ),
        ("trainers.verl.plan", "from .builders import Stage", {"trainers.verl.builders"}),
        ("trainers.verl.ext.opcd", "from .. import plan", {"trainers.verl.plan"}),
        ("trainers.verl", "from .ext import opcd", {"trainers.verl.ext.opcd"}),
        ("trainers.verl.plan", "import trainers.verl.ext.data as d", {"trainers.verl.ext.data"}),
        ("trainers.verl.plan", "from tasks import Sample", {"tasks"}),
        ("trainers.verl.plan", "from tasks.plugins import NoSuchName", {"tasks.plugins"}),
        ("trainers.verl.plan", "def f():\n    from tasks import atomic", {"tasks.atomic"}),
        (
            "trainers.verl.plan",
            "if TYPE_CHECKING:\n    import tasks.atomic\nelse:\n    import tasks.chat",
            {"tasks.atomic", "tasks.chat"},
        ),
        ("trainers.verl.plan", "import os, torch, verl.trainer", set()),
        ("trainers.verl.plan", "def f():\n    import_module('tasks.atomic').x()", {"tasks.atomic"}),
        ("trainers.verl.plan", "importlib.import_module('trainers.verl.resolve')", {"trainers.verl.resolve"}),
        ("trainers.verl.plan", "import_module(name); import_module('verl.trainer')", set()),
    ],
)
def test_imports_are_resolved_to_the_files_they_load(module: str, source: str, expected: set[str]) -> None:
    visitor = _Imports(module, MODULES[module].name == "__init__.py")
    visitor.visit(ast.parse(source))
    assert {_project_module(name) for name, _, _ in visitor.found} - {None} == expected


# The parts of agent/, top to bottom (docs/architecture.md draws them). A part imports only the parts in rows below
# its own, counting every import statement (module level, inside functions, under TYPE_CHECKING); parts in one row
# never import each other. `core` (the run's records) is the bottom and imports no other part.
AGENT_LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"cli"}),
    frozenset({"service", "sweeps"}),
    frozenset({"launch"}),
    frozenset({"external"}),
    frozenset({"loop"}),
    frozenset({"proposers", "results"}),
    frozenset({"run"}),
    frozenset({"tracking", "status", "processes"}),
    frozenset({"llm"}),
    frozenset({"core"}),
)


def _agent_part(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "agent" and len(parts) > 1 else None


def test_every_part_of_agent_has_a_layer() -> None:
    folders = {path.parent.name for path in (ROOT / "agent").glob("*/__init__.py")}
    assert folders == set().union(*AGENT_LAYERS), (
        "add the new part of agent/ to AGENT_LAYERS and the docs' drawing"
    )


def test_the_parts_of_agent_import_only_the_parts_below_them() -> None:
    row = {part: depth for depth, parts in enumerate(AGENT_LAYERS) for part in parts}
    wrong = []
    for module, edges in import_graph().items():
        source = _agent_part(module)
        for target, (line, _) in edges.items():
            imported = _agent_part(target)
            if source and imported and imported != source and row[imported] <= row[source]:
                wrong.append(
                    f"{MODULES[module].relative_to(ROOT)}:{line} ({source}) imports {target} ({imported})"
                )
    assert not wrong, "an import upwards or sideways between the parts of agent/:\n" + "\n".join(
        sorted(wrong)
    )


def _face(part: str) -> set[str]:
    """The names a part of agent/ lets the others use: the `__all__` of its `__init__.py`."""
    tree = ast.parse((ROOT / "agent" / part / "__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return {str(ast.literal_eval(element)) for element in node.value.elts}  # type: ignore[attr-defined]
    return set()


def test_every_part_of_agent_has_a_face() -> None:
    faceless = sorted(part for parts in AGENT_LAYERS for part in parts if not _face(part))
    assert not faceless, (
        f"declare what each part lets the others use (`__all__` in its __init__.py): {faceless}"
    )


def test_the_parts_of_agent_use_each_other_through_their_faces() -> None:
    """One part imports another's names from its package (`from agent.run import RunConfig`), and only names in
    that package's `__all__`; its modules are its own business."""
    wrong = []
    for module, path in MODULES.items():
        source = _agent_part(module)
        if source is None:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                named = [alias.name for alias in node.names if _agent_part(alias.name) not in (None, source)]
                wrong += [f"{path.relative_to(ROOT)}:{node.lineno} imports {name}" for name in named]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                target = _agent_part(node.module)
                if target in (None, source):
                    continue
                if node.module != f"agent.{target}":
                    wrong.append(
                        f"{path.relative_to(ROOT)}:{node.lineno} imports from {node.module}, not agent.{target}"
                    )
                    continue
                hidden = sorted({alias.name for alias in node.names} - _face(target))
                if hidden:
                    wrong.append(
                        f"{path.relative_to(ROOT)}:{node.lineno} uses {hidden}, not in agent.{target}.__all__"
                    )
    assert not wrong, "imports past a part's face:\n" + "\n".join(wrong)


# A face is what the other parts need of a part, not where what fitted nowhere else goes: at most MAX_FACE names, and
# each one used outside its part (imported by another part, a test or a benchmark; named by an entry point in
# pyproject.toml; or documented in CONTRIBUTING.md as `agent.<part>.<name>` for plugin authors).
MAX_FACE = 30
# Names known to be used nowhere outside their part, each an exact set per part: a new one fails, and so does a listed
# one that is used now (remove it).
KNOWN_UNUSED: dict[str, frozenset[str]] = {}


def _used_names() -> dict[str, set[str]]:
    """Part -> the names of its face that something outside the part uses."""
    used: dict[str, set[str]] = {}
    sources = [
        path for top in ("agent", "tests", "benchmarks") for path in sorted((ROOT / top).rglob("*.py"))
    ]
    for path in sources:
        rel = path.relative_to(ROOT).parts
        own = rel[1] if rel[0] == "agent" and len(rel) > 2 else None
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                part = _agent_part(node.module)
                if part is not None and part != own and node.module == f"agent.{part}":
                    used.setdefault(part, set()).update(alias.name for alias in node.names)
    named = (ROOT / "pyproject.toml").read_text() + (ROOT / "CONTRIBUTING.md").read_text()
    for part, name in re.findall(r"\bagent\.(\w+)[.:](\w+)", named):
        used.setdefault(part, set()).add(name)
    return used


def test_no_face_lists_more_than_max_face_names() -> None:
    sizes = {part: len(_face(part)) for parts in AGENT_LAYERS for part in parts}
    assert all(size > 0 for size in sizes.values())
    assert not {part: size for part, size in sizes.items() if size > MAX_FACE}, (
        f"a face lists more than {MAX_FACE} names (move what one part uses into it, or make a part of its own): "
        f"{sorted(sizes.items(), key=lambda item: -item[1])}"
    )


def test_every_name_of_a_face_is_used_outside_its_part() -> None:
    used = _used_names()
    unused = {
        part: sorted(_face(part) - used.get(part, set()))
        for parts in AGENT_LAYERS
        for part in parts
        if _face(part) - used.get(part, set()) != KNOWN_UNUSED.get(part, frozenset())
    }
    assert not unused, (
        f"face names used nowhere outside their part (drop them, or update KNOWN_UNUSED): {unused}"
    )


# A module does one job; past MAX_MODULE_LINES it is doing more (split it by job, not at the line). Known long
# modules, each exact: a new one fails, and so does a listed one that is short now (remove it).
MAX_MODULE_LINES = 500
KNOWN_LONG: frozenset[str] = frozenset()


def test_no_module_of_the_product_packages_is_over_max_module_lines() -> None:
    long = {
        str(path.relative_to(ROOT)): lines
        for path in MODULES.values()
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert set(long) == KNOWN_LONG, (
        f"modules over {MAX_MODULE_LINES} lines (KNOWN_LONG: {sorted(KNOWN_LONG)}): {long}"
    )

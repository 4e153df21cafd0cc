"""The layering of docs/architecture.md, checked on the source: imports point down, no module imports another
that imports it back, and the torch-free packages stay torch-free."""

from __future__ import annotations

import ast
import importlib
import warnings
from pathlib import Path

import pytest
from support import REPO

#: Layer of each part of the code; a module may import only from its own layer or lower ones, except where
#: ALSO_ALLOWED says otherwise. Keys are module-name prefixes, longest match wins.
LAYERS = {
    "sandbox": 0,
    "rewards": 0,
    "grpo_recipes": 1,  # the shared modules: recipe, data, models, reward stack, cli, ports
    "grpo_recipes.tasks": 1,
    "grpo_recipes.agents": 1,  # tools and environments: below the shared modules that build them from a recipe
    "grpo_recipes.evaluation": 2,
    "grpo_recipes.launch": 2,
    "grpo_recipes.training": 3,
}
#: Within layer 2, evaluation and launch stay apart (neither imports the other).
FORBIDDEN = {
    ("grpo_recipes.evaluation", "grpo_recipes.launch"),
    ("grpo_recipes.launch", "grpo_recipes.evaluation"),
}
PACKAGES = ("grpo_recipes", "rewards", "sandbox")
TORCH_FREE = ("rewards", "sandbox")
HEAVY = {"torch", "transformers", "trl", "accelerate", "peft", "datasets", "vllm", "deepspeed"}


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path, top_level_only: bool = False) -> set[str]:
    """Project modules (and, for HEAVY, third-party roots) that `name` imports, resolved to module names."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found |= {f"{module}.{alias.name}" for alias in node.names if f"{module}.{alias.name}" in MODULES}
    return found


def _owner(module: str) -> str | None:
    """The project module `module` names (a module, or the package holding an imported name)."""
    while module and module not in MODULES:
        module = module.rpartition(".")[0]
    return module or None


def _layer(module: str) -> tuple[str, int]:
    prefix = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len)
    return prefix, LAYERS[prefix]


def _edges() -> dict[str, set[str]]:
    edges = {}
    for name, path in MODULES.items():
        targets = {_owner(m) for m in _imports(name, path)} - {None, name}
        edges[name] = {t for t in targets if not name.startswith(t + ".") or t not in PACKAGES}
    return edges


def test_the_tree_has_the_documented_subpackages_each_with_a_docstring():
    for package in ("grpo_recipes", "grpo_recipes.tasks", "grpo_recipes.training", "grpo_recipes.evaluation"):
        assert package in MODULES, package
    for package in ("grpo_recipes.launch", "rewards"):
        docstring = ast.get_docstring(ast.parse(MODULES[package].read_text()))
        assert docstring and len(docstring) > 100, package
    for name, path in MODULES.items():
        assert ast.get_docstring(ast.parse(path.read_text())), f"{name} has no module docstring"


def test_imports_point_down_only():
    wrong = []
    for name, targets in _edges().items():
        here, level = _layer(name)
        for target in targets:
            there, target_level = _layer(target)
            if target_level > level or (here, there) in FORBIDDEN:
                wrong.append(f"{name} -> {target}")
    assert not wrong, "imports that point up or across: " + ", ".join(sorted(wrong))


def test_no_import_cycles():
    edges = _edges()
    # Within a package, __init__ importing its own submodules is how a package exports; the cycle check
    # treats a package's __init__ as its own node, so the only cycles left are between modules.
    state: dict[str, int] = {}
    cycle: list[str] = []

    def visit(node: str, stack: list[str]) -> bool:
        state[node] = 1
        for target in sorted(edges.get(node, ())):
            if node.startswith(target + "."):  # a submodule naming its own package (its __init__)
                continue
            if state.get(target) == 1:
                cycle.extend(stack[stack.index(target) :] + [target])
                return True
            if state.get(target) is None and visit(target, [*stack, target]):
                return True
        state[node] = 2
        return False

    for node in sorted(edges):
        if state.get(node) is None and visit(node, [node]):
            break
    assert not cycle, "import cycle: " + " -> ".join(cycle)


@pytest.mark.parametrize("package", TORCH_FREE)
def test_torch_free_packages_import_nothing_heavy_and_nothing_of_the_library(package):
    for name, path in MODULES.items():
        if name != package and not name.startswith(package + "."):
            continue
        imported = _imports(name, path)
        assert not {m for m in imported if m.split(".")[0] == "grpo_recipes"}, name
        assert not {m.split(".")[0] for m in imported} & HEAVY, name


def test_agents_import_no_other_library_module_and_nothing_heavy_at_the_top():
    """The recipe loader checks tool names with grpo_recipes.agents: it must import fast and point down only."""
    for name, path in MODULES.items():
        if not name.startswith("grpo_recipes.agents"):
            continue
        imported = _imports(name, path)
        library = {
            m for m in imported if m.startswith("grpo_recipes") and not m.startswith("grpo_recipes.agents")
        }
        assert not library, f"{name} imports {library}"
        assert not {m.split(".")[0] for m in _imports(name, path, top_level_only=True)} & HEAVY, name


def test_old_module_names_still_import_and_warn():
    from grpo_recipes import MOVED_MODULES

    for old, new in MOVED_MODULES.items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            module = importlib.import_module(old)
        assert module is importlib.import_module(new)
        assert any(new in str(w.message) and w.category is DeprecationWarning for w in caught), old

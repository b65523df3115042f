"""The layers of flowd (docs/architecture.md, "Layers"): a module imports only modules of its own
layer or below. Every import counts — at load, inside functions and for type checking alike — so
a dependency cannot hide behind `TYPE_CHECKING`."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Package → layer: each folder is one layer (a sub-package such as `engine/core/` may be a layer
# of its own); the longest matching prefix decides. Lower layers never import higher.
LAYERS: dict[str, int] = {
    "flowd": 0,  # the package itself holds only `__version__`
    "flowd.base": 0,  # errors, durable writes, times, wire models, path arithmetic
    "flowd.protocol": 1,  # the declared LSP protocol (names and models)
    "flowd.plan": 1,  # story plans: models, parsing, validation, graph, perimeter
    "flowd.tasks": 1,  # task plans
    "flowd.events": 1,  # the event union and the status vocabularies the core uses
    "flowd.engine.core": 2,  # the engine's pure rules
    "flowd.trace": 3,  # trace files, the fold, checkpoints
    "flowd.store": 3,  # files under .flow/ (settings, roster, inbox, the scripted agent's script)
    "flowd.daemon": 3,  # the repository's daemon as clients reach it; `flowd serve`'s forwarder
    "flowd.vcs": 3,  # git
    "flowd.programs": 3,  # the agent programs flowd knows and where they keep their state
    "flowd.agents": 4,  # agent processes
    "flowd.sandbox": 4,  # lane confinement, applied where agents and gates start
    "flowd.cost": 4,
    "flowd.roster": 5,  # the executor pool
    "flowd.engine": 6,  # the engine's shell: a run, its launch and the planner's drafts
    "flowd.control": 7,  # commands over runs and plans, and the views' wire shapes
    "flowd.schema": 7,  # generated schemas and the clients' protocol files
    "flowd.demo": 8,
    "flowd.server": 8,
    "flowd.cli": 9,
    "flowd.__main__": 9,
}
# The only rows that are modules rather than folders: the package's entry points.
ENTRY_MODULES = {"flowd", "flowd.cli", "flowd.__main__"}


def layer_of(module: str) -> int:
    prefixes = [p for p in LAYERS if module == p or module.startswith(p + ".")]
    return LAYERS[max(prefixes, key=len)]


def modules() -> dict[str, Path]:
    found = {}
    for path in (ROOT / "flowd").rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports_of(source: str, known: set[str]) -> set[str]:
    """Every flowd module `source` imports anywhere in its text (`from flowd.x import y` names
    `flowd.x.y` when that is a module)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.startswith("flowd"):
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    found.add(full if full in known else node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("flowd"))
    return found - {"flowd"}


def violations(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{mod} (layer {layer_of(mod)}) imports {dep} (layer {layer_of(dep)})"
        for mod, deps in graph.items()
        for dep in deps
        if layer_of(dep) > layer_of(mod)
    )


def test_every_import_goes_down_or_sideways() -> None:
    mods = modules()
    graph = {name: imports_of(path.read_text(encoding="utf-8"), set(mods)) for name, path in mods.items()}
    assert violations(graph) == []


def test_an_import_hidden_behind_type_checking_is_a_violation() -> None:
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from flowd.engine.runner import X\n"
    graph = {"flowd.engine.core.scheduler": imports_of(source, {"flowd.engine.runner"})}
    assert violations(graph) == [
        "flowd.engine.core.scheduler (layer 2) imports flowd.engine.runner (layer 6)"
    ]


def test_an_import_inside_a_function_is_a_violation() -> None:
    source = "def f():\n    from flowd.server.app import FlowServer\n"
    graph = {"flowd.trace.view": imports_of(source, set())}
    assert violations(graph) == ["flowd.trace.view (layer 3) imports flowd.server.app (layer 8)"]


def test_every_layer_prefix_names_a_module() -> None:
    """A renamed package leaves no stale row behind."""
    mods = modules()
    stale = [p for p in LAYERS if not any(m == p or m.startswith(p + ".") for m in mods)]
    assert stale == []


def test_every_layer_is_a_folder() -> None:
    """No per-module exceptions: a module whose imports belong to another layer moves to a folder
    of that layer (docs/architecture.md, "Layers")."""
    not_folders = [
        p
        for p in LAYERS
        if p not in ENTRY_MODULES and not (ROOT / p.replace(".", "/") / "__init__.py").is_file()
    ]
    assert not_folders == []


def test_a_module_put_back_in_a_lower_folder_is_a_violation() -> None:
    """The planner's drafting calls agents (layer 6): back among the plan's pure modules it climbs."""
    source = "from flowd.engine import prompts\n"
    graph = {"flowd.plan.draft": imports_of(source, {"flowd.engine.prompts"})}
    assert violations(graph) == ["flowd.plan.draft (layer 1) imports flowd.engine.prompts (layer 6)"]

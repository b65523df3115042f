"""docs/architecture.md lists every module of flowd, so a maintainer with only the repository
finds each one and its kind."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_module_is_listed_in_the_architecture() -> None:
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    listed = doc.split("## Every module", 1)[1]
    missing = []
    for path in sorted((ROOT / "flowd").rglob("*.py")):
        if path.name == "__main__.py":
            continue
        rel = path.relative_to(ROOT)
        name = f"{rel.parent}/" if path.name == "__init__.py" and rel.parent != Path("flowd") else str(rel)
        if f"| `{name}` |" not in listed:
            missing.append(name)
    assert missing == [], f"docs/architecture.md 'Every module' lacks {missing}"


def _imports(path: Path, modules: set[str]) -> set[str]:
    """Every flowd module `path` imports: at load, under `if TYPE_CHECKING:` and inside functions
    alike, so a cycle cannot hide behind a type-checking or a deferred import."""
    import ast

    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and node.module
            and node.module.startswith("flowd")
        ):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                found.add(full if full in modules else node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("flowd"))
    return found & modules


def import_cycles(package: Path) -> list[str]:
    """Each import cycle among the modules under `package` (a folder named `flowd`), once, as
    `a → b → a` starting from its least module name."""
    paths = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        paths[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {name: _imports(path, set(paths)) for name, path in paths.items()}
    cycles: set[str] = set()
    for start in graph:
        stack, seen = [(start, [start])], set()
        while stack:
            name, trail = stack.pop()
            for nxt in sorted(graph[name]):
                if nxt == start and min(trail) == start:
                    cycles.add(" → ".join([*trail, start]))
                elif nxt not in seen and nxt != start:
                    seen.add(nxt)
                    stack.append((nxt, [*trail, nxt]))
    return sorted(cycles)


def test_no_import_cycles() -> None:
    """Each layer imports only what it stands on (docs/architecture.md): no module needs itself,
    not even for type checking (a narrow `typing.Protocol` in the lower module breaks a cycle)."""
    cycles = import_cycles(ROOT / "flowd")
    assert cycles == [], "import cycles:\n" + "\n".join(cycles)


def test_a_cycle_through_type_checking_or_a_function_import_is_found(tmp_path: Path) -> None:
    """The check above can fail: cycles hidden behind `TYPE_CHECKING` and in a function count."""
    package = tmp_path / "flowd"
    (package / "engine").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "engine/__init__.py": "",
        "engine/a.py": "from flowd.engine.b import B\n",
        "engine/b.py": (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from flowd.engine.a import A\nB = 1\n"
        ),
        "engine/c.py": "import flowd.engine.d\n",
        "engine/d.py": "def f() -> None:\n    from flowd.engine import c\n",
        "engine/e.py": "from flowd.engine import a\n",  # depends on a cycle, is in none
    }
    for name, text in files.items():
        (package / name).write_text(text, encoding="utf-8")
    assert import_cycles(package) == [
        "flowd.engine.a → flowd.engine.b → flowd.engine.a",
        "flowd.engine.c → flowd.engine.d → flowd.engine.c",
    ]


# The engine core (docs/architecture.md: the engine core) stands on the standard library, the data
# models of plans and events, and itself; the shell stands on it, never the other way round.
CORE_MAY_IMPORT = (
    "flowd.engine.core",
    "flowd.events.model",
    "flowd.events.statuses",  # the status vocabularies: plain Literals and how they map
    "flowd.plan.model",
    "flowd.plan.graph",
    "flowd.tasks.model",  # a story's task plan: plain models, like the story plan's
    "flowd.tasks.parsing",  # what a task description's last lines say: pure text rules
    "flowd.plan.perimeter",  # which paths a story may touch: pure rules over the plan (stray tasks)
    "flowd.base.errors",
)
# What loading those brings along: the packages' own `__init__`s and the pure modules they load.
CORE_MAY_LOAD = (
    *CORE_MAY_IMPORT,
    "flowd.base",
    "flowd.events",
    "flowd.base.wire",
    "flowd.base.paths",
    "flowd.plan",
    "flowd.tasks",
    "flowd.engine",
)
SHELL = (
    "flowd.engine.story",
    "flowd.engine.story_prepare",
    "flowd.engine.story_merge",
    "flowd.engine.runner",
    "flowd.engine.taskloop",
    "flowd.engine.taskbody",
    "flowd.engine.context",
    "flowd.engine.state",
    "flowd.agents",
    "flowd.roster",
    "flowd.vcs",
    "flowd.server",
    "flowd.store.config",
    "flowd.trace.log",
    "flowd.engine.draft",
)


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def test_the_engine_core_imports_only_the_stdlib_the_models_and_itself() -> None:
    """Every import in flowd/engine/core, type-checking ones and those inside functions too."""
    import ast
    import sys

    found = []
    for path in sorted((ROOT / "flowd" / "engine" / "core").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                stdlib = name.split(".")[0] in sys.stdlib_module_names or name == "__future__"
                if not stdlib and not _within(name, CORE_MAY_IMPORT):
                    found.append(f"{path.relative_to(ROOT)} imports {name}")
    assert found == []


def test_loading_the_engine_core_loads_nothing_of_the_shell() -> None:
    """What a fresh interpreter holds after importing every core module: no edge module."""
    import subprocess
    import sys

    script = (
        "import importlib, pkgutil, sys\n"
        "import flowd.engine.core as core\n"
        "for m in pkgutil.iter_modules(core.__path__):\n"
        "    importlib.import_module('flowd.engine.core.' + m.name)\n"
        "print('\\n'.join(sorted(k for k in sys.modules if k.startswith('flowd'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
    loaded = out.stdout.split()
    assert "flowd.engine.core.scheduler" in loaded  # the script did load the core
    assert [m for m in loaded if _within(m, SHELL)] == []
    assert [m for m in loaded if m != "flowd" and not _within(m, CORE_MAY_LOAD)] == []


MAX_FUNCTION_LINES = 80


def test_no_function_in_flowd_exceeds_80_lines() -> None:
    """Functions fit on a screen: one longer than 80 lines (decorators to last line) fails here;
    split it into named pieces."""
    import ast

    long = []
    for path in sorted((ROOT / "flowd").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                lines = (node.end_lineno or node.lineno) - first + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{first} {node.name} ({lines} lines)")
    assert long == []

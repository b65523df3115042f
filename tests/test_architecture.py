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
    """The flowd modules `path` imports when it loads (imports for type checking only aside)."""
    import ast

    found: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("flowd"):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                found.add(full if full in modules else node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("flowd"))
    return found & modules


def test_no_import_cycles() -> None:
    """Each layer imports only what it stands on (docs/architecture.md): no module needs itself."""
    paths = {}
    for path in (ROOT / "flowd").rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        paths[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {name: _imports(path, set(paths)) for name, path in paths.items()}
    cycles = []
    for start in graph:
        stack, seen = [(start, [start])], set()
        while stack:
            name, trail = stack.pop()
            for nxt in graph[name]:
                if nxt == start:
                    cycles.append(" → ".join([*trail, start]))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*trail, nxt]))
    assert cycles == []

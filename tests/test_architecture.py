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

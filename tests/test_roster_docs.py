"""Every roster example in docs/roster.md loads with the real loader (docs that cannot rot)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from flowd.store.config import load_roster

DOC = Path(__file__).resolve().parent.parent / "docs" / "roster.md"
BLOCKS = re.findall(r"```toml\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)


def test_the_doc_has_an_example_for_every_kind() -> None:
    kinds = {k for block in BLOCKS for k in re.findall(r'^kind = "(\w+)"', block, re.MULTILINE)}
    assert kinds == {"acp", "cli", "openai", "script"}


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_roster_example_loads(block: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in set(re.findall(r"\$\{(\w+)\}", block)):
        monkeypatch.setenv(name, f"value-of-{name}")
    (tmp_path / ".flow").mkdir()
    (tmp_path / ".flow/roster.toml").write_text(block, encoding="utf-8")
    for script in re.findall(r'^script = "([^"]+)"', block, re.MULTILINE):
        (tmp_path / ".flow" / script).write_text('{"rules": []}', encoding="utf-8")
    roster = load_roster(tmp_path, user_path=tmp_path / "none.toml")
    assert roster.executors
    for spec in roster.executors:
        assert all(not value.startswith("${") for value in spec.resolved_env.values())

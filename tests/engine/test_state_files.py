"""Unreadable state files are reported in one line naming the file, the field and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from flowd.base.errors import InputError
from flowd.engine.state import EpicPaths, load_intent, load_state


def _message(exc: pytest.ExceptionInfo[InputError]) -> str:
    return str(exc.value)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b'{"id": "s1", "status": 7}', "is required and"),
        (b"{not json", "Invalid JSON"),
        (b"", "Invalid JSON"),
    ],
)
def test_unreadable_story_state_is_one_line(tmp_path: Path, content: bytes, expected: str) -> None:
    paths = EpicPaths(tmp_path, "e1")
    paths.stories.mkdir(parents=True)
    paths.state("s1").write_bytes(content)
    with pytest.raises(InputError) as exc:
        load_state(paths, "s1")
    message = _message(exc)
    assert "\n" not in message
    assert str(paths.state("s1")) in message
    assert expected in message
    assert "errors.pydantic.dev" not in message
    assert message.endswith("delete it to start the story over")
    assert paths.state("s1").read_bytes() == content  # nothing of the file is touched


def test_unreadable_merge_intent_is_one_line(tmp_path: Path) -> None:
    paths = EpicPaths(tmp_path, "e1")
    paths.root.mkdir(parents=True)
    paths.merging.write_bytes(b'{"story": 3}')
    with pytest.raises(InputError) as exc:
        load_intent(paths)
    message = _message(exc)
    assert "\n" not in message and str(paths.merging) in message
    assert "then delete the file" in message

"""JSON as flowd writes it (flowd/base/jsonl.py): a file name that is not UTF-8 never stops a write."""

from __future__ import annotations

import os

from flowd.base.jsonl import dumps, loads, utf8_text


def test_a_name_that_is_not_utf8_is_written_with_its_bytes_escaped() -> None:
    name = os.fsdecode(b"own/bad\xffname.txt")  # what `git status` output decodes to
    line = dumps({"paths": [{"path": name}], name: ("\ud800", 1)})
    assert loads(line) == {
        "paths": [{"path": "own/bad\\xffname.txt"}],
        "own/bad\\xffname.txt": ["\\ud800", 1],
    }
    assert utf8_text("café ☃") == "café ☃" and dumps("café") == '"café"'.encode()

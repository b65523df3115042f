"""Fixtures of the real-agent suite (`make test-agents`): installed programs and the model stub."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agents_real.harness import install
from tests.model_stub import ModelStub


@pytest.fixture(scope="session")
def installed() -> dict[str, Path]:
    return install()


@pytest.fixture
def stub(tmp_path: Path) -> Iterator[ModelStub]:
    with ModelStub(log_path=tmp_path / "stub.log") as server:
        yield server

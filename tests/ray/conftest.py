from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.ray.cluster import Cluster, start_cluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    running = start_cluster()
    try:
        yield running
    finally:
        running.stop()

"""The server fans each hook out to every feature: one feature's error is logged and the features
after it still hear the hook (docs/architecture.md: the language server)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any, cast

import pytest

from flowd.events.model import Envelope, Info
from flowd.server.app import FlowServer
from flowd.server.features import Feature
from flowd.server.runs import Tracked


class Broken(Feature):
    async def started(self) -> None:
        raise RuntimeError("broken at start")

    def run_attached(self, run: Tracked) -> None:
        raise RuntimeError("broken on attach")

    def run_event(self, run: Tracked, envelope: Envelope) -> None:
        raise KeyError("broken on an event")

    def run_ended(self, run: Tracked) -> None:
        raise ValueError("broken at the end")


class Heard(Feature):
    def __init__(self, server: FlowServer) -> None:
        super().__init__(server)
        self.heard: list[str] = []

    async def started(self) -> None:
        self.heard.append("started")

    def run_attached(self, run: Tracked) -> None:
        self.heard.append("attached")

    def run_event(self, run: Tracked, envelope: Envelope) -> None:
        self.heard.append(f"event {envelope.seq}")

    def run_ended(self, run: Tracked) -> None:
        self.heard.append("ended")


class Run:
    """The one field of a run the fan-out itself reads."""

    live = False


def test_a_failing_feature_is_logged_and_the_next_one_still_hears_every_hook(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.chdir(tmp_path)  # no repository here: the server starts without runs
    server = FlowServer()
    heard = Heard(server)
    server.features.extend([Broken(server), heard])
    run = cast(Tracked, Run())
    envelope = Envelope(seq=7, at="2026-01-01T00:00:00.000Z", run_id="r", event=Info(message="x"))
    caplog.set_level(logging.ERROR, logger="flowd.server.app")

    async def life() -> None:
        await server.start()
        server.attached(run)
        server.event(run, envelope)
        server.ended(run)
        server.stop()

    asyncio.run(life())
    assert heard.heard == ["started", "attached", "event 7", "ended"]
    failures: list[Any] = [r for r in caplog.records if "feature Broken failed" in r.getMessage()]
    assert [r.getMessage() for r in failures] == [
        f"feature Broken failed in {hook}; the other features go on"
        for hook in ("started", "run_attached", "run_event", "run_ended")
    ]
    assert all(r.exc_info for r in failures)  # with the traceback, in the log only

"""The inbox between a live run and its clients (flowd/store/inbox.py, docs/answers.md): real files, a
real reader loop on its own thread, and a real `flowd run` process."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from flowd.base.errors import InputError
from flowd.store.inbox import Answer, InboxReader, Reply, Revision, inbox_dir, post
from flowd.trace.log import RunRecord, is_active, load_run_record, write_run_record
from tests.engine.scenario import Scenario, coder, kill_group, story


def _record(repo: Path, run_id: str, pid: int) -> None:
    write_run_record(repo, RunRecord(run_id=run_id, epic_id="ep", plan="p", pid=pid, started_at="t"))


@pytest.fixture
def serving(tmp_path: Path) -> Iterator[list[Answer | Revision]]:
    """A reader answering every request on its own event loop; yields what it was asked."""
    _record(tmp_path, "r1", os.getpid())
    seen: list[Answer | Revision] = []

    async def handle(request: Answer | Revision) -> Reply:
        seen.append(request)
        return Reply(ok=True, message=f"took {request.kind}")

    loop = asyncio.new_event_loop()
    task = loop.create_task(InboxReader(tmp_path, "r1").serve(handle, interval_s=0.01))

    def run() -> None:
        with contextlib.suppress(asyncio.CancelledError):
            loop.run_until_complete(task)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    yield seen
    loop.call_soon_threadsafe(task.cancel)
    thread.join(timeout=5)
    loop.close()


def test_a_request_is_taken_answered_and_kept(tmp_path: Path, serving: list[Answer | Revision]) -> None:
    reply = post(tmp_path, "r1", Revision(story="a", path="a.py", line=3, text="rename it", by="cli"))
    assert reply == Reply(ok=True, message="took revision")
    assert serving == [Revision(story="a", path="a.py", line=3, text="rename it", by="cli")]
    base = inbox_dir(tmp_path, "r1")
    assert [p.suffix for p in (base / "taken").iterdir()] == [".json"]
    assert not any(p.is_file() for p in base.iterdir())  # the reply was read and removed


def test_requests_are_taken_in_the_order_they_were_made(tmp_path: Path) -> None:
    _record(tmp_path, "r1", os.getpid())
    base = inbox_dir(tmp_path, "r1")
    base.mkdir(parents=True)
    for name, answer in (("20261130T000002", "second"), ("20261130T000001", "first")):
        (base / f"{name}.json").write_text(
            Answer(answer=answer, by="cli").model_dump_json(), encoding="utf-8"
        )
    taken = InboxReader(tmp_path, "r1").take()
    assert [request.answer for _, request in taken if isinstance(request, Answer)] == ["first", "second"]


def test_an_unreadable_request_gets_a_sentence_back(tmp_path: Path) -> None:
    base = inbox_dir(tmp_path, "r1")
    base.mkdir(parents=True)
    (base / "x.json").write_text('{"kind": "answer"}', encoding="utf-8")
    [(name, reply)] = InboxReader(tmp_path, "r1").take()
    assert name == "x"
    assert isinstance(reply, Reply) and not reply.ok
    assert "could not be read" in reply.message


def test_no_such_run_and_a_run_not_running_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="No run nope"):
        post(tmp_path, "nope", Answer(answer="stop", by="cli"))
    _record(tmp_path, "dead", 2**22 + 12345)  # beyond pid_max here: no such process
    with pytest.raises(InputError, match="not running; resume it"):
        post(tmp_path, "dead", Answer(answer="stop", by="cli"))
    assert not inbox_dir(tmp_path, "dead").exists()


def test_an_untaken_request_is_withdrawn_so_it_never_acts_later(tmp_path: Path) -> None:
    _record(tmp_path, "r1", os.getpid())  # alive, but nobody reads its inbox
    with pytest.raises(InputError, match="did not take the request in time; nothing was changed"):
        post(tmp_path, "r1", Answer(answer="raise 5", by="cli"), timeout_s=0.2)
    assert InboxReader(tmp_path, "r1").take() == []


def test_a_live_flowd_run_answers_through_its_inbox(tmp_path: Path) -> None:
    scenario = Scenario.create(
        tmp_path, [story("a", ["a.txt"])], [coder("a", {"a.txt": "a\n"}, delayMs=60000)]
    )
    process = scenario.spawn("--run-id", "ep-live")
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            record = load_run_record(scenario.repo, "ep-live")
            if record is not None and is_active(record):
                break
            time.sleep(0.05)
        reply = post(scenario.repo, "ep-live", Answer(answer="raise 5", by="cli"))
        assert reply == Reply(ok=False, message="Run ep-live has nothing paused.")
    finally:
        kill_group(process)

"""The protocol is declared once (`flowd.protocol`): the server, `flowd schema protocol`, the
extension's generated `protocol.ts` and the Neovim plugin all follow that declaration."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from flowd import protocol
from flowd.control.shapes import status_wire
from flowd.events.model import (
    BudgetExceeded,
    Envelope,
    Event,
    ExecutorExcluded,
    ExecutorLeased,
    ExecutorReleased,
    ExecutorResumed,
    PerimeterPath,
    PerimeterViolation,
    PlannedTask,
    RunEnded,
    RunStarted,
    StoryStatusChanged,
    TaskCompleted,
    TasksPlanned,
    TaskStarted,
    TokensUsed,
    Usage,
)
from flowd.schema.json_schema import protocol_schema
from flowd.schema.typescript import render
from flowd.server.notify import Note, notes_for, snapshot
from flowd.trace.view import RunView

ROOT = Path(__file__).resolve().parents[2]
PROTOCOL_TS = ROOT / "editors" / "vscode" / "src" / "protocol.ts"
PROTOCOL_LUA = ROOT / "editors" / "nvim" / "lua" / "flowd" / "protocol.lua"
METHOD_NAME = re.compile(r"""["'](flow[/.][A-Za-z]+)["']""")

# What the extension imported from the hand-written protocol.ts before it was generated (the
# last three were added by the editor work on flow/attention and flow.answer).
EXTENSION_IMPORTS = (
    "Commands", "Requests", "Notifications", "RUN_OUTCOMES", "isRunActive", "RunParams", "LaneTask",
    "LaneParams", "TaskState", "TaskParams", "CloneState", "CloneParams", "CostParams", "RunTotals",
    "StatusRun", "StatusResult", "LaunchArgs", "LaunchResult", "CancelResult", "ValidateResult",
    "CostReportParams", "FlowServer", "AttentionParams", "ATTENTION", "ANSWER",
)  # fmt: skip


def test_the_committed_protocol_ts_is_what_the_declaration_renders() -> None:
    committed = PROTOCOL_TS.read_text(encoding="utf-8")
    assert committed == render(protocol_schema()), (
        "editors/vscode/src/protocol.ts has drifted from flowd.protocol: "
        "run `node editors/vscode/scripts/protocol.mjs` and commit the result"
    )


@pytest.mark.parametrize(
    ("module", "committed", "line"),
    [
        ("flowd.schema.typescript", PROTOCOL_TS, "  epicBranch: string;\n"),
        ("flowd.schema.lua", PROTOCOL_LUA, '    status = "flow/status",\n'),
    ],
)
def test_the_generator_check_fails_on_a_drifted_copy_and_leaves_it_alone(
    tmp_path: Path, module: str, committed: Path, line: str
) -> None:
    copy = tmp_path / committed.name
    drifted = committed.read_text(encoding="utf-8").replace(line, "", 1)
    assert drifted != committed.read_text(encoding="utf-8")
    copy.write_text(drifted, encoding="utf-8")
    argv = [sys.executable, "-m", module, "--check", str(copy)]
    checked = subprocess.run(argv, capture_output=True, text=True)
    assert checked.returncode == 1
    assert "differs from `flowd schema protocol`" in checked.stderr
    assert copy.read_text(encoding="utf-8") == drifted
    written = subprocess.run([*argv[:3], str(copy)], capture_output=True, text=True)
    assert written.returncode == 0, written.stderr
    assert copy.read_text(encoding="utf-8") == committed.read_text(encoding="utf-8")
    assert [p.name for p in tmp_path.iterdir()] == [committed.name]  # no temp file left behind


def test_the_generated_ts_exports_everything_the_extension_imported() -> None:
    text = PROTOCOL_TS.read_text(encoding="utf-8")
    exported = set(re.findall(r"^export (?:const|function|interface|type) (\w+)", text, re.M))
    assert set(EXTENSION_IMPORTS) <= exported, sorted(set(EXTENSION_IMPORTS) - exported)
    for method in protocol.METHODS:
        assert f'  {method.key}: "{method.name}",' in text


def test_flowd_schema_protocol_names_every_method_with_resolvable_shapes() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "flowd", "schema", "protocol"], capture_output=True, text=True, check=True
    )
    schema = json.loads(out.stdout)
    sections = {"command": "commands", "request": "requests", "notification": "notifications"}
    for method in protocol.METHODS:
        shapes = schema[sections[method.kind]][method.name]
        refs = [shapes["params"]["$ref"], *([shapes["result"]["$ref"]] if method.result_model else [])]
        for ref in refs:
            assert ref.removeprefix("#/$defs/") in schema["$defs"], ref
    assert schema["$defs"]["ResumeArgs"]["additionalProperties"] is False
    assert schema["runOutcomes"] == list(protocol.RUN_OUTCOMES)


def test_no_module_outside_the_declaration_spells_a_method_name() -> None:
    found = []
    for path in sorted((ROOT / "flowd").rglob("*.py")):
        if path.parent.name == "protocol" and path.parent.parent.name == "flowd":
            continue
        found += [f"{path.relative_to(ROOT)}: {m}" for m in METHOD_NAME.findall(path.read_text())]
    assert found == []


def test_the_neovim_plugin_uses_only_declared_names_and_handles_every_notification() -> None:
    lua = "\n".join(p.read_text() for p in sorted((ROOT / "editors" / "nvim").rglob("*.lua")))
    named = set(METHOD_NAME.findall(lua))
    assert named, "the pattern finds the plugin's method names"
    assert named <= set(protocol.BY_NAME), sorted(named - set(protocol.BY_NAME))
    for method in protocol.NOTIFICATIONS:  # by the generated names (tests/server/test_protocol_lua.py)
        assert f"handlers[N.{method.key}]" in lua


def _feed(view: RunView, events: list[Event]) -> list[Note]:
    notes: list[Note] = []
    for seq, event in enumerate(events, start=view.last_seq + 1):
        view.apply(Envelope(seq=seq, at="2026-01-01T00:00:00.000Z", run_id=view.run_id, event=event))
        notes += notes_for(view, event)
    return notes


def test_every_notification_sent_fits_its_declared_model_exactly() -> None:
    view = RunView(run_id="r")
    usage = Usage(input=10, output=5, total=15, cost_usd=0.01)
    notes = _feed(
        view,
        [
            RunStarted(
                epic_id="e", epic_branch="epic/e", plan="p", stories=["a"], concurrency=1, budget_usd=2.0
            ),
            StoryStatusChanged(story="a", status="active"),
            ExecutorLeased(executor="demo", clone=1, role="coder", label="a"),
            TasksPlanned(lane="a", tasks=[PlannedTask(title="one", satisfies=[1]), PlannedTask(title="two")]),
            TaskStarted(lane="a", index=1, count=2, title="one", satisfies=[1], executor="demo", clone=1),
            TokensUsed(lane="a", agent="coder", usage=usage),
            TaskCompleted(lane="a", index=1, count=2, title="one"),
            ExecutorExcluded(executor="other", reason="usage limit", until="2026-01-01T01:00:00.000Z"),
            ExecutorResumed(executor="other", reason="limit over"),
            PerimeterViolation(
                lane="a", paths=[PerimeterPath(path="x.txt", kind="outside")], action="restored"
            ),
            ExecutorReleased(executor="demo", clone=1, role="coder", label="a"),
            BudgetExceeded(scope="epic", limit_usd=2.0, spent_usd=2.5),
            RunEnded(outcome="done", done=1, failed=0, skipped=0),
        ],
    )
    notes += snapshot(view)
    sent = {note.method for note in notes}
    assert sent == {m.name for m in protocol.NOTIFICATIONS}
    for note in notes:
        model = protocol.BY_NAME[note.method].params()
        assert model.model_validate(note.params).model_dump(
            mode="json", by_alias=True, exclude_none=True
        ) == (note.params)
    # flow/status sends the same lanes and totals (with nulls where unknown): it fits StatusRun.
    from flowd.protocol.models import StatusRun

    status = StatusRun.model_validate(status_wire(view))
    assert [lane.lane for lane in status.lanes] == ["a"]
    assert status.totals is not None and status.totals.budget_usd == 2.0


def test_a_status_run_sends_null_only_for_its_nullable_fields() -> None:
    from flowd.control.shapes import status_wire

    view = RunView(run_id="r", epic_id="e")
    view.exclusions["x"] = {"reason": None, "until": None}
    wire = status_wire(view)
    assert list(wire) == [
        "runId", "epicId", "status", "startedAt", "endedAt", "plan", "epicBranch", "lanes", "totals",
        "clones", "exclusions",
    ]  # fmt: skip
    assert wire["startedAt"] is None and wire["endedAt"] is None
    assert wire["totals"] == {"tokens": 0, "estimatedTokens": 0, "unpricedTokens": 0, "requests": 0}
    assert wire["exclusions"] == [{"executor": "x", "reason": None, "until": None}]
    assert status_wire(view, "2026-01-01T00:00:00.000Z")["startedAt"] == "2026-01-01T00:00:00.000Z"


def test_the_declared_enums_are_the_words_the_server_uses() -> None:
    from typing import get_args

    from flowd.engine.core.pause import PAUSE_REASONS
    from flowd.events.model import StoryStatus
    from flowd.protocol.models import LaunchArgs
    from flowd.server.features.attention import REASON
    from flowd.trace.timeline import PHASES

    enums = protocol.ENUMS
    assert set(enums["laneStatuses"]) == {*get_args(StoryStatus), "queued", "merging"}
    assert set(enums["runStatuses"]) == {"running", "paused", "interrupted", *protocol.RUN_OUTCOMES}
    assert enums["pauseReasons"] == PAUSE_REASONS
    pause_on = LaunchArgs.model_fields["pause_on"].annotation
    assert set(get_args(get_args(get_args(pause_on)[0])[0])) == set(PAUSE_REASONS)
    assert enums["timelinePhases"] == PHASES
    informs = {"repaired", "escaped", "unconfined", "cleared"}  # flowd/server/notify.py, attention.py
    assert {*REASON.values(), "failed", *informs} == set(enums["attentionReasons"])
    assert set(enums["waitingReasons"]) <= set(enums["attentionReasons"]) - informs
    notify = (ROOT / "flowd" / "server" / "notify.py").read_text(encoding="utf-8")
    assert set(re.findall(r'reason="(\w+)"', notify)) <= set(enums["attentionReasons"])


def test_the_editors_take_the_enums_from_the_generated_modules() -> None:
    ts = (ROOT / "editors" / "vscode" / "src" / "attention.ts").read_text(encoding="utf-8")
    assert 'WAITING_REASONS as WAITING } from "./protocol"' in ts
    lua = ROOT / "editors" / "nvim" / "lua" / "flowd"
    assert "P.waiting_reasons" in (lua / "handlers.lua").read_text(encoding="utf-8")
    assert "G.PHASES = P.timeline_phases" in (lua / "graph.lua").read_text(encoding="utf-8")


def test_the_editors_status_sets_use_only_declared_words() -> None:
    """The Lua plugin's sets of lane and run statuses hold only words the protocol declares (the
    TypeScript sets are typed with them, so tsc checks those)."""
    lua = ROOT / "editors" / "nvim" / "lua" / "flowd"

    def keys(text: str, name: str) -> set[str]:
        found = re.search(rf"{re.escape(name)} = \{{([^}}]*)\}}", text)
        assert found is not None, name
        return set(re.findall(r"(\w+) = true", found.group(1)))

    revise = (lua / "revise.lua").read_text(encoding="utf-8")
    state = (lua / "state.lua").read_text(encoding="utf-8")
    lanes, runs = set(protocol.ENUMS["laneStatuses"]), set(protocol.ENUMS["runStatuses"])
    assert keys(revise, "local TAKES") <= lanes
    assert keys(revise, "local LIVE") <= runs
    assert keys(state, "S.ACTIVE") <= runs

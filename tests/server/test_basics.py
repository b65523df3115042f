"""The protocol surface on an empty repository: capabilities, errors, status, cost, validation."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from pygls.exceptions import JsonRpcException

from tests.server.conftest import CONFIG, FlowClient, command, git, initialize, request, stop_client


async def test_commands_are_advertised(client: FlowClient) -> None:
    capabilities = client.init_result.capabilities  # type: ignore[attr-defined]
    assert capabilities.execute_command_provider is not None
    assert set(capabilities.execute_command_provider.commands) == {
        "flow.launchEpic",
        "flow.cancelEpic",
        "flow.resumeEpic",
        "flow.validatePlan",
        "flow.answer",
        "flow.addRevision",
    }
    assert client.init_result.server_info.name == "flowd"  # type: ignore[attr-defined]
    result = await request(client, "flow/status", {})
    assert result.runs == []


async def test_bad_params_answer_32602_and_the_server_keeps_serving(client: FlowClient) -> None:
    for method, params in [
        ("flow/costReport", {"format": "pdf"}),
        ("flow/costReport", {"runID": "x"}),
        ("flow/status", [1, 2]),
        ("flow/perimeter", {"uri": 3}),
    ]:
        with pytest.raises(JsonRpcException) as caught:
            await request(client, method, params)
        assert caught.value.code == -32602, (method, caught.value)
        assert method in caught.value.message
    with pytest.raises(JsonRpcException) as caught:
        await command(client, "flow.cancelEpic", {"run": "x"})
    assert caught.value.code == -32602
    assert "runId" in caught.value.message
    with pytest.raises(JsonRpcException) as caught:
        await command(client, "flow.resumeEpic", {"runId": "a", "plan": "b"})
    assert caught.value.code == -32602
    assert "exactly one" in caught.value.message
    # Still serving.
    assert (await request(client, "flow/status", {})).runs == []


async def test_unknown_method_answers_32601(client: FlowClient) -> None:
    with pytest.raises(JsonRpcException) as caught:
        await request(client, "flow/nope", {})
    assert caught.value.code == -32601
    assert (await request(client, "flow/status", {})).runs == []


async def test_cost_report_on_an_empty_repo(client: FlowClient) -> None:
    report = await request(client, "flow/costReport", {})
    assert report.schemaVersion == 1
    assert report.runs == 0
    text = await request(client, "flow/costReport", {"format": "markdown"})
    assert isinstance(text.text, str) and text.text
    plain = await request(client, "flow/costReport", {"format": "text"})
    assert isinstance(plain.text, str) and plain.text


async def test_a_plan_anywhere_on_disk_is_validated(client: FlowClient, repo: Path, tmp_path: Path) -> None:
    outside = tmp_path / "x.epic.json"
    outside.write_text('{"epicId": "x", "epic": "x", "stories": [{"id": "a", "title": "A", "owned": ["a"]}]}')
    for plan in ("../x.epic.json", str(outside), outside.as_uri()):
        result = await command(client, "flow.validatePlan", {"plan": plan})
        assert result == {"violations": []}, plan
    outside.unlink()  # a plan that vanished: one sentence naming it, the server keeps serving
    with pytest.raises(JsonRpcException) as caught:
        await command(client, "flow.validatePlan", {"plan": str(outside)})
    assert caught.value.code == -32602
    assert caught.value.message == (
        f"flow.validatePlan: plan: no such plan file {outside}; check the path (it may have moved)"
    )
    assert (await request(client, "flow/status", {})).runs == []


async def test_empty_params_may_be_an_object_a_list_or_missing(client: FlowClient) -> None:
    # Neovim encodes an empty Lua table as [].
    for params in ({}, [], None):
        assert (await request(client, "flow/status", params)).runs == []
        assert (await request(client, "flow/perimeter", params)).violations == []
        assert (await request(client, "flow/costReport", params)).runs == 0
    with pytest.raises(JsonRpcException) as caught:
        await command(client, "flow.cancelEpic", [])
    assert caught.value.code == -32602 and "runId" in caught.value.message
    with pytest.raises(JsonRpcException) as caught:
        await command(client, "flow.launchEpic")
    assert caught.value.code == -32602 and "plan" in caught.value.message


async def test_a_worktree_of_the_repository_is_served_by_its_main_checkout(
    repo: Path, tmp_path: Path
) -> None:
    worktree = tmp_path / "elsewhere" / "story"
    git(repo, "worktree", "add", "-q", "-b", "story/x", str(worktree))
    client = await CONFIG.start()
    assert isinstance(client, FlowClient)
    try:
        await initialize(client, worktree, "neovim")
        # Paths are the main checkout's; a file of the worktree is at the same repository path.
        for where in (repo, worktree):
            answer = await request(client, "flow/perimeter", {"uri": (where / "README.md").as_uri()})
            assert answer.path == "README.md"
        with pytest.raises(JsonRpcException) as caught:
            await request(client, "flow/perimeter", {"uri": (tmp_path / "README.md").as_uri()})
        assert (
            caught.value.message
            == f"flow/perimeter: uri: {tmp_path / 'README.md'} is not inside the repository"
        )
        await asyncio.wait_for(client.shutdown_session(), 10)
    finally:
        await stop_client(client)

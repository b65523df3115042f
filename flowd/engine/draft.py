"""`flowd plan new "EPIC TEXT" -o PLAN [--brief FILE] [--force]`: the planner drafts a story plan.

The planner role (leased from the roster) proposes a plan following the planning rules of
`prompts.EPIC_DRAFT`; flowd sets `epicId` and `epic` itself, drops `readFirst` anchors that name
no tracked file, and checks the proposal against every plan rule plus the drafting rule that each
story states its acceptance criteria. An invalid proposal is asked again once with its violations.
The result is written for the user to edit and approve (JSON, or Markdown with a `json storyplan`
block) and is never run from here.

The planner works in a throwaway detached checkout of HEAD, so an agent that writes files cannot
touch the user's checkout. Nothing is traced: no run is started and no secret is recorded.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from flowd.agents.base import AgentError, FlowdMeta, TurnRequest
from flowd.base.errors import EXIT_OK, FlowdError, InputError, NoExecutor
from flowd.base.fsio import write_text_atomic
from flowd.base.wire import describe_validation_error
from flowd.engine import prompts
from flowd.engine.replies import ReplyParseError, extract_json
from flowd.events.model import Event, ExecutorExcluded
from flowd.plan.graph import waves
from flowd.plan.hashing import stable_hash
from flowd.plan.markdown import render_plan_markdown
from flowd.plan.model import StoryPlan
from flowd.plan.perimeter import prune_read_first
from flowd.plan.validate import violations
from flowd.roster.pool import RosterPool
from flowd.store.config import Roster, Settings, load_roster, load_settings
from flowd.vcs.gitops import Repo

FILES_SHOWN = 300
OUTPUT_SUFFIXES = (".json", ".md", ".markdown")


# -- the pure core ---------------------------------------------------------------------------------
def epic_id_for(text: str) -> str:
    """`<first four kebab words>-<6 hex of the text's stable hash>` (`epic-…` when there are no words)."""
    words = re.findall(r"[a-z0-9]+", text.lower())[:4]
    return f"{'-'.join(words) or 'epic'}-{stable_hash(text)[:6]}"


def brief_title(brief: str) -> str:
    """The brief's first heading, else its first non-blank line."""
    lines = [line.strip() for line in brief.splitlines() if line.strip()]
    heading = next((line.lstrip("#").strip() for line in lines if line.startswith("#")), None)
    return heading or (lines[0] if lines else "")


def draft_prompt(epic: str, brief: str | None, epic_id: str, files: list[str]) -> str:
    request = prompts.EPIC_DRAFT_BRIEF.format(epic=epic, brief=brief.strip()) if brief else f"Epic: {epic}"
    shown = files[:FILES_SHOWN]
    return prompts.EPIC_DRAFT.format(
        request=request,
        shown=len(shown),
        total=len(files),
        files="\n".join(shown) or "(no tracked files)",
        epic_id=epic_id,
    )


@dataclass
class Proposal:
    plan: StoryPlan | None
    problems: list[str]
    dropped: list[tuple[str, str]]


def check_proposal(reply: str, epic_id: str, epic: str, tracked: list[str]) -> Proposal:
    """The planner's reply as a plan with flowd's epic id and text, readFirst pruned, and what is wrong."""
    try:
        data = extract_json(reply)
    except ReplyParseError as exc:
        return Proposal(None, [exc.message], [])
    if not isinstance(data, dict):
        return Proposal(None, ["the reply is not a JSON object with epicId, epic and stories"], [])
    data = {**data, "epicId": epic_id, "epic": epic}
    try:
        plan = StoryPlan.model_validate(data)
    except ValidationError as exc:
        return Proposal(None, describe_validation_error(exc), [])
    plan, dropped = prune_read_first(plan, tracked)
    problems = [v.message for v in violations(plan)]
    if not plan.stories:
        problems.append("the plan has no stories: split the epic into at least one story")
    problems += [
        f"story '{s.id}' has no acceptance criteria: give 2-6 observable 'done when' outcomes"
        for s in plan.stories
        if not s.acceptance
    ]
    return Proposal(plan, problems, dropped)


def render(plan: StoryPlan, output: Path) -> str:
    if output.suffix.lower() == ".json":
        return json.dumps(plan.model_dump(mode="json", by_alias=True), indent=2, ensure_ascii=False) + "\n"
    return render_plan_markdown(plan)


# -- the edges -------------------------------------------------------------------------------------
def _log(event: Event) -> None:
    if isinstance(event, ExecutorExcluded):
        print(f"flowd: executor {event.executor} excluded: {event.reason}", file=sys.stderr)


class Drafter:
    def __init__(self, repo: Repo, roster: Roster, settings: Settings, epic_id: str) -> None:
        self.repo = repo
        self.settings = settings
        self.epic_id = epic_id
        self.run_id = f"draft-{epic_id}-{time.strftime('%Y%m%dT%H%M%S')}"
        self.pool = RosterPool(roster, state_path=repo.root / ".flow" / "roster-state.json", emit=_log)

    async def ask(self, prompt: str, cwd: Path) -> str:
        request = TurnRequest(
            role="planner",
            prompt=prompt,
            cwd=cwd,
            meta=FlowdMeta(role="planner", run_id=self.run_id, epic_id=self.epic_id),
            turn_timeout_s=self.settings.turn_timeout_s,
            stall_timeout_s=self.settings.stall_timeout_s,
        )
        try:
            result, _ = await self.pool.run("planner", request, label="plan new")
        except AgentError as error:
            raise InputError(f"the planner failed: {error}") from error
        except NoExecutor as error:
            raise InputError(str(error)) from error
        return result.text

    async def draft(self, epic: str, brief: str | None, tracked: list[str], cwd: Path) -> Proposal:
        try:
            prompt = draft_prompt(epic, brief, self.epic_id, tracked)
            proposal = check_proposal(await self.ask(prompt, cwd), self.epic_id, epic, tracked)
            if proposal.problems:
                listing = "\n".join(f"- {p}" for p in proposal.problems)
                retry = f"{prompt}\n\n{prompts.EPIC_DRAFT_RETRY.format(violations=listing)}"
                proposal = check_proposal(await self.ask(retry, cwd), self.epic_id, epic, tracked)
            return proposal
        finally:
            await self.pool.aclose()


def _read_brief(path: str | None) -> str | None:
    if path is None:
        return None
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise InputError(f"--brief {path}: no such file; check the path")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"--brief {path}: cannot be read as UTF-8 text ({exc})")
    if not text.strip():
        raise InputError(f"--brief {path}: the brief is empty; write the epic's design in it")
    return text


def new_command(args: argparse.Namespace) -> int:
    cwd = Path.cwd()
    output = Path(args.output) if Path(args.output).is_absolute() else cwd / args.output
    if output.suffix.lower() not in OUTPUT_SUFFIXES:
        raise InputError(f"-o {args.output}: the plan file must end in .json or .md")
    if output.exists() and not args.force:
        raise InputError(f"{args.output} already exists; edit it, or pass --force to draft over it")
    brief = _read_brief(args.brief)
    text = (args.text or "").strip() or (brief_title(brief) if brief else "")
    if not text:
        raise InputError('give the epic as text (flowd plan new "EPIC TEXT" -o PLAN) or a --brief FILE')
    repo = Repo.discover(cwd)
    settings = load_settings(repo.root)
    roster = load_roster(repo.root)
    if not roster.for_role("planner"):
        raise InputError(
            f"no executor in the roster takes the planner role ({roster.described}); "
            'add one with roles = ["planner"]'
        )
    tracked = repo.tracked_files()
    epic_id = epic_id_for(text)
    with tempfile.TemporaryDirectory(prefix="flowd-plan-new-") as tmp:
        checkout = Path(tmp) / "checkout"
        repo.worktree_add_detached(checkout)
        try:
            proposal = asyncio.run(
                Drafter(repo, roster, settings, epic_id).draft(text, brief, tracked, checkout)
            )
        finally:
            with contextlib.suppress(FlowdError):
                repo.worktree_remove(checkout, force=True)
                repo.worktree_prune()
    if proposal.problems or proposal.plan is None:
        raise InputError(
            "the planner's plan is still invalid after one repair, so nothing was written: "
            + "; ".join(proposal.problems)
        )
    plan = proposal.plan
    if output.exists() and not args.force:
        raise InputError(f"{args.output} appeared while drafting; pass --force to draft over it")
    try:
        write_text_atomic(output, render(plan, output))
    except OSError as exc:
        raise InputError(f"{args.output}: could not write the plan ({exc.strerror or exc})") from exc
    for story_id, anchor in proposal.dropped:
        print(
            f"flowd: dropped readFirst {anchor!r} of story '{story_id}': no such tracked file",
            file=sys.stderr,
        )
    n, w = len(plan.stories), len(waves(plan))
    print(
        f"{args.output}: drafted {n} {'story' if n == 1 else 'stories'} in {w} {'wave' if w == 1 else 'waves'}"
        f" (epic {plan.epic_id}); review and edit it, then `flowd run {args.output}`"
    )
    return EXIT_OK

"""Every prompt flowd sends, as plain templates (documented in docs/prompts.md).

Templates use `str.format` fields; `story_rules`, `planner_prompt` and `replan_prompt` fill them from the plan,
so the wording lives here and nowhere else.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from flowd.plan.graph import dependencies_of, dependents_of
from flowd.plan.model import Story, StoryPlan
from flowd.plan.perimeter import StrayTask, owner_of_path

PERIMETER_RULES = """You implement ONE story of the epic "{epic}": {title} ({story_id}).

{description}

Paths you own (create and change files ONLY here):
{owned}
Shared paths (read them, never modify them):
{shared}
What this story must provide for others:
{provides}
{acceptance}
Where you are: your working directory is {worktree}. Run every command there; never cd into,
read or write any other checkout.
Other stories of the epic:
{others}

Rules:
- Changing anything outside your owned paths fails the story; flowd puts such changes back.
- flowd runs the project's gates after each task and hands failures back to you: run at most the
  one relevant test file yourself.
- If something you need does not exist and another story owns it, end your reply with exactly
  `BLOCKED_ON: <what, and which path>` and stop. This is ONLY for work another story owns:
  tooling, dependencies and reference checkouts are never a reason.
- Everything you provide must be complete: no stubs, no TODOs left for later.
- Do not commit; flowd commits after each task."""

PLANNER_TASKS = """Plan ONE story as a short list of small, independently verifiable tasks, each described
by its observable outcome. Stay inside the story's owned paths:
{owned}
{criteria}End every task description with `Depends on: <task numbers>` (or `Depends on: none` when
it can run beside the task before it) and `Owns: <paths>` (the files it changes).
Never plan work in another story's paths.

Answer ONLY with JSON of this shape:
{{"tasks": [{{"title": "...", "description": "..."}}]}}

Request:
Story: {title}

{description}{done_when}"""

REPLAN_TASKS = """{first}

Your previous task list named paths outside this story's owned paths:
{strays}
Plan again, with every task inside the owned paths listed above. Work in another story's paths is
that story's job: leave it out of this plan. Answer with the whole new task list, as JSON only."""

CODER_TASK = """{rules}

The story's task plan (you do task {index} of {count}; completed tasks are already in your working tree):
{plan}

Your task now: {title}

{description}"""

FIX_FEEDBACK = """Your change for task "{title}" is not ready yet. Fix these, inside your owned paths:

{feedback}"""

PERIMETER_FEEDBACK = """You changed paths outside this story's perimeter:
{paths}
Put each of them back exactly as it is on the epic branch (restore a changed file, delete a
created one) and move the story's work into your owned paths."""

NESTED_REPO_FEEDBACK = """These folders are git repositories of their own inside the worktree (a `.git` in them,
from `git init`, a clone or a project generator):
{paths}
Their files cannot be committed with the story: git would record a link to a commit no one has.
If their files belong to the story, remove each folder's `.git` (`rm -rf <folder>/.git`);
if they do not, delete the folder."""

CONFIRM_EMPTY = """Task "{title}" changed no file. If the task is already satisfied by the code as it
stands, reply with exactly `TASK_ALREADY_SATISFIED` on the last line. Otherwise implement it now."""

REVIEWER = """Review the change below for the task "{title}" of the story "{story_title}" ({story_id}).
Judge correctness, completeness against the task, and that it stays inside the owned paths:
{owned}

Answer ONLY with JSON: {{"issues": [{{"severity": "critical|major|minor", "title": "...",
"description": "..."}}], "summary": "..."}}. Critical and major issues block the task.

Task description:
{description}

The change (a unified diff against the story's start):
{diff}"""

JUDGE = """Judge whether the story "{story_title}" ({story_id}) is done.
Acceptance criteria (each must hold, observably):
{acceptance}
It must provide: {provides}

Answer ONLY with JSON: {{"issues": [{{"severity": "critical|major|minor", "title": "...",
"description": "..."}}], "summary": "..."}}. Critical and major issues mean it is not done.

{subject_kind}:
{subject}"""

REVISION_LEAD = "The story was judged short of done (judge round {round})."
EMPTY_REVISION_LEAD = (
    "The story has no changes yet, and what it must provide is not all in place on the epic branch."
)
REVISION_BODY = """{lead}
Close these gaps without weakening any test and without leaving your owned paths:
{issues}"""

TASK_OWNS_NOTE = """
This task owns only: {owns}. Another task of this story may be changing other files right now,
so change nothing else."""

LANE_PORTS_NOTE = """
Ports: this lane has ports {ports} to itself (FLOWD_PORT={port}; FLOWD_PORTS and FLOWD_LANE are
set for flowd's setup commands and gates). Any server you start binds a port of that range, never
a fixed port another lane may be using."""

TASK_OWNS_FEEDBACK = """[critical] task owns: you changed paths outside the paths this task owns ({owns}):
{paths}
Put each of them back as it was (restore a changed file, delete a created one) and keep this
task's change inside its own paths."""

STORY_GATES_LEAD = (
    "The story's parallel tasks were merged together and its gates went red; the failures come "
    "from the combination:\n{red}"
)

MERGE_REVISION_LEAD = (
    "The story was merged, the epic gates went red, and the merge was undone (merge revision "
    "{round} of {limit}). Your branch now includes everything merged into the epic since you "
    "started; the failures come from the combination, so fix them on your side:\n{red}"
)
APPROVAL_REVISION_LEAD = (
    "The story was ready to merge, and the person reviewing its change before the merge asked for "
    "changes first. Their words:"
)
ANSWERED = """

You stopped earlier with `BLOCKED_ON`, and the person running flowd answered:
{answers}
Use that and carry on with the task."""

REBUTTAL = """You stopped with `BLOCKED_ON: {need}`. That was checked against the epic's plan and rejected:
{rebuttal}
Continue the task inside your owned paths."""

REPLY_RETRY = """Your previous reply could not be used: {error}
Answer again, exactly in the requested format."""

EPIC_DRAFT = """Split this epic into stories for a team of coding agents working in parallel.

{request}

Rules:
- Each story fits ONE agent session and owns a set of paths (files or folders); owned sets of
  different stories never overlap, and every story owns its own tests.
- Shared surfaces are never edited by a feature story: a new shared component or contract is its
  own story that others depend on. One story owns the composition point and depends on the parts.
- `readFirst` names 1-4 files that exist in the repository (exemplars, contracts to extend).
- `acceptance` lists 2-6 observable "done when" outcomes.
- ids are kebab-case; `dependsOn` names ids of this plan and forms no cycle.

Files in the repository (first {shown} of {total}):
{files}

Answer ONLY with JSON: {{"epicId": "{epic_id}", "epic": "...", "stories": [{{"id": "...", "title": "...",
"description": "...", "owned": ["..."], "sharedReadOnly": [], "dependsOn": [], "provides": [],
"readFirst": [], "acceptance": ["..."], "testsChange": false}}]}}"""

EPIC_DRAFT_BRIEF = """Epic: {epic}

The epic's brief (the user's design; plan exactly what it asks for):
{brief}"""

EPIC_DRAFT_RETRY = """Your proposed plan is invalid:
{violations}
Answer again with the whole corrected plan, as JSON only."""


def _bullets(items: list[str], empty: str = "(none)") -> str:
    return "\n".join(f"- {item}" for item in items) if items else f"- {empty}"


def story_rules(plan: StoryPlan, story: Story, worktree: Path) -> str:
    deps = set(dependencies_of(plan, story.id))
    later = set(dependents_of(plan, story.id))
    others: list[str] = []
    for other in plan.stories:
        if other.id == story.id:
            continue
        if other.id in deps:
            relation = "merged into the epic before you started: read it"
        elif other.id in later:
            relation = "built AFTER you: leave it alone"
        else:
            relation = "built at the same time by another coder: leave it alone"
        others.append(f"{other.id} owns {', '.join(other.owned)} ({relation})")
    acceptance = ""
    if story.acceptance:
        acceptance = "Done when (each must hold, observably):\n" + "\n".join(
            f"{n}. {item}" for n, item in enumerate(story.acceptance, start=1)
        )
    return PERIMETER_RULES.format(
        epic=plan.epic,
        title=story.title,
        story_id=story.id,
        description=story.description.strip(),
        owned=_bullets(story.owned),
        shared=_bullets(story.shared_read_only),
        provides=_bullets(story.provides),
        acceptance=acceptance,
        worktree=worktree,
        others=_bullets(others),
    )


def planner_prompt(story: Story) -> str:
    criteria = ""
    done_when = ""
    if story.acceptance:
        numbered = "\n".join(f"{n}. {item}" for n, item in enumerate(story.acceptance, start=1))
        criteria = (
            "The story's acceptance criteria are numbered below; end every task description with "
            "`Satisfies: <numbers>` and cover every criterion.\n"
        )
        done_when = "\n\nDone when (each must hold, observably):\n" + numbered
    return PLANNER_TASKS.format(
        owned=_bullets(story.owned),
        criteria=criteria,
        title=story.title,
        description=story.description.strip(),
        done_when=done_when,
    )


def replan_prompt(plan: StoryPlan, story: Story, strays: Sequence[StrayTask]) -> str:
    """`REPLAN_TASKS`: the first planner prompt, then one line per stray task of the first plan."""
    lines = []
    for stray in strays:
        named = ", ".join(f"{p} ({_whose(plan, story.id, p)})" for p in stray.paths)
        lines.append(f'- task {stray.index} "{stray.title}" names {named}')
    return REPLAN_TASKS.format(first=planner_prompt(story), strays="\n".join(lines))


def _whose(plan: StoryPlan, story_id: str, path: str) -> str:
    owner = owner_of_path(plan, path)
    return f"story {owner} owns it" if owner is not None and owner != story_id else "no story owns it"


def lane_ports_note(env: dict[str, str]) -> str:
    """`LANE_PORTS_NOTE` for a lane's `FLOWD_*` variables (empty when the lane holds no ports)."""
    if "FLOWD_PORT" not in env:
        return ""
    return LANE_PORTS_NOTE.format(ports=env["FLOWD_PORTS"], port=env["FLOWD_PORT"])

"""Terminal rendering of the fold: the live progress of `flowd run`/`flowd demo` and `flowd status`.

Both draw the same RunView the language server folds, so every view shows the same thing. On a
terminal that is a live rich table; anywhere else (a pipe, a CI log) it is `plain_lines`: one
line per state change, no cursor movement and no wrapping (docs/running.md).
"""

from __future__ import annotations

from rich.console import Group
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from flowd.base.timeutil import parse_iso
from flowd.engine.core.bigrepo import SAID_PREFIX
from flowd.events.model import (
    BudgetExceeded,
    Envelope,
    ExecutorExcluded,
    ExecutorResumed,
    GateFlaky,
    GateResult,
    Info,
    LaneEscape,
    LanePlaced,
    MergeBatchResult,
    MergeBatchStarted,
    MergeBisect,
    MergeRevision,
    MergeRolledBack,
    PerimeterViolation,
    RunEnded,
    RunStarted,
    StoryAnswered,
    StoryMerged,
    StoryPaused,
    StoryStatusChanged,
    TaskCompleted,
    TaskStarted,
)
from flowd.trace.view import LaneView, RunView

STATUS_STYLE = {
    "planned": "dim",
    "active": "cyan",
    "queued": "blue",  # the merge train's (docs/merging.md)
    "merging": "magenta",
    "waiting": "yellow",
    "ready": "magenta",  # done, waiting for approval to merge (docs/answers.md)
    "done": "green",
    "failed": "red",
    "skipped": "dim",
}


def plural(count: int, word: str) -> str:
    return f"{count:,} {word}" if count == 1 else f"{count:,} {word}s"


def money(value: float | None, estimated: bool = False) -> str:
    if value is None:
        return "—"
    return f"{'~' if estimated else ''}${value:,.2f}"


def lane_row(view: RunView, lane: LaneView) -> list[Text | str]:
    task = lane.task
    where = f"{task.index}/{lane.count} {task.title}" if task else (lane.reason or "")
    executor = (
        f"{lane.executor}#{lane.clone}" if lane.executor and lane.clone is not None else (lane.executor or "")
    )
    if lane.node:  # a lane placed on a cluster node (docs/scale-out.md)
        executor = f"{executor} @ {lane.node}" if executor else f"@ {lane.node}"
    status = f"{lane.status} #{lane.batch}" if lane.batch is not None else lane.status
    return [
        Text(lane.lane, style="bold"),
        Text(status, style=STATUS_STYLE.get(lane.status, "")),
        executor,
        lane.ports
        or (str(lane.port) if lane.port is not None else ""),  # FLOWD_PORTS (docs/worktree-bootstrap.md)
        Text(where, no_wrap=True, overflow="ellipsis"),
        f"{lane.tokens:,}" if lane.tokens else "",
        money(lane.cost_usd, lane.estimated) if lane.cost_usd is not None else "",
    ]


def render_run(view: RunView) -> Group:
    table = Table(box=None, pad_edge=False, show_edge=False, expand=False)
    rows = [lane_row(view, lane) for lane in view.lanes.values()]
    headers = ("lane", "status", "clone", "ports", "task", "tokens", "cost")
    for number, header in enumerate(headers):
        if header == "task":
            # In a narrow terminal only the task text gives way (its cells end in "…").
            table.add_column(header, no_wrap=False, min_width=8)
            continue
        widest = max([len(header), *(len(str(row[number])) for row in rows)])
        table.add_column(
            header,
            no_wrap=True,
            min_width=widest,
            justify="right" if header in ("tokens", "cost") else "left",
        )
    for row in rows:
        table.add_row(*row)
    finished = view.count("done") + view.count("failed") + view.count("skipped")
    bar = Table.grid(padding=(0, 1))  # a grid row ends its line; a bare ProgressBar does not
    bar.add_row(
        ProgressBar(total=max(1, view.total), completed=finished, width=40), f"{finished}/{view.total}"
    )
    title = Text.assemble(
        (f"Epic {view.epic_id} ", "bold"),
        (f"[{view.shown_status}] ", STATUS_STYLE.get(view.shown_status, "cyan")),
        _summary(view),
    )
    parts: list[Text | Table] = [title, bar, table]
    parts += [Text(line, style=style) for line, style in _footer(view)]
    return Group(*parts)


def _summary(view: RunView) -> str:
    totals = view.totals
    extra = []
    if totals.estimated_tokens:
        extra.append(f"{totals.estimated_tokens:,} estimated")
    if totals.unpriced_tokens:
        extra.append(f"{totals.unpriced_tokens:,} unpriced")
    budget = f" of {money(view.budget_usd)}" if view.budget_usd is not None else ""
    return (
        f"{view.count('done')}/{view.total} stories · {plural(view.active_lanes, 'lane')} · "
        f"{totals.tokens:,} tokens · {money(totals.cost_usd)}{budget}"
        + (f" ({', '.join(extra)})" if extra else "")
    )


def _footer(view: RunView) -> list[tuple[str, str]]:
    lines = []
    held = [c for c in view.clones.values() if c.held]
    if held:
        names = ", ".join(f"{c.name} {c.role}" + (f" ({c.label})" if c.label else "") for c in held)
        lines.append((f"clones held: {names}", "dim"))
    train = _train_line(view)
    if train:
        lines.append((train, "magenta"))
    for executor, exclusion in view.exclusions.items():
        until = f" until {exclusion['until']}" if exclusion.get("until") else ""
        lines.append((f"{executor} excluded{until}: {exclusion['reason']}", "yellow"))
    return lines


def plain_run(view: RunView) -> list[str]:
    """`render_run` as plain lines for a pipe: aligned columns, no colour, never wrapped."""
    rows = [
        [cell.plain if isinstance(cell, Text) else cell for cell in lane_row(view, lane)]
        for lane in view.lanes.values()
    ]
    headers = ["lane", "status", "clone", "ports", "task", "tokens", "cost"]
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]

    def line(cells: list[str]) -> str:
        out = [
            c.rjust(w) if i >= 5 else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(out).rstrip()

    title = f"Epic {view.epic_id} [{view.shown_status}] {_summary(view)}"
    return [title, line(headers), *(line(r) for r in rows), *(text for text, _ in _footer(view))]


# -- plain lines (not a terminal) --------------------------------------------------------------------
def _train_line(view: RunView) -> str:
    """The merge train at a glance (docs/merging.md): who waits, who is being gated, in which batch."""
    queued = [lane.lane for lane in view.lanes.values() if lane.status == "queued"]
    merging: dict[int, list[str]] = {}
    for lane in view.lanes.values():
        if lane.status == "merging" and lane.batch is not None:
            merging.setdefault(lane.batch, []).append(lane.lane)
    if not queued and not merging:
        return ""
    parts = [f"batch {b}: {', '.join(lanes)}" for b, lanes in sorted(merging.items())]
    if queued:
        parts.append(f"queued: {', '.join(queued)}")
    return "merge train — " + "; ".join(parts)


def _one_line(text: str | None) -> str:
    return " ".join((text or "").split())


def _figures(tokens: int, cost: float | None, estimated: bool = False) -> str:
    if not tokens:
        return ""
    return f" · {'~' if estimated else ''}{tokens:,} tokens" + (
        f" · {money(cost)}" if cost is not None else ""
    )


def _lane_line(view: RunView, event: object) -> str | None:
    if isinstance(event, StoryStatusChanged):
        lane = view.lanes.get(event.story)
        figures = _figures(lane.tokens, lane.cost_usd, lane.estimated) if lane else ""
        reason = f" ({_one_line(event.reason)})" if event.reason else ""
        return f"{event.story}: {event.status}{reason}{figures if event.status in ('done', 'failed') else ''}"
    if isinstance(event, TaskStarted):
        who = (
            f"{event.executor}#{event.clone}"
            if event.executor and event.clone is not None
            else event.executor
        )
        return (
            f"{event.lane}: task {event.index}/{event.count} started: {_one_line(event.title)}"
            + (f" ({who})" if who else "")
            + (" [parallel]" if event.parallel else "")
        )
    if isinstance(event, LanePlaced):
        return f"{event.lane}: placed on {event.node} ({event.engine})"
    if isinstance(event, TaskCompleted):
        return f"{event.lane}: task {event.index}/{event.count} completed: {_one_line(event.title)}"
    if isinstance(event, StoryMerged):
        return f"{event.lane}: merged into {view.epic_branch or 'the epic'} at {event.commit[:10]}"
    if isinstance(event, MergeRolledBack):
        return f"{event.lane}: merge rolled back: {_one_line(event.reason)}"
    if isinstance(event, GateResult) and (not event.ok or event.where == "epic"):
        where = event.lane if event.where == "task" and event.lane else f"{event.where} gate"
        verdict = "passed" if event.ok else f"failed (exit {event.exit_code})"
        return f"{where}: `{event.gate}` {verdict} in {event.duration_ms / 1000:.1f}s"
    if isinstance(event, GateFlaky):
        where = event.lane if event.where == "task" and event.lane else f"{event.where} gate"
        runs = f"{event.attempts} red run{'s' if event.attempts != 1 else ''}"
        return f"{where}: `{event.gate}` flaky: green on a rerun after {runs} (not charged)"
    if isinstance(event, MergeRevision):
        return f"{event.lane}: epic gates red after merging; merge revision {event.round}: `{event.gate}`"
    if isinstance(event, LaneEscape):
        return f"{event.lane}: wrote past its lane, {event.action}: {event.path} ({event.what})"
    if isinstance(event, PerimeterViolation):
        paths = ", ".join(f"{p.path} ({p.kind})" for p in event.paths)
        return f"{event.lane}: perimeter violation, {event.action}: {paths}"
    return _train_event_line(event)


def _train_event_line(event: object) -> str | None:
    """The merge train's events as plain lines (docs/merging.md)."""
    if isinstance(event, MergeBatchStarted):
        return f"merge train: batch {event.batch} gating {', '.join(event.lanes)} on {event.base[:10]}"
    if isinstance(event, MergeBatchResult):
        verdict = "green" if event.ok else "red"
        return f"merge train: batch {event.batch} {verdict} in {event.duration_ms / 1000:.1f}s"
    if isinstance(event, MergeBisect):
        if event.culprit is not None:
            return f"merge train: batch {event.batch} bisected: {event.culprit} is red alone"
        return f"merge train: batch {event.batch} bisecting: gating {', '.join(event.lanes)}"
    return None


def _run_line(view: RunView, event: object) -> str | None:
    if isinstance(event, RunStarted):
        budget = f", budget {money(event.budget_usd)}" if event.budget_usd is not None else ""
        count = len(event.stories)
        return (
            f"epic {event.epic_id}: {count} {'story' if count == 1 else 'stories'}, "
            f"concurrency {event.concurrency}{budget}, on {event.epic_branch}"
        )
    if isinstance(event, RunEnded):
        totals = view.totals
        cost = f" · {money(totals.cost_usd)}" if totals.cost_usd is not None else ""
        reason = f" ({_one_line(event.reason)})" if event.reason else ""
        return (
            f"epic {view.epic_id} {event.outcome}{reason}: {event.done} done, {event.failed} failed, "
            f"{event.skipped} not finished · {totals.tokens:,} tokens{cost}"
        )
    if isinstance(event, BudgetExceeded):
        where = f"story {event.lane}" if event.scope == "story" and event.lane else "epic"
        return f"{where} budget of {money(event.limit_usd)} spent ({money(event.spent_usd)})"
    if isinstance(event, ExecutorExcluded):
        until = f" until {event.until}" if event.until else ""
        return f"{event.executor} excluded{until}: {_one_line(event.reason)}"
    if isinstance(event, ExecutorResumed):
        return f"{event.executor} resumed: {_one_line(event.reason)}"
    return said_at_start(event)


def said_at_start(event: object) -> str | None:
    """The run's one sentence on what it chose for a big repository (docs/repositories.md "Big
    repositories"), if `event` is it: printed among its first lines, live or plain."""
    if isinstance(event, Info) and event.lane is None and event.message.startswith(SAID_PREFIX):
        return event.message
    return None


def _pause_line(view: RunView, event: object) -> str | None:
    """A pause asks a person here, with the command that answers it (docs/answers.md)."""
    if isinstance(event, StoryPaused):
        story = f" --story {event.lane}" if event.lane else ""
        # What the coder needs, or the changes it should make, in words.
        free = {"blocked": ["text"], "merge": ["changes"]}.get(event.reason, [])
        words = [*free, *event.options] if event.reason == "blocked" else [*event.options, *free]
        answer = f"flowd answer {view.run_id}{story} <{' | '.join(words)}>"
        return (
            f"{event.lane or 'run'}: paused ({event.reason}): {_one_line(event.question)} — answer: {answer}"
        )
    if isinstance(event, StoryAnswered):
        then = f" → {event.effect}" if event.effect in ("approve", "revise") else ""
        return f"{event.lane or 'run'}: answered ({event.by}): {_one_line(event.answer)}{then}"
    return None


class PlainProgress:
    """`plain_lines` for one run's stream, with one memory: a perimeter event that says what the
    lane's previous line already said (the same paths flagged twice in a row, as the watcher sees
    them again on its next pass) prints once. Any other line of the lane ends the repeat."""

    def __init__(self) -> None:
        self._said: dict[str, str] = {}  # lane → its last perimeter line, while nothing else came

    def lines(self, view: RunView, envelope: Envelope) -> list[str]:
        event = envelope.event
        out = plain_lines(view, envelope)
        lane = getattr(event, "lane", None) or getattr(event, "story", None)
        if not out or not isinstance(lane, str):
            return out
        if not isinstance(event, PerimeterViolation):
            self._said.pop(lane, None)
            return out
        said = _lane_line(view, event) or ""
        if self._said.get(lane) == said:
            return []
        self._said[lane] = said
        return out


def plain_lines(view: RunView, envelope: Envelope) -> list[str]:
    """The lines one event adds to plain progress (call after `view.apply(envelope)`).

    Each starts with the local time of the event; none holds a line break.
    """
    event = envelope.event
    line = _run_line(view, event) or _lane_line(view, event) or _pause_line(view, event)
    if line is None:
        return []
    try:
        stamp = parse_iso(envelope.at).astimezone().strftime("%H:%M:%S")
    except ValueError:
        stamp = envelope.at
    return [f"{stamp} {line}"]

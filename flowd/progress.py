"""Terminal rendering of the fold: the live progress of `flowd run`/`flowd demo` and `flowd status`.

Both draw the same RunView the language server folds, so every view shows the same thing.
"""

from __future__ import annotations

from rich.console import Group
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from flowd.view import LaneView, RunView

STATUS_STYLE = {
    "planned": "dim",
    "active": "cyan",
    "waiting": "yellow",
    "done": "green",
    "failed": "red",
    "skipped": "dim",
}


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
    return [
        Text(lane.lane, style="bold"),
        Text(lane.status, style=STATUS_STYLE.get(lane.status, "")),
        executor,
        Text(where, no_wrap=True, overflow="ellipsis"),
        f"{lane.tokens:,}" if lane.tokens else "",
        money(lane.cost_usd, lane.estimated) if lane.cost_usd is not None else "",
    ]


def render_run(view: RunView) -> Group:
    table = Table(box=None, pad_edge=False, show_edge=False, expand=False)
    rows = [lane_row(view, lane) for lane in view.lanes.values()]
    headers = ("lane", "status", "clone", "task", "tokens", "cost")
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
    totals = view.totals
    cost = money(totals.cost_usd)
    extra = []
    if totals.estimated_tokens:
        extra.append(f"{totals.estimated_tokens:,} estimated")
    if totals.unpriced_tokens:
        extra.append(f"{totals.unpriced_tokens:,} unpriced")
    budget = f" of {money(view.budget_usd)}" if view.budget_usd is not None else ""
    title = Text.assemble(
        (f"Epic {view.epic_id} ", "bold"),
        (f"[{view.status}] ", STATUS_STYLE.get(view.status, "cyan")),
        f"{view.count('done')}/{view.total} stories · {view.active_lanes} lanes · "
        f"{totals.tokens:,} tokens · {cost}{budget}" + (f" ({', '.join(extra)})" if extra else ""),
    )
    parts: list[Text | Table] = [title, bar, table]
    held = [c for c in view.clones.values() if c.held]
    if held:
        names = ", ".join(f"{c.name} {c.role}" + (f" ({c.label})" if c.label else "") for c in held)
        parts.append(Text(f"clones held: {names}", style="dim"))
    for executor, exclusion in view.exclusions.items():
        until = f" until {exclusion['until']}" if exclusion.get("until") else ""
        parts.append(Text(f"{executor} excluded{until}: {exclusion['reason']}", style="yellow"))
    return Group(*parts)

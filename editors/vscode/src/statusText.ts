// What the status bar item says about the runs. Pure, so every state is unit-tested.

import { costPhrase, formatTokens } from "./format";
import { CostEntry, epicCost, LanesModel, runningLanes } from "./lanesModel";
import { isRunActive } from "./protocol";

const OUTCOME_ICON: Record<string, string> = {
  done: "$(check)",
  failed: "$(error)",
  cancelled: "$(circle-slash)",
  halted: "$(warning)",
};

export const IDLE_TEXT = "$(rocket) flowd";

function join(...parts: string[]): string {
  return parts.filter((p) => p !== "").join(" · ");
}

/**
 * The status bar text:
 * - running: `$(sync~spin) 3/5 lanes · $1.42` (lanes running / stories in the epic), several
 *   active runs summed with their count in front (`2 runs · 4/9 lanes`);
 * - ended: `$(check) auth done · $1.42`, `$(error) auth failed · 3/5 done · $1.42`;
 * - no run known: `$(rocket) flowd`.
 * The cost is the epic's: every run of it, a resumed run's predecessors included.
 */
export function statusText(model: LanesModel): string {
  const epics = model.epics();
  const active = epics.filter((e) => isRunActive(e.latest.status));
  if (active.length === 1) {
    const run = active[0].latest;
    return join(`$(sync~spin) ${runningLanes(run)}/${run.total} lanes`, costPhrase(epicCost(active[0])));
  }
  if (active.length > 1) {
    const running = active.reduce((n, e) => n + runningLanes(e.latest), 0);
    const total = active.reduce((n, e) => n + e.latest.total, 0);
    return join(`$(sync~spin) ${active.length} runs`, `${running}/${total} lanes`, summedCost(active.map(epicCost)));
  }
  const epic = epics[0];
  if (!epic) return IDLE_TEXT;
  const last = epic.latest;
  const icon = OUTCOME_ICON[last.status] ?? "$(circle-outline)";
  const name = last.epicId || last.runId;
  const counts = last.status === "done" ? "" : `${last.done}/${last.total} done`;
  return join(`${icon} ${name} ${last.status}`, counts, costPhrase(epicCost(epic)));
}

/** Several epics' costs added up; budgets are per run, so they are not shown here. */
function summedCost(all: (CostEntry | undefined)[]): string {
  const costs = all.filter((c) => c !== undefined);
  if (costs.length === 0) return "";
  const priced = costs.filter((c) => c.costUsd !== undefined);
  return costPhrase({
    tokens: costs.reduce((n, c) => n + c.tokens, 0),
    costUsd: priced.length ? priced.reduce((n, c) => n + (c.costUsd ?? 0), 0) : undefined,
    estimatedTokens: costs.reduce((n, c) => n + c.estimatedTokens, 0),
    unpricedTokens: costs.reduce((n, c) => n + c.unpricedTokens, 0),
  });
}

/** The hover text: one line per run. */
export function statusTooltip(model: LanesModel): string {
  const epics = model.epics();
  if (epics.length === 0) return "flowd: no run yet. Click to open the lanes view.";
  const lines = epics.slice(0, 5).map((epic) => {
    const run = epic.latest;
    const state = isRunActive(run.status)
      ? `${runningLanes(run)} running, ${run.done}/${run.total} done`
      : `${run.status}, ${run.done}/${run.total} done`;
    const cost = epicCost(epic);
    const tokens = cost ? `${formatTokens(cost.tokens)} tokens` : "";
    const runs = epic.runs.length > 1 ? `${epic.runs.length} runs` : "";
    return join(`${run.epicId || run.runId} (${run.runId})`, state, runs, tokens, costPhrase(cost));
  });
  return [...lines, "Click to open the lanes view."].join("\n");
}

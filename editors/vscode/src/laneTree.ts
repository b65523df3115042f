// The lanes tree as plain data: run → lanes → tasks and clones, plus the run's roster.
// The vscode TreeDataProvider (lanesView.ts) only maps these nodes to TreeItems.

import { costPhrase, formatTokens, laneCost } from "./format";
import {
  CloneEntry,
  cloneName,
  EpicEntry,
  epicCost,
  isLaneRunning,
  LaneEntry,
  LanesModel,
  laneTasks,
  RunEntry,
  runningLanes,
  TaskEntry,
} from "./lanesModel";
import { isRunActive } from "./protocol";

export interface NodeIcon {
  /** A codicon id, e.g. `sync~spin`. */
  id: string;
  /** A theme color id, e.g. `charts.green`. */
  color?: string;
}

export type NodeKind = "run" | "lane" | "task" | "clone" | "roster" | "history";

export interface TreeNode {
  id: string;
  kind: NodeKind;
  label: string;
  description: string;
  tooltip: string;
  icon: NodeIcon;
  /**
   * `run.active`, `run.done`, `run.ended` (resumable; only an epic's latest run), `run.past` (an
   * earlier run of an epic, in its history), `lane`, `task[.parallel]`, `clone`, `roster`,
   * `history`: the context menus.
   */
  contextValue: string;
  collapsed: "none" | "collapsed" | "expanded";
  children: TreeNode[];
  runId: string;
  lane?: string;
}

const RUN_ICON: Record<string, NodeIcon> = {
  done: { id: "pass", color: "charts.green" },
  failed: { id: "error", color: "charts.red" },
  cancelled: { id: "circle-slash", color: "charts.yellow" },
  halted: { id: "warning", color: "charts.yellow" },
};

const LANE_ICON: Record<string, NodeIcon> = {
  active: { id: "sync~spin", color: "charts.blue" },
  running: { id: "sync~spin", color: "charts.blue" },
  planned: { id: "circle-large-outline" },
  waiting: { id: "watch", color: "charts.yellow" },
  // The merge train (docs/merging.md): waiting for a candidate, and held by one.
  queued: { id: "list-ordered", color: "charts.purple" },
  merging: { id: "git-merge", color: "charts.purple" },
  ready: { id: "git-pull-request", color: "charts.purple" }, // done, waiting for your approval to merge
  done: { id: "pass-filled", color: "charts.green" },
  failed: { id: "error", color: "charts.red" },
  skipped: { id: "debug-step-over", color: "disabledForeground" },
};

const TASK_ICON: Record<string, NodeIcon> = {
  planned: { id: "circle-large-outline" },
  started: { id: "loading~spin", color: "charts.blue" },
  completed: { id: "check", color: "charts.green" },
};

const CLONE_ICON: Record<string, NodeIcon> = {
  leased: { id: "vm-active", color: "charts.green" },
  released: { id: "vm-outline" },
  excluded: { id: "circle-slash", color: "charts.red" },
  resumed: { id: "vm-outline" },
};

function join(...parts: (string | undefined)[]): string {
  return parts.filter((p) => p !== undefined && p !== "").join(" · ");
}

/** One root per epic: its latest run, with the earlier runs (resumed from) under History. */
export function buildTree(model: LanesModel): TreeNode[] {
  return model.epics().map(epicNode);
}

/**
 * The epic's node is its latest run's (cancel and resume act on that run), with the cost of
 * every run of the epic; earlier runs are listed under History, without a resume action.
 */
export function epicNode(epic: EpicEntry): TreeNode {
  const node = runNode(epic.latest, { id: `epic:${epic.epicId || epic.latest.runId}`, cost: epicCost(epic) });
  const earlier = epic.runs.slice(1);
  if (earlier.length > 0) {
    const history: TreeNode = {
      id: `history:${epic.epicId}`,
      kind: "history",
      label: "History",
      description: `${earlier.length} earlier run${earlier.length === 1 ? "" : "s"}`,
      tooltip: `Earlier runs of epic ${epic.epicId}; the latest run resumed from them`,
      icon: { id: "history" },
      contextValue: "history",
      collapsed: "collapsed",
      children: earlier.map((run) => runNode(run, { past: true })),
      runId: epic.latest.runId,
    };
    node.children.push(history);
    node.collapsed = node.collapsed === "none" ? "collapsed" : node.collapsed;
    node.tooltip += `\nRun ${epic.runs.length} of this epic; cost of all its runs`;
  }
  return node;
}

export function runNode(run: RunEntry, as: { id?: string; cost?: RunEntry["cost"]; past?: boolean } = {}): TreeNode {
  const active = isRunActive(run.status);
  const lanes = [...run.lanes.values()].map((lane) => laneNode(run, lane));
  const roster = rosterNode(run);
  const children = roster ? [...lanes, roster] : lanes;
  const cost = as.cost ?? run.cost;
  // The icon already says running or how it ended; the text says how far it got.
  const progress = active
    ? join(`${runningLanes(run)} running`, `${run.done}/${run.total} done`)
    : join(run.status, run.status === "done" ? `${run.total} stories` : `${run.done}/${run.total} done`);
  const tooltip = [
    `Epic ${run.epicId || "?"} · run ${run.runId}`,
    run.epicBranch ? `Branch ${run.epicBranch}` : "",
    run.startedAt ? `Started ${run.startedAt}` : "",
    run.endedAt ? `Ended ${run.endedAt}` : "",
    run.failed || run.skipped ? `${run.failed} failed, ${run.skipped} skipped` : "",
    cost ? `${formatTokens(cost.tokens)} tokens` : "",
  ].filter(Boolean);
  return {
    id: as.id ?? `run:${run.runId}`,
    kind: "run",
    label: as.past ? run.runId : run.epicId || run.runId,
    description: join(progress, costPhrase(cost)),
    tooltip: tooltip.join("\n"),
    icon: active ? { id: "sync~spin", color: "charts.blue" } : (RUN_ICON[run.status] ?? { id: "circle-outline" }),
    contextValue: as.past ? "run.past" : active ? "run.active" : run.status === "done" ? "run.done" : "run.ended",
    // Always collapsible, even before its first lane: VS Code fixes a row's expansion when it first
    // draws its id (a childless row stays collapsed once children come), docs/editors.md.
    collapsed: as.past && children.length === 0 ? "none" : active && !as.past ? "expanded" : "collapsed",
    children,
    runId: run.runId,
  };
}

export function laneNode(run: RunEntry, lane: LaneEntry): TreeNode {
  const tasks = laneTasks(lane).map((task) => taskNode(run, lane, task));
  const clones = [...lane.clones.values()].map((c) => cloneNode(run, c, lane.lane));
  const children = [...tasks, ...clones];
  const coder = lane.executor ? cloneName(lane.executor, lane.clone) : "";
  // A lane on a cluster node (docs/scale-out.md) says where.
  const node = lane.node ? `@ ${lane.node}` : "";
  const task = lane.task ? `task ${lane.task.index}/${lane.task.count}` : "";
  const tokens = lane.tokens > 0 ? `${formatTokens(lane.tokens)} tok` : "";
  const label = lane.title && lane.title !== lane.lane ? `${lane.lane} — ${lane.title}` : lane.lane;
  const revision = lane.mergeRevision ? `merge revision ${lane.mergeRevision}` : "";
  const flaky = lane.flaky ? `flaky gates: ${lane.flaky}` : "";
  const status = lane.batch !== undefined ? `${lane.status} #${lane.batch}` : lane.status;
  // The lane's FLOWD_PORT/FLOWD_PORTS once its worktree is prepared (docs/worktree-bootstrap.md).
  const ports = lane.ports ? `ports ${lane.ports}` : lane.port !== undefined ? `port ${lane.port}` : "";
  const tooltip = [
    `${lane.lane}: ${lane.title}`,
    `Status: ${lane.status}${lane.reason ? ` (${lane.reason})` : ""}`,
    lane.batch !== undefined ? `Merge train: batch ${lane.batch}` : "",
    coder ? `Coder: ${coder}` : "",
    lane.node ? `Node: ${lane.node}` : "",
    ports ? `Ports: ${lane.ports ?? lane.port} (FLOWD_PORT ${lane.port ?? "?"}, FLOWD_PORTS ${lane.ports ?? "?"})` : "",
    lane.task ? `Task ${lane.task.index}/${lane.task.count}: ${lane.task.title}` : "",
    `Tokens: ${lane.tokens}${lane.estimated ? " (estimated)" : ""}`,
    lane.costUsd !== undefined ? `Cost: ${laneCost(lane.costUsd, lane.estimated)}` : "",
    revision ? `Merge revision ${lane.mergeRevision}: the epic gates were red on its merge; it went back to its coder` : "",
    flaky ? `Flaky gates: ${lane.flaky} (green only on a rerun; not charged to the story)` : "",
  ].filter(Boolean);
  return {
    // A new id once the lane starts: VS Code keeps the expansion a row had when its id was first
    // drawn (collapsed, for a planned lane), so the started lane's row is a new one, drawn open.
    id: lane.started ? `lane:${run.runId}:${lane.lane}` : `planned-lane:${run.runId}:${lane.lane}`,
    kind: "lane",
    label,
    description: join(status, coder, node, task, tokens, laneCost(lane.costUsd, lane.estimated), ports, revision, flaky),
    tooltip: tooltip.join("\n"),
    icon: LANE_ICON[lane.status] ?? { id: "circle-outline" },
    // `lane.ready`: waiting for approval to merge, so the Approve / Request Changes items show.
    contextValue: lane.status === "ready" ? "lane.ready" : "lane",
    // Collapsible before its first task, for the same reason as the epic's row.
    collapsed: isLaneRunning(lane.status) ? "expanded" : "collapsed",
    children,
    runId: run.runId,
    lane: lane.lane,
  };
}

export function taskNode(run: RunEntry, lane: LaneEntry, task: TaskEntry): TreeNode {
  const who = task.executor && task.state !== "planned" ? cloneName(task.executor, task.clone) : "";
  const satisfies = task.satisfies?.length ? `satisfies ${task.satisfies.join(", ")}` : "";
  return {
    id: `task:${run.runId}:${lane.lane}:${task.index}`,
    kind: "task",
    label: `${task.index}. ${task.title}`,
    description: join(task.state, task.parallel ? "∥ parallel" : "", who, satisfies),
    tooltip: `Task ${task.index}/${task.count} of ${lane.lane}: ${task.title}${task.parallel ? " (runs in parallel)" : ""}`,
    icon: TASK_ICON[task.state] ?? { id: "circle-outline" },
    contextValue: task.parallel ? "task.parallel" : "task",
    collapsed: "none",
    children: [],
    runId: run.runId,
    lane: lane.lane,
  };
}

export function cloneNode(run: RunEntry, clone: CloneEntry, lane?: string): TreeNode {
  const name = cloneName(clone.executor, clone.clone);
  const excluded = run.exclusions.get(clone.executor);
  const state = excluded !== undefined && clone.state !== "leased" ? "excluded" : clone.state;
  const reason = state === "excluded" ? excluded || clone.reason : clone.reason;
  return {
    id: `clone:${run.runId}:${lane ?? ""}:${name}@${clone.label ?? ""}`,
    kind: "clone",
    label: name,
    description: join(clone.role, state, lane ? "" : clone.label, reason),
    tooltip: `${name} as ${clone.role}${clone.label ? ` for ${clone.label}` : ""}: ${state}${reason ? ` (${reason})` : ""}`,
    icon: CLONE_ICON[state] ?? { id: "vm" },
    contextValue: "clone",
    collapsed: "none",
    children: [],
    runId: run.runId,
    lane,
  };
}

/** Every clone and exclusion of the run, under one collapsed node; absent when there are none. */
function rosterNode(run: RunEntry): TreeNode | undefined {
  const clones = [...run.clones.values()].sort((a, b) => naturalCompare(cloneName(a.executor, a.clone), cloneName(b.executor, b.clone)));
  const children = clones.map((c) => cloneNode(run, c));
  for (const [executor, reason] of run.exclusions) {
    if (clones.some((c) => c.executor === executor)) continue;
    children.push(cloneNode(run, { executor, role: "", state: "excluded", reason }));
  }
  if (children.length === 0) return undefined;
  const leased = clones.filter((c) => c.state === "leased").length;
  return {
    id: `roster:${run.runId}`,
    kind: "roster",
    label: "Clones",
    description: join(`${leased} leased`, run.exclusions.size ? `${run.exclusions.size} excluded` : ""),
    tooltip: "Executor clones this run leased, and executors it excluded",
    icon: { id: "server-environment" },
    contextValue: "roster",
    collapsed: "collapsed",
    children,
    runId: run.runId,
  };
}

/** `codex#2` before `codex#10`. */
export function naturalCompare(a: string, b: string): number {
  return a.localeCompare(b, "en", { numeric: true });
}

// The editor's picture of flowd runs, folded from the server's flow/* notifications and
// flow/status snapshots. Pure: no vscode import, so the tree, the status bar, the README
// preview and the wire tests all read the same model.

import {
  CloneParams,
  CostParams,
  isRunActive,
  LaneParams,
  Notifications,
  RunParams,
  StatusResult,
  StatusRun,
  TaskParams,
  TaskState,
} from "./protocol";

/** A task as `flow/task` describes it, less its run and lane (the map it sits in says those). */
export type TaskEntry = Omit<TaskParams, "runId" | "lane">;

/** A clone as `flow/clone` describes it, less its run and its exclusion's end. */
export type CloneEntry = Omit<CloneParams, "runId" | "until">;

/** A lane as the `flow/lane` notification describes it (less its run), plus what the model gathers. */
export interface LaneEntry extends Omit<LaneParams, "runId"> {
  /** By task index. */
  tasks: Map<number, TaskEntry>;
  /** The clones that served this lane, by `cloneKey`, with their state as far as this lane goes. */
  clones: Map<string, CloneEntry>;
  /** Ever past planned and waiting: its tree row is then a new one, drawn open (laneTree.ts). */
  started?: boolean;
}

export interface CostEntry {
  tokens: number;
  costUsd?: number;
  estimatedTokens: number;
  unpricedTokens: number;
  budgetUsd?: number;
}

export interface RunEntry {
  runId: string;
  epicId: string;
  status: string;
  done: number;
  failed: number;
  skipped: number;
  total: number;
  startedAt?: string;
  endedAt?: string;
  plan?: string;
  /** Where the run's things are, as the server names them (docs/protocol.md): never built here. */
  epicBranch?: string;
  reportMarkdown?: string;
  reportJson?: string;
  lanes: Map<string, LaneEntry>;
  /** Latest state of every clone the run has touched, by `cloneKey`. */
  clones: Map<string, CloneEntry>;
  /** Executors currently excluded, with the reason. */
  exclusions: Map<string, string>;
  cost?: CostEntry;
  /** Arrival order, so the most recent run sorts first even without timestamps. */
  seen: number;
  /** The run was seen going (a notification or a snapshot said so): its end is news. */
  seenActive: boolean;
}

/**
 * An epic as the user knows it: every run of it (a resume is a new run of the same epic),
 * the latest first. The latest run is the one to cancel or resume; the earlier ones are its history.
 */
export interface EpicEntry {
  epicId: string;
  latest: RunEntry;
  runs: RunEntry[];
}

/** What changed, so views repaint only that: a run (and its epic), or one lane of it. */
export interface ModelChange {
  runId?: string;
  lane?: string;
}

/** A lane's status, in the words the protocol declares (`LANE_STATUSES`). */
export type LaneStatus = LaneParams["status"];

// `queued`/`merging`: its work is done and it is in the merge train (docs/merging.md); still running.
const RUNNING_LANE: ReadonlySet<LaneStatus> = new Set<LaneStatus>(["active", "queued", "merging"]);

export function isLaneRunning(status: LaneStatus): boolean {
  return RUNNING_LANE.has(status);
}

/** `claude#2` for a slot; `claude@label` for a borrowed lease (no clone number). */
export function cloneKey(executor: string, clone: number | undefined | null, label?: string | null): string {
  return clone !== undefined && clone !== null ? `${executor}#${clone}` : `${executor}@${label ?? ""}`;
}

export function cloneName(executor: string, clone: number | undefined | null): string {
  return clone !== undefined && clone !== null ? `${executor}#${clone}` : executor;
}

function present<T>(value: T | null | undefined): T | undefined {
  return value === null ? undefined : value;
}

type Listener = (change: ModelChange) => void;
type EndListener = (run: RunEntry) => void;

export class LanesModel {
  private readonly runMap = new Map<string, RunEntry>();
  private readonly listeners: Listener[] = [];
  private readonly endListeners: EndListener[] = [];
  private counter = 0;

  /** Called when a run this model saw going ends (done, failed, cancelled, halted). */
  onDidEndRun(listener: EndListener): () => void {
    this.endListeners.push(listener);
    return () => {
      const at = this.endListeners.indexOf(listener);
      if (at >= 0) this.endListeners.splice(at, 1);
    };
  }

  /**
   * Runs grouped by epic, the epic of the most recent run first (active epics before ended
   * ones). Within an epic the latest run is the one started last.
   */
  epics(): EpicEntry[] {
    const byEpic = new Map<string, RunEntry[]>();
    for (const run of this.runMap.values()) {
      const key = run.epicId || `run:${run.runId}`;
      const list = byEpic.get(key) ?? [];
      list.push(run);
      byEpic.set(key, list);
    }
    const epics = [...byEpic.values()].map((runs) => {
      runs.sort(newerFirst);
      return { epicId: runs[0].epicId, latest: runs[0], runs };
    });
    return epics.sort((a, b) => {
      const active = Number(isRunActive(b.latest.status)) - Number(isRunActive(a.latest.status));
      return active !== 0 ? active : newerFirst(a.latest, b.latest);
    });
  }

  /** The epic a run belongs to. */
  epicOf(runId: string): EpicEntry | undefined {
    const run = this.runMap.get(runId);
    if (!run) return undefined;
    return this.epics().find((e) => e.runs.includes(run));
  }

  /** Called after every change; returns an unsubscribe function. */
  onDidChange(listener: Listener): () => void {
    this.listeners.push(listener);
    return () => {
      const at = this.listeners.indexOf(listener);
      if (at >= 0) this.listeners.splice(at, 1);
    };
  }

  /** Most recent first, active runs before ended ones. */
  runs(): RunEntry[] {
    return [...this.runMap.values()].sort((a, b) => {
      const active = Number(isRunActive(b.status)) - Number(isRunActive(a.status));
      return active !== 0 ? active : b.seen - a.seen;
    });
  }

  run(runId: string): RunEntry | undefined {
    return this.runMap.get(runId);
  }

  activeRuns(): RunEntry[] {
    return this.runs().filter((r) => isRunActive(r.status));
  }

  /** Dispatch one notification by method name; unknown methods are ignored. */
  apply(method: string, params: unknown): void {
    switch (method) {
      case Notifications.run:
        this.applyRun(params as RunParams);
        break;
      case Notifications.lane:
        this.applyLane(params as LaneParams);
        break;
      case Notifications.task:
        this.applyTask(params as TaskParams);
        break;
      case Notifications.clone:
        this.applyClone(params as CloneParams);
        break;
      case Notifications.cost:
        this.applyCost(params as CostParams);
        break;
      default:
        return;
    }
  }

  applyRun(p: RunParams): void {
    const run = this.ensureRun(p.runId);
    const wasActive = isRunActive(run.status);
    run.epicId = p.epicId || run.epicId;
    run.status = p.status;
    run.done = p.done;
    run.failed = p.failed;
    run.skipped = p.skipped;
    run.total = p.total;
    this.mergePlaces(run, p);
    if (isRunActive(p.status)) run.seenActive = true;
    if (wasActive && !isRunActive(p.status)) this.ended(run);
    this.changed({ runId: run.runId });
  }

  applyLane(p: LaneParams): void {
    const run = this.ensureRun(p.runId);
    const lane = this.ensureLane(run, p.lane, p.title);
    this.mergeLane(run, lane, p);
    this.changed({ runId: run.runId, lane: p.lane });
  }

  applyTask(p: TaskParams): void {
    const run = this.ensureRun(p.runId);
    const lane = this.ensureLane(run, p.lane);
    const task: TaskEntry = {
      index: p.index,
      count: p.count,
      title: p.title,
      state: p.state,
      satisfies: p.satisfies,
      parallel: p.parallel,
      executor: p.executor,
      clone: p.clone,
    };
    const known = lane.tasks.get(p.index);
    // A coalesced or replayed update must not move a task backwards; a re-plan does (title changes).
    if (known && known.title === p.title && rank(known.state) > rank(p.state)) task.state = known.state;
    lane.tasks.set(p.index, task);
    for (const other of lane.tasks.values()) other.count = p.count;
    if (p.executor) this.noteLaneClone(run, lane, p.executor, p.clone, "coder");
    this.changed({ runId: run.runId, lane: p.lane });
  }

  applyClone(p: CloneParams): void {
    const run = this.ensureRun(p.runId);
    if (p.state === "excluded" || p.state === "resumed") {
      if (p.state === "excluded") run.exclusions.set(p.executor, p.reason ?? "");
      else run.exclusions.delete(p.executor);
      if (p.clone === undefined) {
        this.changed({ runId: run.runId });
        return;
      }
    }
    const key = cloneKey(p.executor, p.clone, p.label);
    const entry: CloneEntry = {
      executor: p.executor,
      clone: p.clone,
      role: p.role,
      label: p.label,
      state: p.state,
      reason: p.reason,
    };
    run.clones.set(key, entry);
    const owner = p.label !== undefined ? run.lanes.get(p.label) : undefined;
    if (owner) {
      owner.clones.set(key, { ...entry });
    } else if (p.state === "released") {
      // A release that does not name its lane ends whichever lane holds that lease.
      for (const lane of run.lanes.values()) {
        const held = lane.clones.get(key);
        if (held && held.state === "leased" && held.role === p.role) held.state = "released";
      }
    }
    this.changed({ runId: run.runId });
  }

  applyCost(p: CostParams): void {
    const run = this.ensureRun(p.runId);
    run.cost = {
      tokens: p.tokens,
      costUsd: present(p.costUsd),
      estimatedTokens: p.estimatedTokens,
      unpricedTokens: p.unpricedTokens,
      budgetUsd: present(p.budgetUsd),
    };
    this.changed({ runId: run.runId });
  }

  /** A `flow/status` result is authoritative for the runs it lists: it resyncs a late attach. */
  applyStatus(result: StatusResult): void {
    for (const s of result.runs ?? []) this.applyStatusRun(s);
    this.changed({});
  }

  private applyStatusRun(s: StatusRun): void {
    const run = this.ensureRun(s.runId);
    const wasActive = isRunActive(run.status);
    run.epicId = s.epicId || run.epicId;
    run.status = s.status;
    if (isRunActive(s.status)) run.seenActive = true;
    run.startedAt = present(s.startedAt) ?? run.startedAt;
    run.endedAt = present(s.endedAt) ?? run.endedAt;
    run.plan = s.plan ?? run.plan;
    this.mergePlaces(run, s);
    for (const p of s.lanes ?? []) {
      const lane = this.ensureLane(run, p.lane, p.title);
      this.mergeLane(run, lane, p);
      if (p.task && !lane.tasks.has(p.task.index)) {
        lane.tasks.set(p.task.index, { ...p.task, state: "started" });
      }
    }
    const lanes = [...run.lanes.values()];
    run.total = lanes.length;
    run.done = lanes.filter((l) => l.status === "done").length;
    run.failed = lanes.filter((l) => l.status === "failed").length;
    run.skipped = lanes.filter((l) => l.status === "skipped").length;
    if (s.clones) {
      const held = new Set(s.clones.map((c) => cloneKey(c.executor, c.clone, c.label)));
      for (const [key, c] of run.clones) if (c.state === "leased" && !held.has(key)) c.state = "released";
      for (const lane of run.lanes.values()) {
        for (const [key, c] of lane.clones) if (c.state === "leased" && !held.has(key)) c.state = "released";
      }
      for (const c of s.clones) {
        this.applyCloneQuiet(run, {
          runId: run.runId,
          executor: c.executor,
          clone: present(c.clone),
          role: c.role,
          label: present(c.label),
          state: "leased",
        });
      }
    }
    if (s.exclusions) {
      run.exclusions.clear();
      for (const e of s.exclusions) run.exclusions.set(e.executor, e.reason ?? "");
    }
    if (s.totals) {
      const t = s.totals;
      run.cost = {
        tokens: t.tokens ?? 0,
        costUsd: present(t.costUsd),
        estimatedTokens: t.estimatedTokens ?? 0,
        unpricedTokens: t.unpricedTokens ?? 0,
        budgetUsd: present(t.budgetUsd),
      };
    }
    if (wasActive && !isRunActive(run.status)) this.ended(run);
    else if (!isRunActive(run.status)) this.endLeases(run);
  }

  private mergePlaces(run: RunEntry, p: Pick<RunParams, "epicBranch" | "reportMarkdown" | "reportJson">): void {
    run.epicBranch = p.epicBranch ?? run.epicBranch;
    run.reportMarkdown = p.reportMarkdown ?? run.reportMarkdown;
    run.reportJson = p.reportJson ?? run.reportJson;
  }

  private applyCloneQuiet(run: RunEntry, p: CloneParams): void {
    const key = cloneKey(p.executor, p.clone, p.label);
    const entry: CloneEntry = { executor: p.executor, clone: p.clone, role: p.role, label: p.label, state: p.state };
    run.clones.set(key, entry);
    const owner = p.label !== undefined ? run.lanes.get(p.label) : undefined;
    if (owner) owner.clones.set(key, { ...entry });
  }

  private mergeLane(run: RunEntry, lane: LaneEntry, p: LaneParams): void {
    lane.title = p.title || lane.title;
    lane.status = p.status;
    if (p.status !== "planned" && p.status !== "waiting") lane.started = true;
    lane.executor = p.executor;
    lane.clone = p.clone;
    lane.task = p.task;
    lane.tokens = typeof p.tokens === "number" ? p.tokens : lane.tokens;
    lane.costUsd = present(p.costUsd);
    lane.estimated = Boolean(p.estimated);
    lane.reason = p.reason;
    // docs/revisions.md: absent means none (the server omits zeros).
    lane.flaky = p.flaky ?? undefined;
    lane.mergeRevision = p.mergeRevision ?? undefined;
    lane.batch = p.batch ?? undefined; // the merge train's batch, while it is in one
    lane.worktree = p.worktree ?? lane.worktree;
    lane.branch = p.branch ?? lane.branch;
    lane.findings = p.findings ?? lane.findings;
    lane.node = p.node ?? lane.node;
    if (p.task) {
      for (const t of lane.tasks.values()) t.count = p.task.count;
    }
    if (p.executor) this.noteLaneClone(run, lane, p.executor, p.clone, "coder");
  }

  /** A lane or task naming its coder makes that clone one of the lane's, even before its lease event. */
  private noteLaneClone(run: RunEntry, lane: LaneEntry, executor: string, clone: number | undefined, role: string): void {
    const key = cloneKey(executor, clone, lane.lane);
    if (lane.clones.has(key)) return;
    const known = run.clones.get(key);
    lane.clones.set(key, {
      executor,
      clone,
      role: known?.role ?? role,
      label: lane.lane,
      state: known && known.label === lane.lane ? known.state : "leased",
    });
  }

  private ended(run: RunEntry): void {
    this.endLeases(run);
    if (!run.seenActive) return;
    run.seenActive = false; // one notice per end, however many updates repeat it
    for (const listener of [...this.endListeners]) listener(run);
  }

  private endLeases(run: RunEntry): void {
    for (const c of run.clones.values()) if (c.state === "leased") c.state = "released";
    for (const lane of run.lanes.values()) {
      for (const c of lane.clones.values()) if (c.state === "leased") c.state = "released";
    }
  }

  private ensureRun(runId: string): RunEntry {
    let run = this.runMap.get(runId);
    if (!run) {
      run = {
        runId,
        epicId: "",
        status: "running",
        done: 0,
        failed: 0,
        skipped: 0,
        total: 0,
        lanes: new Map(),
        clones: new Map(),
        exclusions: new Map(),
        seen: ++this.counter,
        seenActive: false,
      };
      this.runMap.set(runId, run);
    }
    return run;
  }

  private ensureLane(run: RunEntry, id: string, title?: string): LaneEntry {
    let lane = run.lanes.get(id);
    if (!lane) {
      lane = {
        lane: id,
        title: title || id,
        status: "planned",
        tokens: 0,
        estimated: false,
        tasks: new Map(),
        clones: new Map(),
      };
      run.lanes.set(id, lane);
      if (run.total < run.lanes.size) run.total = run.lanes.size;
    }
    return lane;
  }

  private changed(change: ModelChange): void {
    for (const listener of [...this.listeners]) listener(change);
  }
}

/** Started later first; without start times, the one this model heard of last. */
function newerFirst(a: RunEntry, b: RunEntry): number {
  if (a.startedAt && b.startedAt && a.startedAt !== b.startedAt) return a.startedAt < b.startedAt ? 1 : -1;
  return b.seen - a.seen;
}

/** Every run's cost of the epic added up (a resumed run counts only its own usage). */
export function epicCost(epic: EpicEntry): CostEntry | undefined {
  const costs = epic.runs.map((r) => r.cost).filter((c): c is CostEntry => c !== undefined);
  if (costs.length === 0) return undefined;
  if (costs.length === 1) return costs[0];
  const priced = costs.filter((c) => c.costUsd !== undefined);
  return {
    tokens: costs.reduce((n, c) => n + c.tokens, 0),
    costUsd: priced.length ? priced.reduce((n, c) => n + (c.costUsd ?? 0), 0) : undefined,
    estimatedTokens: costs.reduce((n, c) => n + c.estimatedTokens, 0),
    unpricedTokens: costs.reduce((n, c) => n + c.unpricedTokens, 0),
    // The budget is the latest run's: each run is launched with its own.
    budgetUsd: epic.latest.cost?.budgetUsd,
  };
}

function rank(state: TaskState): number {
  return state === "completed" ? 2 : state === "started" ? 1 : 0;
}

/** Tasks in index order. */
export function laneTasks(lane: LaneEntry): TaskEntry[] {
  return [...lane.tasks.values()].sort((a, b) => a.index - b.index);
}

/** Lanes running in a run. */
export function runningLanes(run: RunEntry): number {
  let n = 0;
  for (const lane of run.lanes.values()) if (isLaneRunning(lane.status)) n++;
  return n;
}

/**
 * Feeds every flow/* notification into the model. `on` registers a handler the way the
 * transport does it (the language client's `onNotification`, or a jsonrpc connection's).
 */
export function feedModel<D>(model: LanesModel, on: (method: string, handler: (params: unknown) => void) => D): D[] {
  return Object.values(Notifications).map((method) => on(method, (params) => model.apply(method, params)));
}

// GENERATED from `flowd schema protocol` by flowd/schema/typescript.py: do not edit by hand.
// Regenerate: `node scripts/protocol.mjs` (run by the extension's build and test scripts).
// flowd's custom LSP protocol (docs/protocol.md), as the extension sees it. Every optional
// field may be absent on the wire: the server omits defaults and unknowns.

export const Commands = {
  launchEpic: "flow.launchEpic",
  cancelEpic: "flow.cancelEpic",
  resumeEpic: "flow.resumeEpic",
  validatePlan: "flow.validatePlan",
  answer: "flow.answer",
  addRevision: "flow.addRevision",
} as const;
export const LAUNCH_EPIC = "flow.launchEpic";
export const CANCEL_EPIC = "flow.cancelEpic";
export const RESUME_EPIC = "flow.resumeEpic";
export const VALIDATE_PLAN = "flow.validatePlan";
export const ANSWER = "flow.answer";
export const ADD_REVISION = "flow.addRevision";

export const Requests = {
  status: "flow/status",
  costReport: "flow/costReport",
  perimeter: "flow/perimeter",
  graph: "flow/graph",
  timeline: "flow/timeline",
} as const;
export const STATUS = "flow/status";
export const COST_REPORT = "flow/costReport";
export const PERIMETER = "flow/perimeter";
export const GRAPH = "flow/graph";
export const TIMELINE = "flow/timeline";

export const Notifications = {
  run: "flow/run",
  lane: "flow/lane",
  task: "flow/task",
  clone: "flow/clone",
  cost: "flow/cost",
  attention: "flow/attention",
} as const;
export const RUN = "flow/run";
export const LANE = "flow/lane";
export const TASK = "flow/task";
export const CLONE = "flow/clone";
export const COST = "flow/cost";
export const ATTENTION = "flow/attention";

/** Outcomes a run ends with (RunEnded.outcome); any other run status means it is still going. */
export const RUN_OUTCOMES = ["done", "failed", "cancelled", "halted"] as const;

/** The words of status and reason fields (flowd.protocol.ENUMS). */
export const LANE_STATUSES = ["planned", "active", "waiting", "ready", "done", "failed", "skipped", "queued", "merging"] as const;
export const RUN_STATUSES = ["running", "paused", "interrupted", "done", "failed", "cancelled", "halted"] as const;
export const ATTENTION_REASONS = ["paused", "blocked", "failed", "budget", "repaired", "escaped", "unconfined", "cleared"] as const;
export const WAITING_REASONS = ["paused", "blocked", "budget", "failed"] as const;
export const PAUSE_REASONS = ["budget", "blocked", "noExecutor", "merge"] as const;
export const TIMELINE_PHASES = ["planned", "coding", "gated", "queued", "merging", "merged", "paused", "failed"] as const;

export function isRunActive(status: string): boolean {
  return !(RUN_OUTCOMES as readonly string[]).includes(status);
}

/**
 * What the extension needs of the server. Implemented over the language client in the editor
 * and over a bare JSON-RPC connection in the wire tests, so command flows are one code path.
 */
export interface FlowServer {
  executeCommand<T>(command: string, arg: object): Promise<T>;
  request<T>(method: string, params: object): Promise<T>;
}

/**
 * A review comment on `line` (from 1, as editors show it) of the file `uri` (a `file://` URI,
 * an absolute path, or a path relative to the repository) for story `story` of run `runId`.
 */
export interface AddRevisionArgs {
  workDoneToken?: number | string;
  partialResultToken?: number | string;
  runId: string;
  story: string;
  uri: string;
  line: number;
  text: string;
}

/** The story took the comment: where it is, as the run recorded it, and when it runs. */
export interface AddRevisionResult {
  runId: string;
  story: string;
  path: string;
  line: number;
  message: string;
}

/** `flow.answer`: answer the pause of `story` (absent: the run's own, the budget). */
export interface AnswerArgs {
  workDoneToken?: number | string;
  partialResultToken?: number | string;
  runId: string;
  story?: string;
  answer: string;
}

export interface AnswerResult {
  runId: string;
  story?: string;
  message: string;
}

/**
 * `flow/attention`: something needs a person, or no longer does (`cleared`).
 *
 * `reason`: paused, blocked, failed, budget, repaired (a perimeter repair undid changes),
 * escaped (a lane's process wrote past its story, docs/sandbox-detection.md), unconfined (the
 * run's lanes are not confined, docs/sandbox.md), cleared.
 * The server always sends `actions` (empty when there is nothing to answer).
 */
export interface AttentionParams {
  runId: string;
  lane?: string;
  reason: string;
  message: string;
  actions?: string[];
  paths?: string[];
}

export interface CancelArgs {
  workDoneToken?: number | string;
  partialResultToken?: number | string;
  runId: string;
}

export interface CancelResult {
  runId: string;
  outcome: string;
}

export interface CloneParams {
  runId: string;
  executor: string;
  clone?: number;
  role: string;
  label?: string;
  state: CloneState;
  reason?: string;
  until?: string;
}

export type CloneState = "leased" | "released" | "excluded" | "resumed";

export interface CostParams {
  runId: string;
  tokens: number;
  costUsd?: number;
  estimatedTokens: number;
  unpricedTokens: number;
  budgetUsd?: number;
}

export interface CostReportParams {
  workDoneToken?: number | string;
  partialResultToken?: number | string;
  runId?: string;
  since?: string;
  until?: string;
  timeZone?: string;
  format?: "json" | "text" | "markdown";
}

/** The cost report of `flowd cost --json` (docs/cost.md), or `{text}` for text and markdown. */
export interface CostReportResult {
  text?: string;
  [key: string]: unknown;
}

export interface Exclusion {
  executor: string;
  reason?: string | null;
  until?: string | null;
}

/** A merge train batch: the lanes gated together on the epic, and (once known) whether they passed. */
export interface GraphBatch {
  batch: number;
  lanes: string[];
  ok?: boolean;
}

export interface GraphParams {
  workDoneToken?: number | string;
  partialResultToken?: number | string;
  runId: string;
}

export interface GraphResult {
  stories: GraphStory[];
  batches: GraphBatch[];
}

/**
 * A node: the story's status as `flow/lane` sends it, its edges, its times, and whether it is
 * on the critical path (the chain of dependents the epic's length hangs on).
 */
export interface GraphStory {
  id: string;
  title: string;
  status: "planned" | "active" | "waiting" | "ready" | "done" | "failed" | "skipped" | "queued" | "merging";
  dependsOn: string[];
  lane?: string;
  startedAt?: string;
  endedAt?: string;
  mergedAt?: string;
  critical: boolean;
}

export interface HeldClone {
  executor: string;
  clone?: number | null;
  role: string;
  label?: string | null;
}

export interface LaneParams {
  runId: string;
  lane: string;
  title: string;
  status: "planned" | "active" | "waiting" | "ready" | "done" | "failed" | "skipped" | "queued" | "merging";
  executor?: string;
  clone?: number;
  task?: LaneTask;
  tokens: number;
  costUsd?: number;
  estimated: boolean;
  reason?: string;
  flaky?: number;
  mergeRevision?: number;
  node?: string;
  port?: number;
  ports?: string;
  batch?: number;
  worktree?: string;
  branch?: string;
  findings?: string;
}

export interface LaneTask {
  index: number;
  count: number;
  title: string;
}

export interface LaunchArgs {
  workDoneToken?: number | string;
  partialResultToken?: number | string;
  plan: string;
  concurrency?: number;
  failFast?: boolean;
  budgetUsd?: number;
  pauseOn?: ("budget" | "blocked" | "noExecutor" | "merge")[];
}

export interface LaunchResult {
  runId: string;
  epicId: string;
  epicBranch: string;
}

export interface PerimeterOfFile {
  path: string;
  owner?: PerimeterOwner;
  sharedReadOnlyBy: string[];
}

export interface PerimeterOwner {
  story: string;
  runId?: string;
  status?: "planned" | "active" | "waiting" | "ready" | "done" | "failed" | "skipped" | "queued" | "merging";
}

export interface PerimeterParams {
  workDoneToken?: number | string;
  partialResultToken?: number | string;
  uri?: string;
}

/** With `uri`: who owns that file; without: every perimeter diagnostic now shown. */
export type PerimeterResult = PerimeterOfFile | PerimeterViolations;

export interface PerimeterViolationItem {
  uri: string;
  story?: string;
  runId?: string;
  code?: string;
  message: string;
}

export interface PerimeterViolations {
  violations: PerimeterViolationItem[];
}

/** Exactly one of `runId` (a run to go on with) or `plan` (the newest run of that plan). */
export interface ResumeArgs {
  workDoneToken?: number | string;
  partialResultToken?: number | string;
  runId?: string;
  plan?: string;
}

export interface RunParams {
  runId: string;
  epicId: string;
  status: "running" | "paused" | "interrupted" | "done" | "failed" | "cancelled" | "halted";
  done: number;
  failed: number;
  skipped: number;
  total: number;
  epicBranch?: string;
  reportMarkdown?: string;
  reportJson?: string;
}

export interface RunTotals {
  tokens?: number;
  costUsd?: number;
  estimatedTokens?: number;
  unpricedTokens?: number;
  budgetUsd?: number;
  requests?: number;
}

export interface StatusParams {
  workDoneToken?: number | string;
  partialResultToken?: number | string;
}

export interface StatusResult {
  runs: StatusRun[];
}

export interface StatusRun {
  runId: string;
  epicId: string;
  status: "running" | "paused" | "interrupted" | "done" | "failed" | "cancelled" | "halted";
  startedAt?: string | null;
  endedAt?: string | null;
  plan?: string;
  epicBranch?: string;
  reportMarkdown?: string;
  reportJson?: string;
  lanes: LaneParams[];
  totals?: RunTotals;
  clones?: HeldClone[];
  exclusions?: Exclusion[];
}

export interface TaskParams {
  runId: string;
  lane: string;
  index: number;
  count: number;
  title: string;
  state: TaskState;
  satisfies?: number[];
  parallel?: boolean;
  executor?: string;
  clone?: number;
}

export type TaskState = "planned" | "started" | "completed";

export interface TimelineLane {
  lane: string;
  title: string;
  status: "planned" | "active" | "waiting" | "ready" | "done" | "failed" | "skipped" | "queued" | "merging";
  phases: TimelinePhase[];
}

export interface TimelineParams {
  workDoneToken?: number | string;
  partialResultToken?: number | string;
  runId: string;
}

/**
 * planned, coding, gated, queued, merging, merged, paused or failed, from `start` to `end`
 * (absent: it lasts; merged and failed are points, `end` = `start`).
 */
export interface TimelinePhase {
  phase: string;
  start: string;
  end?: string;
}

export interface TimelineResult {
  startedAt?: string;
  endedAt?: string;
  lanes: TimelineLane[];
}

export interface ValidateArgs {
  workDoneToken?: number | string;
  partialResultToken?: number | string;
  plan: string;
}

export interface ValidateResult {
  violations: string[];
}

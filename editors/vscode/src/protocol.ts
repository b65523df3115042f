// The flowd language server's custom protocol (CONTRACT §6), as the extension sees it.
// Every optional field may be absent on the wire: the server omits defaults and unknowns.

export const Commands = {
  launchEpic: "flow.launchEpic",
  cancelEpic: "flow.cancelEpic",
  resumeEpic: "flow.resumeEpic",
  validatePlan: "flow.validatePlan",
} as const;

export const Requests = {
  status: "flow/status",
  costReport: "flow/costReport",
  perimeter: "flow/perimeter",
} as const;

export const Notifications = {
  run: "flow/run",
  lane: "flow/lane",
  task: "flow/task",
  clone: "flow/clone",
  cost: "flow/cost",
} as const;

/** Outcomes a run ends with (RunEnded.outcome); any other run status means it is still going. */
export const RUN_OUTCOMES = ["done", "failed", "cancelled", "halted"] as const;

export function isRunActive(status: string): boolean {
  return !(RUN_OUTCOMES as readonly string[]).includes(status);
}

export interface RunParams {
  runId: string;
  epicId: string;
  status: string;
  done: number;
  failed: number;
  skipped: number;
  total: number;
}

export interface LaneTask {
  index: number;
  count: number;
  title: string;
}

export interface LaneParams {
  runId: string;
  lane: string;
  title: string;
  status: string;
  executor?: string;
  clone?: number;
  task?: LaneTask;
  tokens: number;
  costUsd?: number;
  estimated: boolean;
  reason?: string;
  /** Not in the contract's Lane shape; used when a server sends it. */
  worktree?: string;
  branch?: string;
}

export type TaskState = "planned" | "started" | "completed";

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

export type CloneState = "leased" | "released" | "excluded" | "resumed";

export interface CloneParams {
  runId: string;
  executor: string;
  clone?: number;
  role: string;
  label?: string;
  state: CloneState;
  reason?: string;
}

export interface CostParams {
  runId: string;
  tokens: number;
  costUsd?: number;
  estimatedTokens: number;
  unpricedTokens: number;
  budgetUsd?: number;
}

export interface RunTotals {
  tokens?: number;
  costUsd?: number | null;
  estimatedTokens?: number;
  unpricedTokens?: number;
  budgetUsd?: number | null;
  requests?: number;
}

export interface StatusRun {
  runId: string;
  epicId: string;
  status: string;
  startedAt?: string | null;
  endedAt?: string | null;
  plan?: string;
  epicBranch?: string;
  lanes: LaneParams[];
  totals?: RunTotals;
  clones?: { executor: string; clone?: number | null; role: string; label?: string | null }[];
  exclusions?: { executor: string; reason?: string | null; until?: string | null }[];
}

export interface StatusResult {
  runs: StatusRun[];
}

export interface LaunchArgs {
  plan: string;
  concurrency?: number;
  failFast?: boolean;
  budgetUsd?: number;
}

export interface LaunchResult {
  runId: string;
  epicId: string;
  epicBranch: string;
}

export interface CancelResult {
  runId: string;
  outcome: string;
}

export interface ValidateResult {
  violations: string[];
}

/** `flow/attention` (docs/protocol.md): something needs a person, or no longer does (`cleared`). */
export interface AttentionParams {
  runId: string;
  lane?: string;
  /** paused, blocked, failed, budget, repaired (a perimeter repair undid changes), cleared. */
  reason: string;
  message: string;
  actions?: string[];
}

export const ATTENTION = "flow/attention";

/** Answers a pause (docs/protocol.md); servers without pauses do not advertise it. */
export const ANSWER_COMMAND = "flow.answer";

export interface CostReportParams {
  runId?: string;
  since?: string;
  until?: string;
  timeZone?: string;
  format?: "json" | "text" | "markdown";
}

/**
 * What the extension needs of the server. Implemented over the language client in the editor
 * and over a bare JSON-RPC connection in the wire tests, so command flows are one code path.
 */
export interface FlowServer {
  executeCommand<T>(command: string, arg: object): Promise<T>;
  request<T>(method: string, params: object): Promise<T>;
}

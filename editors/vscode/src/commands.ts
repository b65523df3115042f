// The palette commands. Each is a short flow: ask the user, call the server (through
// `FlowServer`, never by re-registering the server's own command ids), show the outcome.

import * as fs from "node:fs";
import * as path from "node:path";
import * as vscode from "vscode";
import { APPROVE_ITEM, isApproval, launchPauseOn, REQUEST_CHANGES_ITEM, REVIEW_DIFF_ITEM } from "./approval";
import { approveStory, requestChanges, reviewStory } from "./approvalView";
import { ANSWER_ITEM, answerItems, DEFAULT_PAUSE_ON } from "./attention";
import { diffCommand, findWorktree, mergeCommit, reportLine, shellQuote } from "./laneActions";
import { costPhrase } from "./format";
import { epicCost, LaneEntry, LanesModel, RunEntry, runningLanes } from "./lanesModel";
import { escapeAngleBrackets } from "./markdown";
import { mainCheckout } from "./repoRoot";
import {
  ANSWER,
  AttentionParams,
  CancelResult,
  Commands,
  FlowServer,
  isRunActive,
  LaunchArgs,
  LaunchResult,
  Requests,
  StatusResult,
  ValidateResult,
} from "./protocol";
import { defaultDraftPath, draftArgs, EXCLUDE_GLOB, failureMessage, isMarkdownPlan, isPlanPath, MARKDOWN_GLOB, PLAN_GLOB, runFlowd } from "./plans";

export const PaletteCommands = {
  launchEpic: "flowd.launchEpic",
  cancelRun: "flowd.cancelRun",
  resumeRun: "flowd.resumeRun",
  validatePlan: "flowd.validatePlan",
  showCostReport: "flowd.showCostReport",
  draftPlan: "flowd.draftPlan",
  showLanes: "flowd.showLanes",
  refreshLanes: "flowd.refreshLanes",
  restartServer: "flowd.restartServer",
  openWorktree: "flowd.openWorktree",
  showLaneDiff: "flowd.showLaneDiff",
  showLaneReport: "flowd.showLaneReport",
} as const;

export const LANES_VIEW = "flowd.lanes";
export const LANES_CONTAINER_COMMAND = "workbench.view.extension.flowd";

/** What the commands need from the rest of the extension. */
export interface CommandContext {
  model: LanesModel;
  log: vscode.OutputChannel;
  /** The running server, or undefined (the user has been told why). */
  server(): FlowServer | undefined;
  /** The flowd executable, for commands that run it as a process. */
  flowdPath(): string | undefined;
  /** Asks the server for `flow/status` and feeds the model; never rejects (failures are logged). */
  refresh(): Promise<StatusResult | undefined>;
}

/** A tree node handed to a context-menu command. */
export interface NodeArg {
  runId?: string;
  lane?: string;
}

/** The repository's main checkout (where `.flow/` is), also from a window on a story worktree. */
function root(): string | undefined {
  const folder = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath;
  return folder ? mainCheckout(folder) : undefined;
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

function requireServer(ctx: CommandContext): FlowServer | undefined {
  const server = ctx.server();
  if (!server) {
    void vscode.window.showErrorMessage("flowd: the language server is not running. See the flowd output for why.", "Show Log").then((choice) => {
      if (choice === "Show Log") ctx.log.show(true);
    });
  }
  return server;
}

async function guarded<T>(ctx: CommandContext, what: string, call: () => Promise<T>): Promise<T | undefined> {
  try {
    return await call();
  } catch (err) {
    const message = errorText(err);
    ctx.log.appendLine(`[error] ${what}: ${message}`);
    void vscode.window.showErrorMessage(`flowd: ${what} failed: ${message}`);
    return undefined;
  }
}

// ---------------------------------------------------------------------------------- plans ---

interface PlanItem extends vscode.QuickPickItem {
  uri: vscode.Uri;
}

/** `*.epic.json` files and Markdown files holding a `json storyplan` block, the open one first. */
export async function findPlans(): Promise<vscode.Uri[]> {
  const json = await vscode.workspace.findFiles(PLAN_GLOB, EXCLUDE_GLOB);
  const markdown = await vscode.workspace.findFiles(MARKDOWN_GLOB, EXCLUDE_GLOB, 2000);
  const plans = [...json];
  for (const uri of markdown) {
    try {
      const text = new TextDecoder().decode(await vscode.workspace.fs.readFile(uri));
      if (isMarkdownPlan(text)) plans.push(uri);
    } catch {
      // unreadable: not a plan we can launch
    }
  }
  plans.sort((a, b) => a.fsPath.localeCompare(b.fsPath));
  const active = vscode.window.activeTextEditor?.document.uri;
  if (active) {
    const at = plans.findIndex((p) => p.fsPath === active.fsPath);
    if (at > 0) plans.unshift(...plans.splice(at, 1));
  }
  return plans;
}

export const BROWSE_LABEL = "$(folder-opened) Browse…";

/** A plan anywhere on disk: any absolute path, as `flowd run` takes (docs/editors.md). */
async function browsePlan(title: string): Promise<vscode.Uri | undefined> {
  const picked = await vscode.window.showOpenDialog({
    title,
    openLabel: "Use this plan",
    canSelectMany: false,
    filters: { "Story plans": ["json", "md"], "All files": ["*"] },
  });
  return picked?.[0];
}

async function pickPlan(title: string): Promise<vscode.Uri | undefined> {
  const plans = await findPlans();
  if (plans.length === 0) {
    const choice = await vscode.window.showWarningMessage(
      "flowd: no plan in this workspace (*.epic.json, or a Markdown file with a ```json storyplan block).",
      "Browse…",
      "Draft Epic Plan",
    );
    if (choice === "Browse…") return browsePlan(title);
    if (choice === "Draft Epic Plan") await vscode.commands.executeCommand(PaletteCommands.draftPlan);
    return undefined;
  }
  const items: (PlanItem | (vscode.QuickPickItem & { uri?: undefined }))[] = plans.map((uri) => ({
    label: path.basename(uri.fsPath),
    description: vscode.workspace.asRelativePath(uri),
    uri,
  }));
  items.push({ label: BROWSE_LABEL, description: "a plan file anywhere on disk" });
  const picked = await vscode.window.showQuickPick(items, { title, placeHolder: "Plan file", matchOnDescription: true });
  if (picked && !picked.uri) return browsePlan(title);
  return picked?.uri;
}

/** The plan named by the argument, the active editor when it holds one, or the user's pick. */
async function planFromArg(arg: unknown, title: string): Promise<vscode.Uri | undefined> {
  if (arg instanceof vscode.Uri) return arg;
  return pickPlan(title);
}

function parseConcurrency(value: string): number | undefined {
  return value.trim() === "" ? undefined : Number(value.trim());
}

export async function launchEpic(ctx: CommandContext, arg?: unknown): Promise<LaunchResult | undefined> {
  const server = requireServer(ctx);
  if (!server) return undefined;
  const plan = await planFromArg(arg, "Flow: Launch Epic");
  if (!plan) return undefined;
  const preset = vscode.workspace.getConfiguration("flowd").get<number | null>("defaultConcurrency");
  const concurrency = await vscode.window.showInputBox({
    title: `Launch ${path.basename(plan.fsPath)}`,
    prompt: "Stories at once (empty: the project's setting)",
    value: preset ? String(preset) : "",
    validateInput: (v) => {
      const n = parseConcurrency(v);
      return n === undefined || (Number.isInteger(n) && n >= 1) ? undefined : "A whole number of stories, 1 or more, or empty.";
    },
  });
  if (concurrency === undefined) return undefined;
  const settings = vscode.workspace.getConfiguration("flowd");
  const pauseOn = launchPauseOn(settings.get<string[]>("pauseOn") ?? DEFAULT_PAUSE_ON, settings.get<boolean>("pauseOnMerge") ?? false);
  const args: LaunchArgs = { plan: plan.fsPath, pauseOn };
  const n = parseConcurrency(concurrency);
  if (n !== undefined) args.concurrency = n;
  const result = await guarded(ctx, "launching the epic", () => server.executeCommand<LaunchResult>(Commands.launchEpic, args));
  if (!result) return undefined;
  ctx.log.appendLine(`launched epic ${result.epicId} as run ${result.runId} on ${result.epicBranch}`);
  void vscode.window.showInformationMessage(`flowd: epic ${result.epicId} launched (run ${result.runId}, branch ${result.epicBranch}).`);
  void vscode.commands.executeCommand(LANES_CONTAINER_COMMAND);
  void ctx.refresh();
  return result;
}

export async function validatePlan(ctx: CommandContext, arg?: unknown): Promise<ValidateResult | undefined> {
  const server = requireServer(ctx);
  if (!server) return undefined;
  let plan: vscode.Uri | undefined = arg instanceof vscode.Uri ? arg : undefined;
  const active = vscode.window.activeTextEditor?.document;
  if (!plan && active && (isPlanPath(active.uri.fsPath) || isMarkdownPlan(active.getText()))) plan = active.uri;
  plan ??= await pickPlan("Flow: Validate Plan");
  if (!plan) return undefined;
  const name = vscode.workspace.asRelativePath(plan);
  const result = await guarded(ctx, "validating the plan", () => server.executeCommand<ValidateResult>(Commands.validatePlan, { plan: plan.fsPath }));
  if (!result) return undefined;
  if (result.violations.length === 0) {
    void vscode.window.showInformationMessage(`flowd: ${name} is a valid plan.`);
  } else {
    ctx.log.appendLine(`${name}: ${result.violations.length} violation(s)`);
    for (const v of result.violations) ctx.log.appendLine(`  - ${v}`);
    const n = result.violations.length;
    void vscode.window.showWarningMessage(`flowd: ${name} has ${n} violation${n === 1 ? "" : "s"}: ${result.violations[0]}`, "Show All").then((choice) => {
      if (choice === "Show All") ctx.log.show(true);
    });
  }
  return result;
}

// ----------------------------------------------------------------------------------- runs ---

interface RunItem extends vscode.QuickPickItem {
  runId: string;
}

function runItem(run: RunEntry): RunItem {
  const lanes = isRunActive(run.status) ? `${runningLanes(run)} lanes running · ` : "";
  return {
    label: run.epicId || run.runId,
    description: `${run.status} · ${run.runId}`,
    detail: `${lanes}${run.done}/${run.total} stories done${run.startedAt ? ` · started ${run.startedAt}` : ""}`,
    runId: run.runId,
  };
}

/** The run from the tree node, or picked among the runs `flow/status` reports that match. */
async function pickRun(ctx: CommandContext, arg: unknown, which: (run: RunEntry) => boolean, title: string, none: string): Promise<string | undefined> {
  const node = arg as NodeArg | undefined;
  if (node?.runId) return node.runId;
  await ctx.refresh();
  const runs = ctx.model.runs().filter(which);
  if (runs.length === 0) {
    void vscode.window.showInformationMessage(`flowd: ${none}`);
    return undefined;
  }
  const picked = await vscode.window.showQuickPick(runs.map(runItem), { title, placeHolder: "Run", matchOnDescription: true });
  return picked?.runId;
}

export async function cancelRun(ctx: CommandContext, arg?: unknown): Promise<CancelResult | undefined> {
  const server = requireServer(ctx);
  if (!server) return undefined;
  const runId = await pickRun(ctx, arg, (r) => isRunActive(r.status), "Flow: Cancel Run", "no active run to cancel.");
  if (!runId) return undefined;
  const result = await guarded(ctx, "cancelling the run", () => server.executeCommand<CancelResult>(Commands.cancelEpic, { runId }));
  if (!result) return undefined;
  void vscode.window.showInformationMessage(`flowd: run ${result.runId} ${result.outcome}; it can be resumed.`);
  void ctx.refresh();
  return result;
}

/**
 * The run to resume for a run the user named: the latest run of its epic (a resumed run's
 * predecessor is history: resuming it again would start yet another run), or a sentence saying
 * why there is nothing to resume.
 */
export function resumeTarget(model: LanesModel, runId: string): { runId: string } | { problem: string } {
  const epic = model.epicOf(runId);
  const latest = epic?.latest;
  if (!epic || !latest || latest.runId === runId) return { runId };
  const name = epic.epicId || runId;
  if (isRunActive(latest.status)) return { problem: `flowd: epic ${name} is already running again (run ${latest.runId}).` };
  if (latest.status === "done") return { problem: `flowd: epic ${name} is done (run ${latest.runId} resumed run ${runId}).` };
  return { runId: latest.runId };
}

/** Resumable: an epic's latest run, ended without being done. */
function resumable(model: LanesModel): (run: RunEntry) => boolean {
  return (run) => !isRunActive(run.status) && run.status !== "done" && model.epicOf(run.runId)?.latest === run;
}

export async function resumeRun(ctx: CommandContext, arg?: unknown): Promise<LaunchResult | undefined> {
  const server = requireServer(ctx);
  if (!server) return undefined;
  const named = await pickRun(ctx, arg, resumable(ctx.model), "Flow: Resume Run", "no failed, cancelled or halted run to resume.");
  if (!named) return undefined;
  const target = resumeTarget(ctx.model, named);
  if ("problem" in target) {
    void vscode.window.showInformationMessage(target.problem);
    return undefined;
  }
  const runId = target.runId;
  const result = await guarded(ctx, "resuming the run", () => server.executeCommand<LaunchResult>(Commands.resumeEpic, { runId }));
  if (!result) return undefined;
  void vscode.window.showInformationMessage(`flowd: epic ${result.epicId} resumed (run ${result.runId}).`);
  void vscode.commands.executeCommand(LANES_CONTAINER_COMMAND);
  void ctx.refresh();
  return result;
}

// ----------------------------------------------------------------------------------- cost ---

export async function showCostReport(ctx: CommandContext, arg?: unknown): Promise<vscode.TextDocument | undefined> {
  const server = requireServer(ctx);
  if (!server) return undefined;
  const runId = (arg as NodeArg | undefined)?.runId;
  const params = runId ? { runId, format: "markdown" } : { format: "markdown" };
  const result = await guarded(ctx, "the cost report", () => server.request<{ text?: string }>(Requests.costReport, params));
  if (!result) return undefined;
  const content = typeof result.text === "string" ? escapeAngleBrackets(result.text) : "```json\n" + JSON.stringify(result, null, 2) + "\n```\n";
  const doc = await vscode.workspace.openTextDocument({ language: "markdown", content });
  await vscode.commands.executeCommand("markdown.showPreview", doc.uri);
  return doc;
}

// ---------------------------------------------------------------------------------- draft ---

export async function draftPlan(ctx: CommandContext): Promise<vscode.Uri | undefined> {
  const bin = ctx.flowdPath();
  const dir = root();
  if (!bin || !dir) {
    void vscode.window.showErrorMessage(
      !dir ? "flowd: open a folder (a git repository) to draft an epic plan in." : "flowd: the flowd executable was not found; set flowd.path.",
    );
    return undefined;
  }
  const text = await vscode.window.showInputBox({
    title: "Flow: Draft Epic Plan (1/2)",
    prompt: "What should the epic achieve? The planner drafts stories from this.",
    placeHolder: "Add password login with a login API and a login page",
    validateInput: (v) => (v.trim() ? undefined : "Describe the epic in a sentence or more."),
  });
  if (!text) return undefined;
  const suggested = defaultDraftPath(dir, text);
  const output = await vscode.window.showInputBox({
    title: "Flow: Draft Epic Plan (2/2)",
    prompt: "Where to write the draft plan",
    value: vscode.workspace.asRelativePath(suggested),
    validateInput: (v) => (v.trim() ? undefined : "A path for the plan file, e.g. auth.epic.json."),
  });
  if (!output) return undefined;
  const target = path.resolve(dir, output.trim());
  const args = draftArgs(text.trim(), target);
  ctx.log.appendLine(`$ ${[bin, ...args].map(shellQuote).join(" ")}`);
  const result = await vscode.window.withProgress(
    { location: vscode.ProgressLocation.Notification, title: "flowd: drafting the epic plan…", cancellable: true },
    async (_progress, token) => {
      const abort = new AbortController();
      const sub = token.onCancellationRequested(() => abort.abort());
      try {
        return await runFlowd(bin, args, dir, abort.signal);
      } catch (err) {
        return { code: null, stdout: "", stderr: abort.signal.aborted ? "Drafting cancelled." : errorText(err) };
      } finally {
        sub.dispose();
      }
    },
  );
  if (result.stdout) ctx.log.append(result.stdout);
  if (result.stderr) ctx.log.append(result.stderr);
  if (result.code !== 0) {
    const message = failureMessage(result, "flowd plan new");
    void vscode.window.showErrorMessage(message.startsWith("flowd") ? message : `flowd: ${message}`);
    return undefined;
  }
  const uri = vscode.Uri.file(target);
  const doc = await vscode.workspace.openTextDocument(uri);
  await vscode.window.showTextDocument(doc);
  void vscode.window.showInformationMessage(`flowd: draft written to ${vscode.workspace.asRelativePath(uri)}; review it, then Flow: Launch Epic.`);
  return uri;
}

// ---------------------------------------------------------------------------------- lanes ---

function laneOf(ctx: CommandContext, arg: unknown): { run: RunEntry; lane: LaneEntry } | undefined {
  const node = arg as NodeArg | undefined;
  const run = node?.runId ? ctx.model.run(node.runId) : undefined;
  const lane = node?.lane ? run?.lanes.get(node.lane) : undefined;
  if (!run || !lane) {
    void vscode.window.showWarningMessage("flowd: pick a lane in the Lanes view.");
    return undefined;
  }
  return { run, lane };
}

export async function openWorktree(ctx: CommandContext, arg?: unknown): Promise<string | undefined> {
  const found = laneOf(ctx, arg);
  const repo = root();
  if (!found || !repo) return undefined;
  const worktree = findWorktree(found.lane);
  if (!worktree) {
    void vscode.window.showWarningMessage(`flowd: story ${found.lane.lane} has no worktree now (not started yet, or cleaned after its merge).`);
    return undefined;
  }
  await vscode.commands.executeCommand("vscode.openFolder", vscode.Uri.file(worktree), { forceNewWindow: true });
  return worktree;
}

export function showLaneDiff(ctx: CommandContext, arg?: unknown): string[] | undefined {
  const found = laneOf(ctx, arg);
  const repo = root();
  if (!found || !repo) return undefined;
  const worktree = findWorktree(found.lane);
  const merged = mergeCommit(repo, found.run, found.lane);
  const command = diffCommand(repo, found.run, found.lane, worktree, merged);
  if (!command) {
    void vscode.window.showWarningMessage(`flowd: the server did not say story ${found.lane.lane}'s branches; restart it (Flow: Restart Server).`);
    return undefined;
  }
  const terminal = vscode.window.createTerminal({ name: `flowd diff ${found.lane.lane}`, cwd: repo });
  terminal.show();
  terminal.sendText(command.map(shellQuote).join(" "));
  return command;
}

export function showLaneReport(ctx: CommandContext, arg?: unknown): string | undefined {
  const found = laneOf(ctx, arg);
  if (!found) return undefined;
  const line = reportLine(found.run, found.lane);
  ctx.log.appendLine(`[report] ${found.run.epicId} ${line}`);
  void vscode.window.showInformationMessage(line, "Show Log").then((choice) => {
    if (choice === "Show Log") ctx.log.show(true);
  });
  return line;
}

// ------------------------------------------------------------------------------ run ends ---

export const OPEN_REPORT = "Open Report";

/** What the end-of-run notification says: outcome, stories, the epic's cost (all its runs). */
export function runEndedMessage(model: LanesModel, run: RunEntry): string {
  const epic = model.epicOf(run.runId);
  const cost = costPhrase(epic ? epicCost(epic) : run.cost);
  const stories = run.status === "done" ? `${run.total} stor${run.total === 1 ? "y" : "ies"}` : `${run.done}/${run.total} stories done`;
  const parts = [stories, cost].filter(Boolean).join(" · ");
  return `flowd: epic ${run.epicId || run.runId} ${run.status} (run ${run.runId}) · ${parts}`;
}

/**
 * A run the window saw going has ended: done, failed or halted (a cancel is the user's own act
 * and already answered). Offers the epic report.
 */
export async function notifyRunEnded(ctx: CommandContext, run: RunEntry): Promise<void> {
  if (run.status === "cancelled") return;
  const message = runEndedMessage(ctx.model, run);
  ctx.log.appendLine(message);
  const show = run.status === "done" ? vscode.window.showInformationMessage : vscode.window.showWarningMessage;
  const choice = await show(message, OPEN_REPORT);
  if (choice === OPEN_REPORT) await openReport(run);
}

/** The epic report's Markdown, where the server said it is (written at the end of every run). */
export async function openReport(run: RunEntry): Promise<vscode.Uri | undefined> {
  const file = run.reportMarkdown;
  if (!file || !fs.existsSync(file)) {
    void vscode.window.showWarningMessage(file ? `flowd: no report yet at ${file}.` : `flowd: the server did not say where run ${run.runId}'s report is.`);
    return undefined;
  }
  const uri = vscode.Uri.file(file);
  await vscode.commands.executeCommand("markdown.showPreview", uri);
  return uri;
}

// ------------------------------------------------------------------------------ attention ---

/**
 * A `flow/attention` notice: a story waits on the user (answer with one of its actions, sent
 * as `flow.answer`), or a perimeter repair put back changes someone made in a story worktree.
 * `cleared` ends a wait: it is logged, nothing more.
 */
export async function showAttention(ctx: CommandContext, p: AttentionParams): Promise<string | undefined> {
  const where = p.lane ? `story ${p.lane} (run ${p.runId})` : `run ${p.runId}`;
  ctx.log.appendLine(`[attention] ${where}: ${p.reason}: ${p.message}`);
  if (p.reason === "cleared") return undefined;
  if (isApproval(p)) return showApproval(ctx, p);
  const actions = answerItems(p);
  const text = p.message.startsWith("flowd") ? p.message : `flowd: ${p.message}`;
  let choice = await vscode.window.showWarningMessage(text, ...actions, "Show Lanes");
  if (choice === "Show Lanes") {
    await vscode.commands.executeCommand(LANES_CONTAINER_COMMAND);
    return undefined;
  }
  if (choice === ANSWER_ITEM) {
    // Free text: what a blocked coder needs, or `raise 7` (docs/answers.md).
    choice = await vscode.window.showInputBox({ title: where, prompt: p.message, placeHolder: (p.actions ?? []).join(", ") });
    if (choice !== undefined) choice = choice.trim();
  }
  if (!choice) return undefined;
  const server = requireServer(ctx);
  if (!server) return undefined;
  const arg = p.lane ? { runId: p.runId, story: p.lane, answer: choice } : { runId: p.runId, answer: choice };
  await guarded(ctx, "answering", () => server.executeCommand<unknown>(ANSWER, arg));
  return choice;
}

/** A story waits for approval to merge: review its diff, approve it, or ask for changes. */
async function showApproval(ctx: CommandContext, p: AttentionParams): Promise<string | undefined> {
  const target = { runId: p.runId, story: p.lane ?? "" };
  const choice = await vscode.window.showInformationMessage(`flowd: ${p.message}`, REVIEW_DIFF_ITEM, APPROVE_ITEM, REQUEST_CHANGES_ITEM);
  if (choice === REVIEW_DIFF_ITEM) await reviewStory(ctx, target);
  else if (choice === APPROVE_ITEM) return approveStory(ctx, target);
  else if (choice === REQUEST_CHANGES_ITEM) return requestChanges(ctx, target);
  return choice;
}

/** Registers every palette and context-menu command. */
export function registerCommands(ctx: CommandContext, extra: { restart(): Promise<void> }): vscode.Disposable[] {
  const c = PaletteCommands;
  return [
    vscode.commands.registerCommand(c.launchEpic, (arg?: unknown) => launchEpic(ctx, arg)),
    vscode.commands.registerCommand(c.cancelRun, (arg?: unknown) => cancelRun(ctx, arg)),
    vscode.commands.registerCommand(c.resumeRun, (arg?: unknown) => resumeRun(ctx, arg)),
    vscode.commands.registerCommand(c.validatePlan, (arg?: unknown) => validatePlan(ctx, arg)),
    vscode.commands.registerCommand(c.showCostReport, (arg?: unknown) => showCostReport(ctx, arg)),
    vscode.commands.registerCommand(c.draftPlan, () => draftPlan(ctx)),
    vscode.commands.registerCommand(c.showLanes, () => vscode.commands.executeCommand(LANES_CONTAINER_COMMAND)),
    vscode.commands.registerCommand(c.refreshLanes, () => ctx.refresh()),
    vscode.commands.registerCommand(c.restartServer, () => extra.restart()),
    vscode.commands.registerCommand(c.openWorktree, (arg?: unknown) => openWorktree(ctx, arg)),
    vscode.commands.registerCommand(c.showLaneDiff, (arg?: unknown) => showLaneDiff(ctx, arg)),
    vscode.commands.registerCommand(c.showLaneReport, (arg?: unknown) => showLaneReport(ctx, arg)),
  ];
}

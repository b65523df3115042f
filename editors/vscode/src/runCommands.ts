// Commands on a run: cancel it, resume its epic (from the epic's latest run), show its cost.

import * as vscode from "vscode";
import { CommandContext, guarded, LANES_CONTAINER_COMMAND, NodeArg, requireServer } from "./commandContext";
import { escapeAngleBrackets } from "./markdown";
import { LanesModel, RunEntry, runningLanes } from "./lanesModel";
import { CancelResult, Commands, isRunActive, LaunchResult, Requests } from "./protocol";

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

// A run the window saw going has ended: one notice with its outcome and the epic's cost, offering
// the epic report.

import * as fs from "node:fs";
import * as vscode from "vscode";
import { CommandContext } from "./commandContext";
import { costPhrase } from "./format";
import { epicCost, LanesModel, RunEntry } from "./lanesModel";

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

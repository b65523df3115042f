// Flow: Draft Epic Plan: the planner (`flowd plan new`, run as a process) drafts a plan from a
// sentence, written where the user says and opened for review.

import * as path from "node:path";
import * as vscode from "vscode";
import { CommandContext, checkoutRoot, errorText } from "./commandContext";
import { shellQuote } from "./laneActions";
import { defaultDraftPath, draftArgs, failureMessage, runFlowd } from "./plans";

export async function draftPlan(ctx: CommandContext): Promise<vscode.Uri | undefined> {
  const bin = ctx.flowdPath();
  const dir = checkoutRoot();
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

// Commands on a lane of the Lanes view: open its worktree, show its diff against the epic branch,
// say its line of the epic report — all from where the server said its things are.

import * as vscode from "vscode";
import { CommandContext, checkoutRoot, NodeArg } from "./commandContext";
import { diffCommand, findWorktree, mergeCommit, reportLine, shellQuote } from "./laneActions";
import { LaneEntry, RunEntry } from "./lanesModel";

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
  const repo = checkoutRoot();
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
  const repo = checkoutRoot();
  if (!found || !repo) return undefined;
  const merged = mergeCommit(repo, found.run, found.lane);
  const command = diffCommand(repo, found.run, found.lane, merged);
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

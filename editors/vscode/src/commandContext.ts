// What every palette command shares: the command ids, what the commands need from the rest of
// the extension, the repository they act on, and the guard around a call to the server.

import * as vscode from "vscode";
import { LanesModel } from "./lanesModel";
import { FlowServer, StatusResult } from "./protocol";
import { mainCheckout } from "./repoRoot";

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
export function checkoutRoot(): string | undefined {
  const folder = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath;
  return folder ? mainCheckout(folder) : undefined;
}

export function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

export function requireServer(ctx: CommandContext): FlowServer | undefined {
  const server = ctx.server();
  if (!server) {
    void vscode.window.showErrorMessage("flowd: the language server is not running. See the flowd output for why.", "Show Log").then((choice) => {
      if (choice === "Show Log") ctx.log.show(true);
    });
  }
  return server;
}

export async function guarded<T>(ctx: CommandContext, what: string, call: () => Promise<T>): Promise<T | undefined> {
  try {
    return await call();
  } catch (err) {
    const message = errorText(err);
    ctx.log.appendLine(`[error] ${what}: ${message}`);
    void vscode.window.showErrorMessage(`flowd: ${what} failed: ${message}`);
    return undefined;
  }
}

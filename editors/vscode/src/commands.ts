// The palette commands, registered in one place. Each is a short flow — ask the user, call the
// server (through `FlowServer`, never by re-registering the server's own command ids), show the
// outcome — kept in the file of its concept: plans, runs, lanes, drafting, a run's end, attention.

import * as vscode from "vscode";
import { CommandContext, LANES_CONTAINER_COMMAND, PaletteCommands } from "./commandContext";
import { draftPlan } from "./draftCommand";
import { openWorktree, showLaneDiff, showLaneReport } from "./laneCommands";
import { launchEpic, validatePlan } from "./planCommands";
import { cancelRun, resumeRun, showCostReport } from "./runCommands";

// What the rest of the extension and its tests import from here.
export { showAttention } from "./attentionNotice";
export { checkoutRoot, LANES_CONTAINER_COMMAND, LANES_VIEW, PaletteCommands } from "./commandContext";
export type { CommandContext, NodeArg } from "./commandContext";
export { draftPlan } from "./draftCommand";
export { openWorktree, showLaneDiff, showLaneReport } from "./laneCommands";
export { BROWSE_LABEL, findPlans, launchEpic, validatePlan } from "./planCommands";
export { cancelRun, resumeRun, resumeTarget, showCostReport } from "./runCommands";
export { notifyRunEnded, OPEN_REPORT, openReport, runEndedMessage } from "./runEnded";

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

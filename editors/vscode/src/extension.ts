// Entry point: wires the model, the language client, the Lanes view, the status bar and commands.

import * as vscode from "vscode";
import { CommandContext, LANES_VIEW, notifyRunEnded, registerCommands, showAttention } from "./commands";
import { LanesModel } from "./lanesModel";
import { LanesTreeProvider } from "./lanesView";
import { ADD_REVISION_COMMAND, ReviewComments } from "./reviewComments";
import { ServerManager, serverRoot } from "./server";
import { FlowStatusBar } from "./statusBar";

export interface FlowdApi {
  model: LanesModel;
  manager: ServerManager;
}

let manager: ServerManager | undefined;

export function activate(context: vscode.ExtensionContext): FlowdApi {
  const log = vscode.window.createOutputChannel("flowd");
  const model = new LanesModel();
  manager = new ServerManager(model, log);
  const mgr = manager;
  const tree = new LanesTreeProvider(model);
  const statusBar = new FlowStatusBar(model);
  mgr.onDidChangeState((state, detail) => statusBar.setServerState(state, detail));

  const ctx: CommandContext = {
    model,
    log,
    server: () => mgr.server(),
    flowdPath: () => mgr.flowdPath(),
    refresh: () => mgr.refresh(),
  };
  const review = new ReviewComments({ model, server: () => mgr.server(), repo: serverRoot });
  const stopEndNotices = model.onDidEndRun((run) => void notifyRunEnded(ctx, run));
  mgr.onAttention = (params) => void showAttention(ctx, params);
  context.subscriptions.push(
    { dispose: stopEndNotices },
    log,
    mgr,
    tree,
    statusBar,
    vscode.window.createTreeView(LANES_VIEW, { treeDataProvider: tree, showCollapseAll: true }),
    ...registerCommands(ctx, { restart: () => mgr.restart() }),
    review,
    vscode.commands.registerCommand(ADD_REVISION_COMMAND, (reply: vscode.CommentReply) => review.submit(reply)),
    vscode.workspace.onDidChangeConfiguration((e) => {
      if (e.affectsConfiguration("flowd.path") || e.affectsConfiguration("flowd.server.port")) void mgr.restart();
    }),
  );
  void mgr.start();
  return { model, manager: mgr };
}

export async function deactivate(): Promise<void> {
  await manager?.stop();
  manager = undefined;
}

// Entry point: wires the model, the language client, the Lanes view, the status bar and commands.

import * as vscode from "vscode";
import { registerApproval } from "./approvalView";
import { AttentionTracker, attentionBadge } from "./attention";
import { CommandContext, LANES_VIEW, notifyRunEnded, registerCommands, showAttention } from "./commands";
import { LanesModel } from "./lanesModel";
import { LanesTreeProvider } from "./lanesView";
import { ADD_REVISION_COMMAND, ReviewComments } from "./reviewComments";
import { ServerManager, serverRoot } from "./server";
import { FlowStatusBar } from "./statusBar";
import { GraphPanel, SHOW_GRAPH, showGraph } from "./graphView";
import { mainCheckout } from "./repoRoot";
import { TreeNode } from "./laneTree";

export interface FlowdApi {
  model: LanesModel;
  manager: ServerManager;
  /** The Epic Graph panel when open (the e2e test reads what it drew). */
  graph(): GraphPanel | undefined;
}

let manager: ServerManager | undefined;

export function activate(context: vscode.ExtensionContext): FlowdApi {
  const log = vscode.window.createOutputChannel("flowd");
  const model = new LanesModel();
  manager = new ServerManager(model, log);
  const mgr = manager;
  const tree = new LanesTreeProvider(model);
  const attention = new AttentionTracker();
  const statusBar = new FlowStatusBar(model, attention);
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
  mgr.onAttention = (params) => {
    attention.apply(params);
    void showAttention(ctx, params);
  };
  const lanesView = vscode.window.createTreeView(LANES_VIEW, { treeDataProvider: tree, showCollapseAll: true });
  // The badge counts the stories waiting on a person (docs/editors.md).
  const stopBadge = attention.onDidChange(() => (lanesView.badge = attentionBadge(attention.count)));
  const findNode = (nodes: TreeNode[], want: (n: TreeNode) => boolean): TreeNode | undefined => {
    for (const n of nodes) {
      if (want(n)) return n;
      const inner = findNode(tree.getChildren(n), want);
      if (inner) return inner;
    }
    return undefined;
  };
  const graphDeps = {
    model,
    server: () => mgr.server(),
    extensionUri: context.extensionUri,
    repo: () => {
      const folder = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath;
      return folder ? mainCheckout(folder) : undefined;
    },
    revealLane: async (runId: string, lane: string) => {
      // By run and lane, not id: a lane's row changes id when it starts (laneTree.ts).
      const found = findNode(tree.getChildren(), (n) => n.kind === "lane" && n.runId === runId && n.lane === lane);
      if (found) await lanesView.reveal(found, { select: true, focus: false, expand: true });
    },
    laneCommand: (command: string, runId: string, lane: string): Thenable<unknown> => vscode.commands.executeCommand<unknown>(command, { runId, lane }),
  };
  context.subscriptions.push(
    vscode.commands.registerCommand(SHOW_GRAPH, (arg?: unknown) => showGraph(graphDeps, arg)),
    { dispose: (): void => { GraphPanel.current?.panel.dispose(); } },
    { dispose: stopEndNotices },
    { dispose: stopBadge },
    log,
    mgr,
    tree,
    statusBar,
    lanesView,
    ...registerCommands(ctx, { restart: () => mgr.restart() }),
    ...registerApproval(ctx),
    review,
    vscode.commands.registerCommand(ADD_REVISION_COMMAND, (reply: vscode.CommentReply) => review.submit(reply)),
    vscode.workspace.onDidChangeConfiguration((e) => {
      if (e.affectsConfiguration("flowd.path") || e.affectsConfiguration("flowd.server.port")) void mgr.restart();
    }),
  );
  void mgr.start();
  return { model, manager: mgr, graph: () => GraphPanel.current };
}

export async function deactivate(): Promise<void> {
  await manager?.stop();
  manager = undefined;
}

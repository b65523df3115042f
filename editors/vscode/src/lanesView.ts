// The Lanes tree view: a thin adapter from the pure `buildTree` nodes to vscode TreeItems.

import * as vscode from "vscode";
import { buildTree, TreeNode } from "./laneTree";
import { LanesModel } from "./lanesModel";

const COLLAPSE: Record<TreeNode["collapsed"], vscode.TreeItemCollapsibleState> = {
  none: vscode.TreeItemCollapsibleState.None,
  collapsed: vscode.TreeItemCollapsibleState.Collapsed,
  expanded: vscode.TreeItemCollapsibleState.Expanded,
};

export function toTreeItem(node: TreeNode): vscode.TreeItem {
  const item = new vscode.TreeItem(node.label, COLLAPSE[node.collapsed]);
  item.id = node.id;
  item.description = node.description;
  item.tooltip = node.tooltip;
  item.contextValue = node.contextValue;
  item.iconPath = new vscode.ThemeIcon(node.icon.id, node.icon.color ? new vscode.ThemeColor(node.icon.color) : undefined);
  return item;
}

export class LanesTreeProvider implements vscode.TreeDataProvider<TreeNode>, vscode.Disposable {
  private readonly emitter = new vscode.EventEmitter<TreeNode | undefined>();
  readonly onDidChangeTreeData = this.emitter.event;
  private roots: TreeNode[] | undefined;
  private pending: ReturnType<typeof setTimeout> | undefined;
  private readonly unsubscribe: () => void;

  /** `delayMs` batches bursts of notifications into one repaint. */
  constructor(
    private readonly model: LanesModel,
    private readonly delayMs = 100,
  ) {
    this.unsubscribe = model.onDidChange(() => this.schedule());
  }

  private schedule(): void {
    this.roots = undefined;
    if (this.delayMs <= 0) {
      this.emitter.fire(undefined);
      return;
    }
    this.pending ??= setTimeout(() => {
      this.pending = undefined;
      this.emitter.fire(undefined);
    }, this.delayMs);
  }

  getTreeItem(node: TreeNode): vscode.TreeItem {
    return toTreeItem(node);
  }

  getChildren(node?: TreeNode): TreeNode[] {
    if (node) return node.children;
    this.roots ??= buildTree(this.model);
    return this.roots;
  }

  dispose(): void {
    if (this.pending) clearTimeout(this.pending);
    this.unsubscribe();
    this.emitter.dispose();
  }
}

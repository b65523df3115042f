// The Lanes tree view: a thin adapter from the pure `buildTree` nodes to vscode TreeItems.
// Repaints only what changed: after a burst of notifications the fresh tree is compared with
// the nodes VS Code holds, and only the nodes whose text, icon or children differ are
// refreshed (VS Code keys them by object, so a node keeps its object while its id lives).

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

/** What a node shows by itself (its children are compared by their ids). */
function face(node: TreeNode): string {
  return JSON.stringify([node.label, node.description, node.tooltip, node.icon, node.contextValue, node.kind]);
}

function childIds(node: TreeNode): string {
  return node.children.map((c) => c.id).join("\n");
}

/** Every node of a tree by id. */
function index(nodes: TreeNode[], into = new Map<string, TreeNode>()): Map<string, TreeNode> {
  for (const n of nodes) {
    into.set(n.id, n);
    index(n.children, into);
  }
  return into;
}

/**
 * What to repaint between the tree VS Code holds (`shown`: the nodes it was handed, by id) and
 * a fresh one: `"all"` when the roots changed, else the shown nodes that differ (a node whose
 * children changed is repainted with them; its descendants need no separate refresh).
 */
export function changedNodes(shown: Map<string, TreeNode>, shownRoots: string[], fresh: TreeNode[]): "all" | string[] {
  if (fresh.map((n) => n.id).join("\n") !== shownRoots.join("\n")) return "all";
  const byId = index(fresh);
  const changed: string[] = [];
  const walk = (nodes: TreeNode[]): void => {
    for (const node of nodes) {
      const old = shown.get(node.id);
      if (!old) continue; // VS Code has not asked for it: it gets the fresh one when it does
      if (childIds(old) !== childIds(node)) {
        changed.push(node.id);
        continue;
      }
      if (face(old) !== face(node)) changed.push(node.id);
      walk(node.children);
    }
  };
  walk(fresh);
  return changed.filter((id) => byId.has(id));
}

export class LanesTreeProvider implements vscode.TreeDataProvider<TreeNode>, vscode.Disposable {
  private readonly emitter = new vscode.EventEmitter<TreeNode | TreeNode[] | undefined>();
  readonly onDidChangeTreeData = this.emitter.event;
  /** The nodes handed to VS Code, by id; the object of an id stays the same while it lives. */
  private readonly shown = new Map<string, TreeNode>();
  private shownRoots: string[] | undefined;
  private fresh: Map<string, TreeNode> | undefined;
  private freshRoots: TreeNode[] | undefined;
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
    if (this.delayMs <= 0) {
      this.flush();
      return;
    }
    this.pending ??= setTimeout(() => {
      this.pending = undefined;
      this.flush();
    }, this.delayMs);
  }

  /** Rebuilds the tree from the model and tells VS Code which nodes to repaint. */
  flush(): void {
    this.freshRoots = buildTree(this.model);
    this.fresh = index(this.freshRoots);
    if (this.shownRoots === undefined) {
      this.emitter.fire(undefined);
      return;
    }
    const changed = changedNodes(this.shown, this.shownRoots, this.freshRoots);
    for (const id of [...this.shown.keys()]) if (!this.fresh.has(id)) this.shown.delete(id);
    if (changed === "all") {
      // VS Code asks for the roots again (a hidden view, when shown); until then these are they.
      this.shownRoots = this.freshRoots.map((n) => n.id);
      this.emitter.fire(undefined);
    } else if (changed.length > 0) {
      const nodes = changed.map((id) => this.adopt(id));
      this.emitter.fire(nodes);
    }
  }

  /** The shown object for an id, updated to the fresh node's face (children come on request). */
  private adopt(id: string): TreeNode {
    const fresh = this.fresh?.get(id);
    const old = this.shown.get(id);
    if (!fresh) return old as TreeNode;
    if (!old) {
      const copy = { ...fresh };
      this.shown.set(id, copy);
      return copy;
    }
    Object.assign(old, fresh);
    return old;
  }

  getTreeItem(node: TreeNode): vscode.TreeItem {
    return toTreeItem(node);
  }

  getChildren(node?: TreeNode): TreeNode[] {
    if (!this.fresh || !this.freshRoots) {
      this.freshRoots = buildTree(this.model);
      this.fresh = index(this.freshRoots);
    }
    if (!node) {
      this.shownRoots = this.freshRoots.map((n) => n.id);
      return this.freshRoots.map((n) => this.adopt(n.id));
    }
    const fresh = this.fresh.get(node.id);
    return (fresh?.children ?? []).map((c) => this.adopt(c.id));
  }

  /** For `TreeView.reveal`. */
  getParent(node: TreeNode): TreeNode | undefined {
    for (const candidate of this.fresh?.values() ?? []) {
      if (candidate.children.some((c) => c.id === node.id)) return this.shown.get(candidate.id);
    }
    return undefined;
  }

  dispose(): void {
    if (this.pending) clearTimeout(this.pending);
    this.unsubscribe();
    this.emitter.dispose();
  }
}

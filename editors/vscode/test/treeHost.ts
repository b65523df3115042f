// A stand-in for VS Code's tree view driving a TreeDataProvider the way VS Code 1.100 does
// (workbench/browser/parts/views/treeView.ts over base/browser/ui/tree/asyncDataTree.ts):
// a row's expansion is decided once, when its id is first drawn (`collapseByDefault`: anything
// but Expanded starts collapsed, None included), and kept while the row lives, whatever
// collapsibleState the provider gives later; only the user (or `TreeView.reveal`) changes it. Children are
// asked for only for rows drawn open, and a collapsed row forgets its children's rows.

import { TreeItemCollapsibleState } from "./stubs/vscode";

interface Provider<T> {
  onDidChangeTreeData: (listener: (e: T | T[] | undefined) => unknown) => unknown;
  getChildren(element?: T): T[];
  // Typed loosely: the provider's items are the real `vscode` types, the states this stub's enum.
  getTreeItem(element: T): { id?: string; label?: string | { label: string }; collapsibleState?: number };
}

export class TreeHost<T> {
  /** By id: whether the row is open, for the rows VS Code holds. */
  private readonly open = new Map<string, boolean>();
  private lines: string[] = [];

  constructor(private readonly provider: Provider<T>) {
    provider.onDidChangeTreeData(() => this.draw());
    this.draw();
  }

  /** The rows on screen: indented labels, `▾` open, `▸` closed, `·` a leaf. */
  rows(): string[] {
    return this.lines;
  }

  /** The user clicks a row's twistie closed. */
  collapse(id: string): void {
    this.open.set(id, false);
    this.draw();
  }

  /** The user clicks a row's twistie open. */
  expand(id: string): void {
    this.open.set(id, true);
    this.draw();
  }

  private draw(): void {
    const seen = new Set<string>();
    this.lines = [];
    this.drawChildren(undefined, 0, seen);
    for (const id of [...this.open.keys()]) if (!seen.has(id)) this.open.delete(id);
  }

  private drawChildren(parent: T | undefined, depth: number, seen: Set<string>): void {
    for (const element of this.provider.getChildren(parent)) {
      const item = this.provider.getTreeItem(element);
      const label = typeof item.label === "string" ? item.label : (item.label?.label ?? "");
      const id = item.id ?? label;
      seen.add(id);
      const state = (item.collapsibleState ?? TreeItemCollapsibleState.None) as TreeItemCollapsibleState;
      if (!this.open.has(id)) this.open.set(id, state === TreeItemCollapsibleState.Expanded);
      const leaf = state === TreeItemCollapsibleState.None;
      const open = !leaf && this.open.get(id) === true;
      this.lines.push(`${"  ".repeat(depth)}${leaf ? "·" : open ? "▾" : "▸"} ${label}`);
      if (open) this.drawChildren(element, depth + 1, seen);
    }
  }
}

// A stand-in for VS Code's tree view driving a TreeDataProvider the way VS Code 1.100 does
// (workbench/browser/parts/views/treeView.ts over base/browser/ui/tree/asyncDataTree.ts):
// a row's expansion is decided once, when its id is first drawn (`collapseByDefault`: anything
// but Expanded starts collapsed, None included), and kept while the row lives, whatever
// collapsibleState the provider gives later; only the user or `reveal` changes it. Children are
// asked for only for rows drawn open, and a collapsed row forgets its children's rows.

import { EventEmitter, TreeItemCollapsibleState } from "./stubs/vscode";

interface Provider<T> {
  onDidChangeTreeData: (listener: (e: T | T[] | undefined) => unknown) => unknown;
  getChildren(element?: T): T[];
  // Typed loosely: the provider's items are the real `vscode` types, the states this stub's enum.
  getTreeItem(element: T): { id?: string; label?: string | { label: string }; collapsibleState?: number };
  getParent(element: T): T | undefined;
}

export class TreeHost<T> {
  /** By id: whether the row is open, for the rows VS Code holds. */
  private readonly open = new Map<string, boolean>();
  private readonly collapseEmitter = new EventEmitter<{ element: T }>();
  private readonly expandEmitter = new EventEmitter<{ element: T }>();
  readonly onDidCollapseElement = this.collapseEmitter.event;
  readonly onDidExpandElement = this.expandEmitter.event;
  private readonly visibilityEmitter = new EventEmitter<{ visible: boolean }>();
  readonly onDidChangeVisibility = this.visibilityEmitter.event;
  visible = true;
  /** How many times `reveal` was called while the view was hidden (VS Code would show it). */
  revealedHidden = 0;
  private lines: string[] = [];
  private readonly elements = new Map<string, T>();

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
    this.collapseEmitter.fire({ element: this.element(id) });
  }

  /** The user clicks a row's twistie open. */
  expand(id: string): void {
    this.open.set(id, true);
    this.draw();
    this.expandEmitter.fire({ element: this.element(id) });
  }

  /** The user shows or hides the view (another view in its place in the side bar). */
  setVisible(visible: boolean): void {
    this.visible = visible;
    this.visibilityEmitter.fire({ visible });
  }

  reveal(element: T, options: { expand?: boolean | number } = {}): Promise<void> {
    if (!this.visible) this.revealedHidden++;
    const chain: T[] = [];
    for (let p = this.provider.getParent(element); p; p = this.provider.getParent(p)) chain.unshift(p);
    if (options.expand) chain.push(element);
    for (const e of chain) {
      const id = this.provider.getTreeItem(e).id ?? "";
      if (this.open.get(id) === true) continue;
      this.open.set(id, true);
      this.draw();
      this.expandEmitter.fire({ element: e });
    }
    return Promise.resolve();
  }

  private element(id: string): T {
    const e = this.elements.get(id);
    if (e === undefined) throw new Error(`no row ${id} on screen`);
    return e;
  }

  private draw(): void {
    const seen = new Set<string>();
    this.lines = [];
    this.elements.clear();
    this.drawChildren(undefined, 0, seen);
    for (const id of [...this.open.keys()]) if (!seen.has(id)) this.open.delete(id);
  }

  private drawChildren(parent: T | undefined, depth: number, seen: Set<string>): void {
    for (const element of this.provider.getChildren(parent)) {
      const item = this.provider.getTreeItem(element);
      const label = typeof item.label === "string" ? item.label : (item.label?.label ?? "");
      const id = item.id ?? label;
      seen.add(id);
      this.elements.set(id, element);
      const state = (item.collapsibleState ?? TreeItemCollapsibleState.None) as TreeItemCollapsibleState;
      if (!this.open.has(id)) this.open.set(id, state === TreeItemCollapsibleState.Expanded);
      const leaf = state === TreeItemCollapsibleState.None;
      const open = !leaf && this.open.get(id) === true;
      this.lines.push(`${"  ".repeat(depth)}${leaf ? "·" : open ? "▾" : "▸"} ${label}`);
      if (open) this.drawChildren(element, depth + 1, seen);
    }
  }
}

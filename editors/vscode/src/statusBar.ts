// The status bar item: runs at a glance, a click away from the Lanes view.

import * as vscode from "vscode";
import { PaletteCommands } from "./commandContext";
import { LanesModel } from "./lanesModel";
import { AttentionTracker, attentionText } from "./attention";
import { ServerState } from "./server";
import { IDLE_TEXT, statusText, statusTooltip } from "./statusText";

export const STARTING_TEXT = "$(loading~spin) flowd starting…";

export class FlowStatusBar implements vscode.Disposable {
  private readonly item: vscode.StatusBarItem;
  private readonly unsubscribe: () => void;
  private serverState: ServerState = "starting";
  private detail = "";

  private readonly unsubscribeAttention: () => void;

  constructor(
    private readonly model: LanesModel,
    private readonly attention?: AttentionTracker,
  ) {
    this.item = vscode.window.createStatusBarItem("flowd.status", vscode.StatusBarAlignment.Left, 50);
    this.item.name = "flowd";
    this.item.command = PaletteCommands.showLanes;
    this.unsubscribe = model.onDidChange(() => this.update());
    this.unsubscribeAttention = attention?.onDidChange(() => this.update()) ?? (() => undefined);
    this.update();
    this.item.show();
  }

  setServerState(state: ServerState, detail: string): void {
    this.serverState = state;
    this.detail = detail;
    this.update();
  }

  update(): void {
    if (this.serverState === "missing" || this.serverState === "stopped") {
      this.item.text = this.serverState === "missing" ? "$(warning) flowd not found" : "$(debug-disconnect) flowd stopped";
      this.item.tooltip = this.detail || "The flowd language server is not running.";
      this.item.backgroundColor = new vscode.ThemeColor("statusBarItem.warningBackground");
      this.item.command = this.serverState === "missing" ? { title: "Settings", command: "workbench.action.openSettings", arguments: ["flowd.path"] } : PaletteCommands.restartServer;
      return;
    }
    // Until the server answers, runs known so far still show; with none, say it is on its way.
    const text = statusText(this.model);
    // Stories waiting on a person count beside the runs (docs/editors.md).
    const waiting = attentionText(this.attention?.count ?? 0);
    this.item.text = (this.serverState === "starting" && text === IDLE_TEXT ? STARTING_TEXT : text) + waiting;
    this.item.tooltip = this.serverState === "starting" ? "The flowd language server is starting." : statusTooltip(this.model);
    this.item.backgroundColor = undefined;
    this.item.command = PaletteCommands.showLanes;
  }

  /** For tests. */
  get text(): string {
    return this.item.text;
  }

  dispose(): void {
    this.unsubscribe();
    this.unsubscribeAttention();
    this.item.dispose();
  }
}

// Stories waiting on a person (`flow/attention`, docs/protocol.md): which are open, how many, and
// the words for the status bar and the Lanes view's badge. Pure: no vscode API here.

import { AttentionParams, WAITING_REASONS as WAITING } from "./protocol";

/** Reasons a story waits on a person (generated); `repaired` only informs, `cleared` ends a wait. */
export const WAITING_REASONS: readonly string[] = WAITING;

/** The answers every pause offers beside its buttons: free text in an input box. */
export const ANSWER_ITEM = "Answer…";

/** What `flow.launchEpic` passes as `pauseOn` unless the `flowd.pauseOn` setting says otherwise. */
export const DEFAULT_PAUSE_ON = ["budget", "blocked", "noExecutor"];

function key(p: AttentionParams): string {
  return `${p.runId}\u0000${p.lane ?? ""}`;
}

export class AttentionTracker {
  private readonly open = new Map<string, AttentionParams>();
  private readonly listeners: (() => void)[] = [];

  /** Folds one notice in: a waiting reason opens (or replaces) the story's wait, `cleared` ends it. */
  apply(p: AttentionParams): void {
    const before = this.open.size;
    if (p.reason === "cleared") this.open.delete(key(p));
    else if (WAITING_REASONS.includes(p.reason)) this.open.set(key(p), p);
    else return;
    if (before !== this.open.size || p.reason !== "cleared") for (const l of [...this.listeners]) l();
  }

  get count(): number {
    return this.open.size;
  }

  /** The open waits, oldest first. */
  list(): AttentionParams[] {
    return [...this.open.values()];
  }

  onDidChange(listener: () => void): () => void {
    this.listeners.push(listener);
    return () => {
      const at = this.listeners.indexOf(listener);
      if (at >= 0) this.listeners.splice(at, 1);
    };
  }
}

/** The status bar's addition: `$(bell) 2` while two stories wait on you, else nothing. */
export function attentionText(count: number): string {
  return count > 0 ? ` $(bell) ${count}` : "";
}

/** The Lanes view's badge, or undefined to show none. */
export function attentionBadge(count: number): { value: number; tooltip: string } | undefined {
  if (count === 0) return undefined;
  return { value: count, tooltip: count === 1 ? "1 story waits on you" : `${count} stories wait on you` };
}

/** The buttons of a notice: its actions, then free text for a pause (a failure has nothing to answer). */
export function answerItems(p: AttentionParams): string[] {
  const actions = p.actions ?? [];
  const pause = p.reason === "paused" || p.reason === "blocked" || p.reason === "budget";
  return pause ? [...actions, ANSWER_ITEM] : actions;
}

// Approve before merge in VS Code (docs/editors.md, docs/answers.md: `merge`): "Flow: Review Story
// Before Merge" opens a story's change against the epic in a multi-file diff (the epic side read
// from git through the `flowd-base:` provider, the story side the worktree's own files, so a
// review comment on a line of it is a `flow.addRevision` like any other and sends the story back),
// then asks Approve or Request Changes… (free text for its coder) and answers with `flow.answer`.

import * as path from "node:path";
import * as vscode from "vscode";
import {
  answerApproval,
  APPROVE,
  APPROVE_ITEM,
  approvalAnswer,
  BASE_SCHEME,
  baseText,
  baseUri,
  changedFiles,
  forkPoint,
  readBaseUri,
  readyStories,
  REQUEST_CHANGES_ITEM,
} from "./approval";
import type { CommandContext } from "./commandContext";
import { findWorktree } from "./laneActions";
import { mainCheckout } from "./repoRoot";

export const ApprovalCommands = {
  review: "flowd.reviewStory",
  approve: "flowd.approveStory",
  requestChanges: "flowd.requestChanges",
} as const;

interface Target {
  runId: string;
  story: string;
}

/** The epic side of a story's diff: `git show <fork point>:<file>` in your checkout. */
export class BaseContent implements vscode.TextDocumentContentProvider {
  provideTextDocumentContent(uri: vscode.Uri): string {
    const query = (uri as { query?: string }).query ?? uri.toString().split("?").slice(1).join("?");
    const at = readBaseUri(query);
    return at ? baseText(at.repo, at.base, at.file) : "";
  }
}

function repoRoot(): string | undefined {
  const folder = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath;
  return folder ? mainCheckout(folder) : undefined;
}

/** The story a command is about: a Lanes node, an attention's target, or the user's pick. */
async function targetOf(ctx: CommandContext, arg: unknown): Promise<Target | undefined> {
  const given = arg as { runId?: string; lane?: string; story?: string } | undefined;
  const story = given?.story ?? given?.lane;
  if (given?.runId && story) return { runId: given.runId, story };
  const ready = readyStories(ctx.model);
  if (ready.length === 0) {
    void vscode.window.showInformationMessage("flowd: no story is waiting for approval.");
    return undefined;
  }
  if (ready.length === 1) return ready[0];
  const items = ready.map((r) => ({ label: r.story, description: `run ${r.runId}`, target: r }));
  const picked = await vscode.window.showQuickPick(items, { title: "Stories waiting for approval" });
  return (picked as { target?: Target } | undefined)?.target;
}

/** Opens the story's diff against its epic; returns the files shown (empty: nothing to show). */
export async function reviewStory(ctx: CommandContext, arg?: unknown): Promise<string[]> {
  const target = await targetOf(ctx, arg);
  const repo = repoRoot();
  const run = target ? ctx.model.run(target.runId) : undefined;
  const lane = target ? run?.lanes.get(target.story) : undefined;
  if (!target || !repo || !run || !lane) return [];
  const worktree = findWorktree(lane);
  const branch = lane.branch;
  const base = worktree && branch && run.epicBranch ? forkPoint(repo, branch, run.epicBranch) : undefined;
  if (!worktree || !branch || !base) {
    void vscode.window.showWarningMessage(`flowd: story ${target.story} has no worktree to review now.`);
    return [];
  }
  // What merges: the story's branch (flowd commits its lane's work after each step), read by git
  // in your checkout; the story side is its worktree's files, where line comments go.
  const files = changedFiles(repo, base, branch);
  // [label, epic side, story side]: an added file has no epic side, a deleted one no story side.
  const resources = files.map((f) => {
    const mine = vscode.Uri.file(path.join(worktree, f.path));
    const theirs = f.status === "A" ? undefined : vscode.Uri.parse(baseUri(repo, base, f.basePath));
    return [mine, theirs, f.status === "D" ? undefined : mine];
  });
  const title = `Story ${target.story} against ${run.epicBranch}`;
  await vscode.commands.executeCommand("vscode.changes", title, resources);
  if (lane.status === "ready") void decide(ctx, target);
  return files.map((f) => f.path);
}

/** Approve or Request Changes…, asked beside the diff; returns the answer sent, if any. */
export async function decide(ctx: CommandContext, target: Target): Promise<string | undefined> {
  const choice = await vscode.window.showInformationMessage(
    `flowd: story ${target.story} is ready to merge. Comment on a line of its diff to send it back, or:`,
    APPROVE_ITEM,
    REQUEST_CHANGES_ITEM,
  );
  if (choice === APPROVE_ITEM) return approveStory(ctx, target);
  if (choice === REQUEST_CHANGES_ITEM) return requestChanges(ctx, target);
  return undefined;
}

async function send(ctx: CommandContext, target: Target, answer: string): Promise<string | undefined> {
  const server = ctx.server();
  if (!server) {
    void vscode.window.showErrorMessage("flowd: the language server is not running; nothing was sent.");
    return undefined;
  }
  const outcome = await answerApproval(server, target.runId, target.story, answer);
  if (!outcome.ok) {
    ctx.log.appendLine(`[error] answering story ${target.story}: ${outcome.message}`);
    void vscode.window.showErrorMessage(`flowd: ${outcome.message}`);
    return undefined;
  }
  ctx.log.appendLine(`[approval] story ${target.story} (run ${target.runId}): ${outcome.result.message}`);
  void vscode.window.showInformationMessage(`flowd: ${outcome.result.message}`);
  return answer;
}

export async function approveStory(ctx: CommandContext, arg?: unknown): Promise<string | undefined> {
  const target = await targetOf(ctx, arg);
  return target ? send(ctx, target, APPROVE) : undefined;
}

export async function requestChanges(ctx: CommandContext, arg?: unknown): Promise<string | undefined> {
  const target = await targetOf(ctx, arg);
  if (!target) return undefined;
  const text = await vscode.window.showInputBox({
    title: `Request changes to story ${target.story}`,
    prompt: "What should its coder change before it merges? (line comments on its diff count too)",
  });
  const answer = text === undefined ? undefined : approvalAnswer({ changes: text });
  return answer ? send(ctx, target, answer) : undefined;
}

export function registerApproval(ctx: CommandContext): vscode.Disposable[] {
  const c = ApprovalCommands;
  return [
    vscode.workspace.registerTextDocumentContentProvider(BASE_SCHEME, new BaseContent()),
    vscode.commands.registerCommand(c.review, (arg?: unknown) => reviewStory(ctx, arg)),
    vscode.commands.registerCommand(c.approve, (arg?: unknown) => approveStory(ctx, arg)),
    vscode.commands.registerCommand(c.requestChanges, (arg?: unknown) => requestChanges(ctx, arg)),
  ];
}

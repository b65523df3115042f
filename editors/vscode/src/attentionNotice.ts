// A `flow/attention` shown to the user: a wait answered with one of its actions (or free text),
// an approval before merge, or news that needs no answer.

import * as vscode from "vscode";
import { APPROVE_ITEM, isApproval, REQUEST_CHANGES_ITEM, REVIEW_DIFF_ITEM } from "./approval";
import { approveStory, requestChanges, reviewStory } from "./approvalView";
import { ANSWER_ITEM, answerItems } from "./attention";
import { CommandContext, guarded, LANES_CONTAINER_COMMAND, requireServer } from "./commandContext";
import { ANSWER, AttentionParams } from "./protocol";

/**
 * A `flow/attention` notice: a story waits on the user (answer with one of its actions, sent
 * as `flow.answer`), or a perimeter repair put back changes someone made in a story worktree.
 * `cleared` ends a wait: it is logged, nothing more.
 */
export async function showAttention(ctx: CommandContext, p: AttentionParams): Promise<string | undefined> {
  const where = p.lane ? `story ${p.lane} (run ${p.runId})` : `run ${p.runId}`;
  ctx.log.appendLine(`[attention] ${where}: ${p.reason}: ${p.message}`);
  if (p.reason === "cleared") return undefined;
  if (isApproval(p)) return showApproval(ctx, p);
  const actions = answerItems(p);
  const text = p.message.startsWith("flowd") ? p.message : `flowd: ${p.message}`;
  let choice = await vscode.window.showWarningMessage(text, ...actions, "Show Lanes");
  if (choice === "Show Lanes") {
    await vscode.commands.executeCommand(LANES_CONTAINER_COMMAND);
    return undefined;
  }
  if (choice === ANSWER_ITEM) {
    // Free text: what a blocked coder needs, or `raise 7` (docs/answers.md).
    choice = await vscode.window.showInputBox({ title: where, prompt: p.message, placeHolder: (p.actions ?? []).join(", ") });
    if (choice !== undefined) choice = choice.trim();
  }
  if (!choice) return undefined;
  const server = requireServer(ctx);
  if (!server) return undefined;
  const arg = p.lane ? { runId: p.runId, story: p.lane, answer: choice } : { runId: p.runId, answer: choice };
  await guarded(ctx, "answering", () => server.executeCommand<unknown>(ANSWER, arg));
  return choice;
}

/** A story waits for approval to merge: review its diff, approve it, or ask for changes. */
async function showApproval(ctx: CommandContext, p: AttentionParams): Promise<string | undefined> {
  const target = { runId: p.runId, story: p.lane ?? "" };
  const choice = await vscode.window.showInformationMessage(`flowd: ${p.message}`, REVIEW_DIFF_ITEM, APPROVE_ITEM, REQUEST_CHANGES_ITEM);
  if (choice === REVIEW_DIFF_ITEM) await reviewStory(ctx, target);
  else if (choice === APPROVE_ITEM) return approveStory(ctx, target);
  else if (choice === REQUEST_CHANGES_ITEM) return requestChanges(ctx, target);
  return choice;
}

/** Registers every palette and context-menu command. */

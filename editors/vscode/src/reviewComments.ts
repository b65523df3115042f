// Review from the editor (docs/editors.md): a comment thread on a line of a story's file becomes
// a revision task for that story's coder (`flow.addRevision`). Files of a live story's worktree
// can be commented on (so can the working-tree side of a diff, which is the same file), and files
// of the user's checkout that a live story owns. The run's answer is shown on the thread: resolved
// when the story took it, an error comment (the thread stays open) when it did not.

import * as vscode from "vscode";
import { LanesModel } from "./lanesModel";
import { FlowServer } from "./protocol";
import { revisionTarget, sendRevision } from "./revisions";

export const REVIEW_CONTROLLER = "flowd.review";
export const ADD_REVISION_COMMAND = "flowd.addRevision";

export interface ReviewContext {
  model: LanesModel;
  server(): FlowServer | undefined;
  /** The repository's main checkout, or undefined outside one. */
  repo(): string | undefined;
}

function comment(text: string, author: string, contextValue?: string): vscode.Comment {
  return { body: text, mode: vscode.CommentMode.Preview, author: { name: author }, contextValue };
}

export class ReviewComments implements vscode.Disposable {
  readonly controller: vscode.CommentController;

  constructor(private readonly ctx: ReviewContext) {
    this.controller = vscode.comments.createCommentController(REVIEW_CONTROLLER, "flowd review");
    this.controller.options = { prompt: "Ask the story's coder for a revision", placeHolder: "What should change on this line?" };
    this.controller.commentingRangeProvider = { provideCommentingRanges: (document) => this.ranges(document) };
  }

  /** Every line of a file a live story may still revise; none elsewhere. */
  async ranges(document: vscode.TextDocument): Promise<vscode.Range[]> {
    const server = this.ctx.server();
    const repo = this.ctx.repo();
    if (!server || !repo || document.uri.scheme !== "file") return [];
    const target = await revisionTarget(server, this.ctx.model, repo, document.uri.fsPath);
    return target ? [new vscode.Range(0, 0, Math.max(document.lineCount - 1, 0), 0)] : [];
  }

  /** The thread's submit button: send the comment, then show the run's answer on the thread. */
  async submit(reply: vscode.CommentReply): Promise<void> {
    const { thread } = reply;
    const text = reply.text.trim();
    if (!text) return;
    const said = comment(text, "you");
    const problem = (message: string): void => {
      thread.comments = [...thread.comments, said, comment(message, "flowd", "flowd.error")];
      thread.label = "not sent";
      thread.state = vscode.CommentThreadState.Unresolved;
    };
    const server = this.ctx.server();
    const repo = this.ctx.repo();
    const line = thread.range?.start.line ?? 0;
    if (!server || !repo) return problem("The flowd language server is not running; nothing was sent.");
    const file = thread.uri.fsPath;
    const target = await revisionTarget(server, this.ctx.model, repo, file);
    if (!target) return problem(`No story of a live flowd run can take a revision of ${vscode.workspace.asRelativePath(file)}.`);
    const outcome = await sendRevision(server, target, file, line, text);
    if (!outcome.ok) return problem(outcome.message);
    thread.comments = [...thread.comments, said, comment(outcome.result.message, "flowd")];
    thread.label = `revision for ${target.story}`;
    thread.state = vscode.CommentThreadState.Resolved;
    thread.canReply = false;
  }

  dispose(): void {
    this.controller.dispose();
  }
}

// Review comments that become revision tasks (docs/answers.md: revisions): which story a file
// belongs to, and sending `flow.addRevision`. No vscode import: tested against the real server.

import * as path from "node:path";
import { findWorktree } from "./laneActions";
import { isLaneRunning, LanesModel, LaneStatus } from "./lanesModel";
import { AddRevisionArgs, AddRevisionResult, Commands, FlowServer, PerimeterOfFile, Requests } from "./protocol";

/** The story (of a live run) a comment on a file goes to. */
export interface RevisionTarget {
  runId: string;
  story: string;
}

/** Lane statuses of a story that may still take a revision (not merged, failed or skipped). */
export function takesRevisions(status: LaneStatus): boolean {
  return isLaneRunning(status) || status === "planned" || status === "waiting" || status === "ready";
}

function inside(dir: string, file: string): boolean {
  const rel = path.relative(dir, file);
  return rel !== "" && !rel.startsWith("..") && !path.isAbsolute(rel);
}

/** The live run's story whose worktree holds `file`, if any. */
export function worktreeTarget(model: LanesModel, repo: string, file: string): RevisionTarget | undefined {
  for (const run of model.activeRuns()) {
    for (const lane of run.lanes.values()) {
      const worktree = findWorktree(lane);
      if (worktree && worktree !== repo && inside(worktree, file) && takesRevisions(lane.status)) {
        return { runId: run.runId, story: lane.lane };
      }
    }
  }
  return undefined;
}

/**
 * Where a comment on `file` goes: a story worktree's file to that story; a file of the user's
 * checkout to the live story that owns it (the server's `flow/perimeter` says which).
 */
export async function revisionTarget(server: FlowServer, model: LanesModel, repo: string, file: string): Promise<RevisionTarget | undefined> {
  const own = worktreeTarget(model, repo, file);
  if (own || !inside(repo, file)) return own;
  let owner: PerimeterOfFile["owner"];
  try {
    owner = (await server.request<PerimeterOfFile>(Requests.perimeter, { uri: `file://${file}` })).owner;
  } catch {
    return undefined;
  }
  if (!owner?.runId) return undefined;
  const run = model.run(owner.runId);
  const lane = run?.lanes.get(owner.story);
  return run && lane && takesRevisions(lane.status) ? { runId: run.runId, story: owner.story } : undefined;
}

/** What became of a comment: the run's sentence either way. */
export type RevisionOutcome = { ok: true; result: AddRevisionResult } | { ok: false; message: string };

/** `flow.addRevision` for `line` (from 0, as editors count) of `file`; never rejects. */
export async function sendRevision(server: FlowServer, target: RevisionTarget, file: string, line: number, text: string): Promise<RevisionOutcome> {
  const args: AddRevisionArgs = { runId: target.runId, story: target.story, uri: `file://${file}`, line: line + 1, text };
  try {
    return { ok: true, result: await server.executeCommand<AddRevisionResult>(Commands.addRevision, args) };
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    return { ok: false, message: message.replace(/^flow\.addRevision: /, "") };
  }
}

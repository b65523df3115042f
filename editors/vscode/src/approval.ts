// Approve before merge (docs/answers.md: `merge`): a run launched with the `flowd.pauseOnMerge`
// setting stops each finished story `ready`; the user looks at its diff against the epic and
// answers `approve` or the changes its coder should make (`flow.answer`), or comments on a line of
// the diff (`flow.addRevision`, which sends it back too). No vscode import: the wire tests drive
// these against the real server, and the git helpers against real repositories.

import { execFileSync } from "node:child_process";
import * as path from "node:path";
import { LanesModel } from "./lanesModel";
import { AnswerArgs, AnswerResult, AttentionParams, Commands, FlowServer, LaunchArgs } from "./protocol";

export const APPROVE = "approve";
export const APPROVE_ITEM = "Approve";
export const REQUEST_CHANGES_ITEM = "Request Changes…";
export const REVIEW_DIFF_ITEM = "Review Diff";

type PauseReason = NonNullable<LaunchArgs["pauseOn"]>[number];

/** What `flow.launchEpic` passes as `pauseOn`: the `flowd.pauseOn` setting, plus `merge` when
 * `flowd.pauseOnMerge` is on (off by default: stories merge as soon as their gates pass), once. */
export function launchPauseOn(pauseOn: readonly string[], pauseOnMerge: boolean): PauseReason[] {
  const reasons = [...new Set(pauseOn)] as PauseReason[];
  return pauseOnMerge && !reasons.includes("merge") ? [...reasons, "merge"] : reasons;
}

/** A `flow/attention` asking to approve a story's merge (a pause whose actions offer `approve`). */
export function isApproval(p: AttentionParams): boolean {
  return p.reason === "paused" && p.lane !== undefined && p.lane !== null && (p.actions ?? []).includes(APPROVE);
}

/** The stories of live runs waiting for approval (lane status `ready`), oldest run first. */
export function readyStories(model: LanesModel): { runId: string; story: string; epicId: string }[] {
  const out: { runId: string; story: string; epicId: string }[] = [];
  for (const run of model.activeRuns()) {
    for (const lane of run.lanes.values()) if (lane.status === "ready") out.push({ runId: run.runId, story: lane.lane, epicId: run.epicId });
  }
  return out;
}

/** The answer for a decision: `approve`, or the changes asked for (trimmed; empty is no answer). */
export function approvalAnswer(decision: { approve: true } | { changes: string }): string | undefined {
  if ("approve" in decision) return APPROVE;
  const text = decision.changes.trim();
  return text ? text : undefined;
}

export type ApprovalOutcome = { ok: true; result: AnswerResult } | { ok: false; message: string };

/** `flow.answer` for a story waiting for approval; never rejects (the run's sentence either way). */
export async function answerApproval(server: FlowServer, runId: string, story: string, answer: string): Promise<ApprovalOutcome> {
  const args: AnswerArgs = { runId, story, answer };
  try {
    return { ok: true, result: await server.executeCommand<AnswerResult>(Commands.answer, args) };
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    return { ok: false, message: message.replace(/^flow\.answer: /, "") };
  }
}

/** One changed file of a story against the epic: `status` as git says it (A, M, D, R…). */
export interface ChangedFile {
  status: string;
  path: string;
  /** The file's path on the epic side (differs for a rename). */
  basePath: string;
}

function git(cwd: string, args: string[]): string {
  return execFileSync("git", ["-C", cwd, ...args], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] });
}

/** Where the story's `branch` forked from `epicBranch` (the left side of its diff), or undefined.
 * Every git command here runs in your checkout `repo`, never in the story's worktree: the lane
 * wrote the git dir its `.git` names (docs/sandbox.md "What it does not stop"). */
export function forkPoint(repo: string, branch: string, epicBranch: string): string | undefined {
  try {
    return git(repo, ["merge-base", branch, epicBranch]).trim() || undefined;
  } catch {
    return undefined;
  }
}

/** The story's changed files on its `branch` against its fork point from the epic (what merges). */
export function changedFiles(repo: string, base: string, branch: string): ChangedFile[] {
  let out: string;
  try {
    out = git(repo, ["diff", "--name-status", "-M", "-z", base, branch]);
  } catch {
    return [];
  }
  const parts = out.split("\0").filter((p) => p !== "");
  const files: ChangedFile[] = [];
  for (let i = 0; i < parts.length; ) {
    const status = parts[i++];
    if (status.startsWith("R") || status.startsWith("C")) {
      const from = parts[i++];
      const to = parts[i++];
      files.push({ status: status[0], path: to, basePath: from });
    } else {
      const file = parts[i++];
      files.push({ status, path: file, basePath: file });
    }
  }
  return files;
}

/** A file's text at `base` (the epic side of the diff); "" when it did not exist there. */
export function baseText(repo: string, base: string, file: string): string {
  try {
    return git(repo, ["show", `${base}:${file.split(path.sep).join("/")}`]);
  } catch {
    return "";
  }
}

export const BASE_SCHEME = "flowd-base";

/** The epic side of one file of the diff, as a URI the extension's content provider reads. */
export function baseUri(repo: string, base: string, file: string): string {
  const query = encodeURIComponent(JSON.stringify({ repo, base, file }));
  return `${BASE_SCHEME}:/${file.split(path.sep).join("/")}?${query}`;
}

/** What `baseUri` encoded, from the URI's query (decoded or not); undefined for another URI. */
export function readBaseUri(query: string): { repo: string; base: string; file: string } | undefined {
  for (const text of [query, safeDecode(query)]) {
    try {
      const value = JSON.parse(text) as { repo?: unknown; base?: unknown; file?: unknown };
      if (typeof value.repo === "string" && typeof value.base === "string" && typeof value.file === "string") {
        return { repo: value.repo, base: value.base, file: value.file };
      }
    } catch {
      // not this form
    }
  }
  return undefined;
}

function safeDecode(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

// Where a lane's work lives (worktree, branches) and what its report says. No vscode import:
// every name and path is the server's (`flow/run`, `flow/lane`, docs/protocol.md), read from the
// real files in tests; nothing here builds a branch name or a path of flowd's.

import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import { formatTokens, laneCost } from "./format";
import { cloneName, LaneEntry, RunEntry } from "./lanesModel";

function readJson(file: string): unknown {
  try {
    return JSON.parse(fs.readFileSync(file, "utf8")) as unknown;
  } catch {
    return undefined;
  }
}

function field(value: unknown, key: string): unknown {
  return typeof value === "object" && value !== null ? (value as Record<string, unknown>)[key] : undefined;
}

/** The story's worktree, as the server sent it with the lane, while it exists. */
export function findWorktree(lane: LaneEntry): string | undefined {
  return lane.worktree !== undefined && fs.existsSync(lane.worktree) ? lane.worktree : undefined;
}

/** Single-quoted for a POSIX shell. */
export function shellQuote(arg: string): string {
  return /^[\w@%+=:,./-]+$/.test(arg) ? arg : `'${arg.replace(/'/g, `'\\''`)}'`;
}

function gitLines(repo: string, args: string[]): string[] {
  try {
    return execFileSync("git", ["-C", repo, ...args], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] })
      .split("\n")
      .filter(Boolean);
  } catch {
    return [];
  }
}

/**
 * The merge commit that brought the story into its epic branch (flowd merges with `--no-ff`):
 * on the run's epic branch, the merge whose second parent is the story branch's tip. Undefined
 * while the story has not merged (or either branch is gone, or the server did not name them).
 */
export function mergeCommit(repo: string, run: RunEntry, lane: LaneEntry): string | undefined {
  if (!run.epicBranch || !lane.branch) return undefined;
  const [tip] = gitLines(repo, ["rev-parse", "--verify", "--quiet", `refs/heads/${lane.branch}^{commit}`]);
  if (!tip) return undefined;
  for (const line of gitLines(repo, ["rev-list", "--merges", "--parents", `refs/heads/${run.epicBranch}`])) {
    const [commit, , second] = line.split(" ");
    if (second === tip) return commit;
  }
  return undefined;
}

/**
 * The git command showing a story's work against its epic branch, run in your checkout `repo`.
 * Merged (`merged` is its merge commit): the change the merge brought into the epic (the merge
 * against its first parent) — `epic...story` is empty once the story is in. Not merged: the story
 * branch's commits since it forked from the epic (flowd commits a lane's work after each of its
 * steps). Never git in the story's worktree: the lane wrote the git dir its `.git` names, and a
 * config there could run a command as you (docs/sandbox.md "What it does not stop"). Undefined
 * when the server named no branches.
 */
export function diffCommand(repo: string, run: RunEntry, lane: LaneEntry, merged?: string): string[] | undefined {
  if (merged) return ["git", "-C", repo, "diff", "--stat", "--patch", `${merged}^1`, merged];
  if (!run.epicBranch || !lane.branch) return undefined;
  return ["git", "-C", repo, "diff", "--stat", "--patch", `${run.epicBranch}...${lane.branch}`];
}

/**
 * The lane's line of the epic report (the run's `reportJson`, written at the end of every run);
 * while a run is going, a line built from the live lane instead.
 */
export function reportLine(run: RunEntry, lane: LaneEntry): string {
  const report = run.reportJson ? readJson(run.reportJson) : undefined;
  const stories = field(report, "stories") ?? field(field(report, "data"), "stories");
  if (Array.isArray(stories)) {
    const story: unknown = stories.find((s) => field(s, "id") === lane.lane);
    if (story !== undefined) return storyLine(story);
  }
  return liveLine(lane);
}

function storyLine(story: unknown): string {
  const get = (k: string): unknown => field(story, k);
  const text = (k: string): string => {
    const v = get(k);
    return typeof v === "string" || typeof v === "number" ? String(v) : "?";
  };
  const parts = [`${text("id")}: ${text("status")}`];
  const branch = get("branch");
  if (typeof branch === "string") parts.push(branch);
  const executor = get("executor");
  if (typeof executor === "string") parts.push(executor);
  const tokens = get("tokens") ?? get("estimatedTokens");
  if (typeof tokens === "number") parts.push(`${formatTokens(tokens)} tok`);
  const cost = get("costUsd") ?? get("estimatedCostUsd");
  if (typeof cost === "number") parts.push(laneCost(cost, get("costUsd") === undefined));
  const note = get("reason") ?? get("judge");
  if (typeof note === "string" && note) parts.push(note.replace(/\s+/g, " "));
  return parts.join(" · ");
}

function liveLine(lane: LaneEntry): string {
  const parts = [`${lane.lane}: ${lane.status}`];
  if (lane.executor) parts.push(cloneName(lane.executor, lane.clone));
  if (lane.task) parts.push(`task ${lane.task.index}/${lane.task.count} ${lane.task.title}`);
  parts.push(`${formatTokens(lane.tokens)} tok`);
  const cost = laneCost(lane.costUsd, lane.estimated);
  if (cost) parts.push(cost);
  if (lane.mergeRevision) parts.push(`merge revision ${lane.mergeRevision}`);
  if (lane.flaky) parts.push(`flaky gates: ${lane.flaky}`);
  if (lane.reason) parts.push(lane.reason);
  return `${parts.join(" · ")} (live; the report is written when the run ends)`;
}

// Where a lane's work lives (worktree, branches) and what its report says. No vscode import:
// the paths follow docs/architecture.md and are read from the real files in tests.

import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { formatTokens, laneCost } from "./format";
import { cloneName, LaneEntry, RunEntry } from "./lanesModel";

export function epicBranch(epicId: string): string {
  return `epic/${epicId}`;
}

export function storyBranch(epicId: string, lane: string): string {
  return `story/${epicId}/${lane}`;
}

/** `<repo>/../<repoName>.flowd/<epicId>/<storyId>`: the default when no state says otherwise. */
export function defaultWorktree(repo: string, epicId: string, lane: string): string {
  return path.join(path.dirname(repo), `${path.basename(repo)}.flowd`, epicId, lane);
}

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

/**
 * The story worktree: what the server sent with the lane, else the story's state file
 * (`.flow/epics/<epicId>/stories/<storyId>.json`), else the default location — whichever exists.
 */
export function findWorktree(repo: string, run: RunEntry, lane: LaneEntry): string | undefined {
  const state = readJson(path.join(repo, ".flow", "epics", run.epicId, "stories", `${lane.lane}.json`));
  const fromState = field(state, "worktree");
  const candidates = [
    lane.worktree,
    typeof fromState === "string" ? path.resolve(repo, fromState) : undefined,
    defaultWorktree(repo, run.epicId, lane.lane),
  ];
  return candidates.find((c): c is string => c !== undefined && fs.existsSync(c));
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
 * on `epic/<epicId>`, the merge whose second parent is the story branch's tip. Undefined while
 * the story has not merged (or either branch is gone).
 */
export function mergeCommit(repo: string, epicId: string, lane: string): string | undefined {
  const [tip] = gitLines(repo, ["rev-parse", "--verify", "--quiet", `refs/heads/${storyBranch(epicId, lane)}^{commit}`]);
  if (!tip) return undefined;
  for (const line of gitLines(repo, ["rev-list", "--merges", "--parents", `refs/heads/${epicBranch(epicId)}`])) {
    const [commit, , second] = line.split(" ");
    if (second === tip) return commit;
  }
  return undefined;
}

/**
 * The git command showing a story's work against its epic branch. Merged (`merged` is its merge
 * commit): the change the merge brought into the epic (the merge against its first parent) —
 * `epic...story` is empty once the story is in. Not merged, in the worktree: its working tree
 * (uncommitted edits included) against where it forked from the epic; without a worktree, the
 * story branch's commits since the fork.
 */
export function diffCommand(repo: string, epicId: string, lane: string, worktree?: string, merged?: string): string[] {
  if (merged) return ["git", "-C", repo, "diff", "--stat", "--patch", `${merged}^1`, merged];
  if (worktree) return ["git", "-C", worktree, "diff", "--stat", "--patch", "--merge-base", epicBranch(epicId)];
  return ["git", "-C", repo, "diff", "--stat", "--patch", `${epicBranch(epicId)}...${storyBranch(epicId, lane)}`];
}

/**
 * The lane's line of the epic report (`.flow/epics/<epicId>/report.json`, written at the end
 * of every run); while a run is going, a line built from the live lane instead.
 */
export function reportLine(repo: string, run: RunEntry, lane: LaneEntry): string {
  const report = readJson(path.join(repo, ".flow", "epics", run.epicId, "report.json"));
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

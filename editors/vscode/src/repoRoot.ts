// One server per repository: a folder that is a story worktree (or any linked worktree, or a
// subfolder) of a repository is served from the repository's main checkout, where `.flow/`
// lives. No vscode import: tested against real git repositories.

import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";

const LANE_GIT = "flowd-git";

/**
 * The main checkout of the repository holding `folder`: the parent of git's common directory
 * (`<repo>/.git`), which a linked worktree shares with its main checkout. `folder` itself when
 * it is in no git repository, or the repository is bare.
 */
export function mainCheckout(folder: string): string {
  let common: string;
  try {
    common = execFileSync("git", ["rev-parse", "--path-format=absolute", "--git-common-dir"], {
      cwd: folder,
      encoding: "utf8",
      stdio: ["ignore", "pipe", "ignore"],
    }).trim();
  } catch {
    return folder;
  }
  // A story's worktree while its lane runs: git reports the lane's own git dir, which lies in the
  // worktree's admin dir of the repository's (`<repo>/.git/worktrees/<id>/flowd-git`; docs/sandbox.md
  // "The lane repository").
  if (path.basename(common) === LANE_GIT && path.basename(path.dirname(path.dirname(common))) === "worktrees") {
    common = path.dirname(path.dirname(path.dirname(common)));
  }
  if (path.basename(common) !== ".git") return folder; // bare, or a separate git dir
  const main = path.dirname(common);
  return fs.existsSync(main) ? main : folder;
}

// The parts that touch the machine: finding flowd, plan files, worktrees and git diffs. All on
// real files, real git repositories and real processes in temp dirs.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { after, before, describe, test } from "node:test";
import { findFlowd } from "../src/findFlowd";
import { diffCommand, findWorktree } from "../src/laneActions";
import { LanesModel } from "../src/lanesModel";
import { defaultDraftPath, draftArgs, failureMessage, isMarkdownPlan, runFlowd } from "../src/plans";

let tmp: string;

before(() => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), "flowd-local-"));
});

after(() => {
  fs.rmSync(tmp, { recursive: true, force: true });
});

function executable(file: string): string {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, "#!/bin/sh\nexit 0\n");
  fs.chmodSync(file, 0o755);
  return file;
}

describe("findFlowd", () => {
  test("the setting first, then the workspace's .venv, then PATH", () => {
    const ws = path.join(tmp, "ws");
    const venv = executable(path.join(ws, ".venv", "bin", "flowd"));
    const bin = path.join(tmp, "bin");
    const onPath = executable(path.join(bin, "flowd"));
    const custom = executable(path.join(tmp, "custom", "flowd-dev"));

    assert.deepEqual(findFlowd({ setting: custom, workspaceFolders: [ws], envPath: bin }), { found: { path: custom, source: "setting" } });
    assert.deepEqual(findFlowd({ setting: "${workspaceFolder}/.venv/bin/flowd", workspaceFolders: [ws], envPath: "" }), {
      found: { path: venv, source: "setting" },
    });
    assert.deepEqual(findFlowd({ setting: "", workspaceFolders: [ws], envPath: bin }), { found: { path: venv, source: "workspace venv" } });
    assert.deepEqual(findFlowd({ workspaceFolders: [path.join(tmp, "elsewhere")], envPath: `/nonexistent${path.delimiter}${bin}` }), {
      found: { path: onPath, source: "PATH" },
    });
  });

  test("one sentence saying what to do when it is nowhere", () => {
    const result = findFlowd({ workspaceFolders: [path.join(tmp, "empty")], envPath: path.join(tmp, "nothing") });
    assert.ok("missing" in result);
    assert.equal(
      result.missing,
      `flowd was not found in ${path.join(tmp, "empty", ".venv", "bin", "flowd")} or PATH: install it (pip install flowd, e.g. into the workspace's .venv) or set flowd.path to the executable.`,
    );
    const bad = findFlowd({ setting: path.join(tmp, "no-such-flowd"), workspaceFolders: [], envPath: "" });
    assert.ok("missing" in bad);
    assert.match(bad.missing, /^The setting flowd.path points at .*no-such-flowd, which is not an executable file/);
  });

  test("a file that is not executable does not count", () => {
    const ws = path.join(tmp, "noexec");
    const file = path.join(ws, ".venv", "bin", "flowd");
    fs.mkdirSync(path.dirname(file), { recursive: true });
    fs.writeFileSync(file, "not a program");
    assert.ok("missing" in findFlowd({ workspaceFolders: [ws], envPath: "" }));
  });
});

describe("plans", () => {
  test("Markdown plans are recognised by their json storyplan fence", () => {
    assert.ok(isMarkdownPlan("# Plan\n\n```json storyplan\n{}\n```\n"));
    assert.ok(isMarkdownPlan("~~~~ json  storyplan\n{}\n~~~~\n"));
    assert.ok(!isMarkdownPlan("```json\n{}\n```\n"));
    assert.ok(!isMarkdownPlan("text ```json storyplan inline"));
  });

  test("draft paths and arguments", () => {
    assert.equal(defaultDraftPath("/repo", "Add password login!"), path.join("/repo", "add-password-login.epic.json"));
    assert.equal(defaultDraftPath("/repo", "!!!"), path.join("/repo", "epic.epic.json"));
    assert.deepEqual(draftArgs("Add login", "/repo/a.epic.json"), ["plan", "new", "Add login", "-o", "/repo/a.epic.json"]);
  });

  test("runFlowd collects output and exit code; failures read as flowd's last stderr line", async () => {
    const result = await runFlowd("/bin/sh", ["-c", "echo out; echo 'first' >&2; echo 'flowd: plan.json: bad' >&2; exit 2"], tmp);
    assert.deepEqual(result, { code: 2, stdout: "out\n", stderr: "first\nflowd: plan.json: bad\n" });
    assert.equal(failureMessage(result, "flowd plan new"), "flowd: plan.json: bad");
    assert.equal(failureMessage({ code: 3, stdout: "", stderr: "" }, "flowd plan new"), "flowd plan new failed with exit code 3.");
  });
});

describe("lane worktree and diff", () => {
  const git = (cwd: string, ...args: string[]): string =>
    execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@example.invalid", ...args], { cwd, encoding: "utf8" });

  test("the diff against the epic branch shows the story's work, from your checkout, never git in its worktree", () => {
    const repo = path.join(tmp, "myrepo");
    fs.mkdirSync(repo);
    git(repo, "init", "-q", "-b", "main");
    fs.writeFileSync(path.join(repo, "README.md"), "hello\n");
    git(repo, "add", ".");
    git(repo, "commit", "-q", "-m", "init");
    // Names no default would give: a worktree root of the project's own, other branch names.
    git(repo, "branch", "releases/auth");
    const worktree = path.join(tmp, "elsewhere", "auth", "api");
    git(repo, "worktree", "add", "-q", "-b", "work/auth-api", worktree, "releases/auth");
    // A directory where flowd's default root would be must not be picked up.
    fs.mkdirSync(path.join(tmp, "myrepo.flowd", "auth", "api"), { recursive: true });
    fs.mkdirSync(path.join(worktree, "src"));
    fs.writeFileSync(path.join(worktree, "src", "login.py"), "def login(): ...\n");
    git(worktree, "add", ".");
    git(worktree, "commit", "-q", "-m", "login");
    fs.writeFileSync(path.join(worktree, "README.md"), "hello\nuncommitted\n");
    // The epic moves on after the story forked: that must not show in the story's diff.
    git(repo, "checkout", "-q", "releases/auth");
    fs.writeFileSync(path.join(repo, "OTHER.md"), "another story\n");
    git(repo, "add", ".");
    git(repo, "commit", "-q", "-m", "other story merged");
    git(repo, "checkout", "-q", "main");

    const model = new LanesModel();
    model.apply("flow/run", { runId: "r", epicId: "auth", status: "running", done: 0, failed: 0, skipped: 0, total: 1, epicBranch: "releases/auth" });
    model.apply("flow/lane", { runId: "r", lane: "api", title: "API", status: "active", tokens: 0, estimated: false, worktree, branch: "work/auth-api" });
    const run = model.run("r");
    const lane = run?.lanes.get("api");
    assert.ok(run && lane);
    assert.equal(findWorktree(lane), worktree);

    // The lane's git config names a command (as a lane can write its git dir): git run in the
    // worktree runs it; the diff, run in the checkout, never does.
    const proof = path.join(tmp, "fsmonitor-ran");
    const monitor = path.join(tmp, "monitor.sh");
    fs.writeFileSync(monitor, `#!/bin/sh\ntouch ${proof}\nexit 1\n`, { mode: 0o755 });
    git(repo, "config", "extensions.worktreeConfig", "true");
    git(worktree, "config", "--worktree", "core.fsmonitor", monitor);

    const onBranch = diffCommand(repo, run, lane);
    assert.deepEqual(onBranch, ["git", "-C", repo, "diff", "--stat", "--patch", "releases/auth...work/auth-api"]);
    const branchDiff = execFileSync(onBranch[0], onBranch.slice(1), { encoding: "utf8" });
    assert.match(branchDiff, /src\/login\.py/);
    assert.doesNotMatch(branchDiff, /uncommitted|OTHER\.md/);
    assert.equal(fs.existsSync(proof), false, "the diff ran git in the lane's worktree");
    git(worktree, "status", "--short");
    assert.equal(fs.existsSync(proof), true, "the planted fsmonitor is live in the worktree (else the check above proves nothing)");
    git(repo, "worktree", "remove", "--force", worktree);
    assert.equal(findWorktree(lane), undefined, "a worktree gone is gone: no other place is guessed");
  });

  test("without the server's names nothing is guessed: no worktree, no diff", () => {
    const model = new LanesModel();
    model.apply("flow/run", { runId: "old", epicId: "auth", status: "running", done: 0, failed: 0, skipped: 0, total: 1 });
    model.apply("flow/lane", { runId: "old", lane: "api", title: "API", status: "active", tokens: 0, estimated: false });
    const run = model.run("old");
    const lane = run?.lanes.get("api");
    assert.ok(run && lane);
    assert.equal(findWorktree(lane), undefined);
    assert.equal(diffCommand(tmp, run, lane), undefined);
  });
});

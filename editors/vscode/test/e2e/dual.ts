// VS Code and Neovim on one daemon (docs/editors.md, "One daemon per repository"): code-server with
// the packaged .vsix launches a one-story epic (flowd's scripted agent, `flowd.pauseOnMerge` on) and
// shows it waiting for the merge's approval; a headless Neovim 0.11 with editors/nvim joins the
// same daemon and shows the same run asking; the VS Code window is reloaded and shows it again
// while Neovim keeps answering; Neovim is restarted, shows it again and approves it, and VS Code
// (untouched) shows the run done. One daemon process serves both throughout: `flowd daemon status`
// counts both sessions under one pid, and it is the only daemon process for the repository.
// Neovim's half is tests/nvim/dual.lua (its harness, tests/nvim/harness.lua). Run by
// scripts/e2e.sh (`make test-e2e`); FLOWD_NVIM is the Neovim binary (editors/nvim/scripts/ensure-nvim.sh).

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { after, before, describe, test } from "node:test";
import { git, launchEpic, makeLoginRepo, need, openVsCode, Session, shot, start, Started, statusText, STEP_MS, stop, toast, treeRow, until } from "./harness";

const FLOWD_BIN = need("FLOWD_BIN");
const FLOWD_NVIM = need("FLOWD_NVIM");
const SHOTS = path.join(need("SHOTS"), "dual");
const ROOT = path.resolve(__dirname, "..", "..", "..", "..");

const SCRIPT = {
  model: "scripted",
  rules: [
    { when: { role: "planner", story: "api" }, reply: JSON.stringify({ tasks: [{ title: "Login handler", description: "Write login(). Satisfies: 1" }] }) },
    { when: { role: "coder", story: "api" }, writes: { "src/api/login.py": "def login(password: str) -> bool:\n    return bool(password)\n" }, reply: "Done." },
    { when: { role: "reviewer" }, reply: JSON.stringify({ issues: [], summary: "Looks right." }) },
  ],
};

interface DaemonStatus {
  pid: number;
  sessions: number;
  runs: number;
}

/** The pids of the processes whose argv `matches` (read from /proc). */
function pidsOf(matches: (argv: string[]) => boolean): number[] {
  const pids: number[] = [];
  for (const name of fs.readdirSync("/proc").filter((n) => /^\d+$/.test(n))) {
    try {
      if (matches(fs.readFileSync(`/proc/${name}/cmdline`, "utf8").split("\0"))) pids.push(Number(name));
    } catch {
      // gone meanwhile
    }
  }
  return pids.sort((a, b) => a - b);
}

/** Every `flowd.server.daemon` process serving `repo`. */
function daemonPids(repo: string): number[] {
  return pidsOf((argv) => {
    const at = argv.indexOf("flowd.server.daemon");
    return at > 0 && argv[at - 1] === "-m" && argv[at + 1] === repo;
  });
}

/** Every `flowd serve` forwarder this test's editors started (their environment is the test's:
 * `mark`, its scripted agents' state directory), each one session of the daemon. */
function forwarderPids(mark: string): number[] {
  return pidsOf((argv) => argv.includes(FLOWD_BIN) && argv[argv.indexOf(FLOWD_BIN) + 1] === "serve").filter((pid) => {
    try {
      return fs.readFileSync(`/proc/${pid}/environ`, "utf8").split("\0").includes(mark);
    } catch {
      return false; // gone meanwhile
    }
  });
}

describe("VS Code and Neovim on one daemon (code-server + headless Neovim)", { timeout: 900_000 }, () => {
  let tmp: string;
  let repo: string;
  let env: NodeJS.ProcessEnv;
  let session: Session | undefined;
  const neovims: Started[] = [];

  before(async () => {
    tmp = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), "flowd-e2e-dual-")));
    fs.rmSync(SHOTS, { recursive: true, force: true });
    fs.mkdirSync(SHOTS, { recursive: true });
    repo = makeLoginRepo(tmp, SCRIPT);
    const home = path.join(tmp, "home");
    fs.mkdirSync(home);
    env = { ...process.env, HOME: home, XDG_CONFIG_HOME: path.join(home, ".config"), XDG_DATA_HOME: path.join(home, ".local", "share"), FLOWD_SCRIPT_STATE: path.join(home, "script-state") };
    session = await openVsCode(tmp, repo, { "flowd.path": FLOWD_BIN, "flowd.pauseOnMerge": true }, env);
  });

  after(async () => {
    for (const nvim of neovims) await stop(nvim);
    await session?.close();
    if (repo) {
      try {
        const status = JSON.parse(flowd(["status", "--json"])) as { runs?: { runId: string; status: string }[] };
        for (const r of status.runs ?? []) if (!["done", "failed", "cancelled", "halted"].includes(r.status)) flowd(["cancel", r.runId]);
      } catch {
        // nothing to cancel
      }
      try {
        flowd(["daemon", "stop"]);
      } catch {
        // none runs
      }
      // The daemon is this test's too: gone before the temp dir is.
      for (const pid of daemonPids(repo)) {
        try {
          process.kill(pid, "SIGKILL");
        } catch {
          // already gone
        }
      }
    }
    if (process.env.E2E_KEEP === "1") process.stderr.write(`e2e: kept ${tmp}\n`);
    else if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
  });

  function flowd(args: string[]): string {
    return execFileSync(FLOWD_BIN, args, { cwd: repo, encoding: "utf8", env });
  }

  function daemon(): DaemonStatus {
    return JSON.parse(flowd(["daemon", "status", "--json"])) as DaemonStatus;
  }

  /** Polls `flowd daemon status` until it counts `sessions` sessions. */
  async function sessionsReach(sessions: number, what: string): Promise<DaemonStatus> {
    const deadline = Date.now() + STEP_MS;
    for (;;) {
      const status = daemon();
      if (status.sessions === sessions) return status;
      if (Date.now() > deadline) throw new Error(`${what}: the daemon counts ${status.sessions} session(s), not ${sessions}`);
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
  }

  /** Headless Neovim running tests/nvim/dual.lua in `phase`; its record is `<out>`. */
  function neovim(phase: string): { started: Started; out: string } {
    const home = path.join(tmp, `nvim-${phase}`);
    const out = path.join(tmp, `nvim-${phase}.json`);
    const started = start(FLOWD_NVIM, ["--headless", "--clean", "-l", path.join(ROOT, "tests", "nvim", "dual.lua")], {
      ...env,
      XDG_CONFIG_HOME: path.join(home, "config"),
      XDG_DATA_HOME: path.join(home, "data"),
      XDG_STATE_HOME: path.join(home, "state"),
      PLUGIN_DIR: path.join(ROOT, "editors", "nvim"),
      HARNESS_DIR: path.join(ROOT, "tests", "nvim"),
      FLOWD_CMD: JSON.stringify([FLOWD_BIN, "serve"]),
      OUT_JSON: out,
      REPO: repo,
      PHASE: phase,
    });
    neovims.push(started);
    return { started, out };
  }

  async function fileAppears(file: string, started: Started, what: string): Promise<Record<string, unknown>> {
    const deadline = Date.now() + STEP_MS;
    while (!fs.existsSync(file)) {
      if (started.proc.exitCode !== null || Date.now() > deadline) {
        throw new Error(`${what}: never came (Neovim ${started.proc.exitCode === null ? "still runs" : `exited ${started.proc.exitCode}`})\n${started.output.join("").slice(-3000)}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    return JSON.parse(fs.readFileSync(file, "utf8")) as Record<string, unknown>;
  }

  /** Neovim's record once it has quit: what it saw, no errors, exit 0. */
  async function finished(nvim: { started: Started; out: string }): Promise<Record<string, unknown>> {
    const code = nvim.started.proc.exitCode ?? (await new Promise<number | null>((resolve) => nvim.started.proc.once("exit", resolve)));
    assert.ok(fs.existsSync(nvim.out), `Neovim wrote nothing (exit ${code}):\n${nvim.started.output.join("").slice(-3000)}`);
    const record = JSON.parse(fs.readFileSync(nvim.out, "utf8")) as Record<string, unknown>;
    assert.deepEqual(record.errors, [], `Neovim: ${JSON.stringify(record.errors)}; steps ${JSON.stringify(record.steps)}`);
    assert.equal(code, 0);
    return record;
  }

  const apiReady = async (page: Session["page"]): Promise<boolean> => /ready/.test((await treeRow(page, /api — Login API/).textContent()) ?? "");

  test("both editors show the run live on one daemon; each re-attaches after a reload", async () => {
    let page = session!.page;
    try {
      // VS Code starts the daemon and launches the run, which waits for its merge's approval.
      await launchEpic(page, SHOTS, "login.epic.json");
      await toast(page, /Story api is ready to merge with 1 task/).waitFor({ timeout: STEP_MS });
      await until(page, SHOTS, "the api lane to read ready in VS Code", () => apiReady(page));
      await shot(page, SHOTS, "01-vscode-ready");
      const [run] = (JSON.parse(flowd(["status", "--json"])) as { runs: { runId: string; status: string }[] }).runs;
      const first = await sessionsReach(1, "VS Code alone");

      // Neovim joins the same daemon and shows the same run asking.
      const watcher = neovim("watch");
      const seen = await fileAppears(`${watcher.out}.attached`, watcher.started, "Neovim showing the run");
      assert.deepEqual(seen, { runId: run.runId, lane: "api", status: "ready" });
      const both = await sessionsReach(2, "VS Code and Neovim");
      assert.equal(both.pid, first.pid);
      const forwarders = forwarderPids(`FLOWD_SCRIPT_STATE=${env.FLOWD_SCRIPT_STATE}`);
      assert.equal(forwarders.length, 2, `two editors' forwarders, not ${forwarders.join(", ")}`);

      // The VS Code window reloads: it re-attaches to that daemon and shows the run again.
      await page.reload();
      page = session!.page;
      await page.locator(".monaco-workbench").waitFor({ timeout: STEP_MS });
      await until(page, SHOTS, "the api lane to read ready after the reload", () => apiReady(page));
      await shot(page, SHOTS, "02-vscode-reloaded");
      assert.equal((await sessionsReach(2, "after VS Code's reload")).pid, first.pid);
      // VS Code's forwarder is a new one (its window's session re-attached); Neovim's is the same.
      const reloaded = forwarderPids(`FLOWD_SCRIPT_STATE=${env.FLOWD_SCRIPT_STATE}`);
      assert.equal(reloaded.length, 2, `two editors' forwarders, not ${reloaded.join(", ")}`);
      assert.equal(reloaded.filter((pid) => forwarders.includes(pid)).length, 1);

      // Neovim kept its session through it and still answers on it.
      fs.writeFileSync(`${watcher.out}.go`, "");
      const watched = await finished(watcher);
      assert.equal(watched.same_client, true);
      assert.deepEqual(watched.still, seen);
      assert.deepEqual(
        (watched.status_runs as { runId: string }[]).map((r) => r.runId),
        [run.runId],
      );

      // Neovim restarted: it shows the same run asking, and approves it; VS Code, untouched, sees it end.
      await sessionsReach(1, "Neovim gone");
      const approver = neovim("approve");
      const approved = await finished(approver);
      assert.deepEqual(approved.seen, seen);
      assert.match(String(approved.approved), /merges next/);
      assert.match(String(approved.done), /epic login done/);
      assert.equal(approved.lane_after, "done");
      await until(page, SHOTS, "VS Code to show the epic done", async () => /login done/.test(await statusText(page)));
      await shot(page, SHOTS, "03-vscode-done");
      assert.equal(git(repo, "show", "epic/login:src/api/login.py"), "def login(password: str) -> bool:\n    return bool(password)\n");

      // One daemon served both, from the start to the end.
      assert.equal(daemon().pid, first.pid);
      assert.deepEqual(daemonPids(repo), [first.pid]);
    } catch (err) {
      await shot(page, SHOTS, "failed").catch(() => undefined);
      throw err;
    }
  });
});

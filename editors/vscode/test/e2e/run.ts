// End to end in a real VS Code: code-server with the packaged .vsix installed, driven in
// Debian's chromium over CDP (playwright-core, no browser download), on a real git repository
// with flowd's scripted agent (the only stand-in, at the model boundary) and the real
// `flowd serve` (FLOWD_BIN). Launch → live tree and status bar → Problems → cost → cancel →
// resume, a screenshot at each step. Run by scripts/e2e.sh (`make test-e2e`).
//
// Env: CODE_SERVER_ENTRY (code-server's out/node/entry.js), FLOWD_BIN, VSIX, SHOTS (screenshot
// directory), CHROMIUM (default /usr/bin/chromium), E2E_KEEP=1 keeps the temp dir.

import assert from "node:assert/strict";
import { ChildProcess, execFileSync, spawn } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { after, before, describe, test } from "node:test";
import { Browser, chromium, Frame, Locator, Page } from "playwright-core";

const ENTRY = need("CODE_SERVER_ENTRY");
const FLOWD_BIN = need("FLOWD_BIN");
const VSIX = need("VSIX");
const SHOTS = need("SHOTS");
const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";
// Generous guards for a loaded 2-core machine; a step that never happens fails with what the page shows.
const STEP_MS = 90_000;

function need(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`e2e: ${name} is not set (run it through scripts/e2e.sh, or make test-e2e)`);
  return value;
}

// ----------------------------------------------------------------------- the repository ---

const usage = (input: number, output: number, costUsd: number) => ({ input, output, cachedRead: 0, cacheWrite: 0, costUsd });
const tasks = (...titles: string[]) => JSON.stringify({ tasks: titles.map((t) => ({ title: t, description: `${t}. Satisfies: 1` })) });
const clean = JSON.stringify({ issues: [], summary: "Looks right." });

const PLAN = {
  epicId: "auth",
  epic: "Add password login",
  stories: [
    { id: "api", title: "Login API", description: "POST /login.", owned: ["src/api/"], acceptance: ["login() exists"] },
    { id: "ui", title: "Login page", description: "A form.", owned: ["src/ui/"], acceptance: ["page() exists"] },
  ],
};

const SCRIPT = {
  model: "scripted",
  rules: [
    { when: { role: "planner", story: "api" }, reply: tasks("Login handler"), usage: usage(900, 150, 0.003) },
    { when: { role: "planner", story: "ui" }, reply: tasks("Login form"), usage: usage(800, 100, 0.002) },
    // The first run's api coder takes (practically) forever: the test looks at the live tree,
    // Problems and the cost, then cancels it mid-task. Before resuming, the test makes it quick
    // (`quickCoder`): a resumed run's agents read the script afresh.
    { when: { role: "coder", story: "api" }, delayMs: 600_000, writes: { "src/api/login.py": "def login() -> bool:\n    return True\n" }, reply: "Handler done.", usage: usage(3100, 380, 0.015) },
    { when: { role: "coder", story: "ui" }, delayMs: 500, writes: { "src/ui/page.py": "def page() -> str:\n    return '<form></form>'\n" }, reply: "Form done.", usage: usage(2600, 300, 0.012) },
    { when: { role: "reviewer" }, reply: clean, usage: usage(1500, 120, 0.006) },
    { when: { role: "judge" }, reply: clean, usage: usage(2000, 150, 0.008) },
  ],
};

/** The script with the api coder answering at once (the resumed run's). */
function quickCoder(): { model: string; rules: object[] } {
  return { ...SCRIPT, rules: SCRIPT.rules.map((r) => (r.when.role === "coder" && r.when.story === "api" ? { ...r, delayMs: 300 } : r)) };
}

const ROSTER = `[[executors]]
id = "demo"
kind = "script"
script = "demo.script.json"
roles = ["planner", "coder", "reviewer", "judge"]
slots = 3
coderSlots = 2
`;

function git(cwd: string, ...args: string[]): string {
  return execFileSync("git", ["-c", "user.name=flowd e2e", "-c", "user.email=e2e@flowd.invalid", ...args], { cwd, encoding: "utf8" });
}

function makeRepo(base: string): string {
  const repo = path.join(base, "app");
  fs.mkdirSync(path.join(repo, "src", "api"), { recursive: true });
  fs.mkdirSync(path.join(repo, "src", "ui"), { recursive: true });
  fs.writeFileSync(path.join(repo, "README.md"), "# app\n");
  fs.writeFileSync(path.join(repo, "src", "api", "__init__.py"), "");
  fs.writeFileSync(path.join(repo, "src", "ui", "__init__.py"), "");
  fs.writeFileSync(path.join(repo, "auth.epic.json"), JSON.stringify(PLAN, null, 2) + "\n");
  git(repo, "init", "-q", "-b", "main");
  git(repo, "add", "-A");
  git(repo, "commit", "-q", "-m", "initial");
  fs.mkdirSync(path.join(repo, ".flow"));
  fs.writeFileSync(path.join(repo, ".flow", "roster.toml"), ROSTER);
  fs.writeFileSync(path.join(repo, ".flow", "demo.script.json"), JSON.stringify(SCRIPT, null, 2));
  fs.writeFileSync(path.join(repo, ".flow", "config.toml"), "concurrency = 2\njudgeRounds = 1\nmaxReviewRounds = 1\n");
  return repo;
}

// --------------------------------------------------------------------------- processes ---

interface Started {
  proc: ChildProcess;
  output: string[];
}

/** A process in its own group (killed with everything it started), its output kept. */
function start(command: string, args: string[], env: NodeJS.ProcessEnv): Started {
  const proc = spawn(command, args, { env, detached: true, stdio: ["ignore", "pipe", "pipe"] });
  const output: string[] = [];
  proc.stdout?.setEncoding("utf8").on("data", (d: string) => output.push(d));
  proc.stderr?.setEncoding("utf8").on("data", (d: string) => output.push(d));
  return { proc, output };
}

async function stop(started: Started | undefined): Promise<void> {
  if (!started?.proc.pid || started.proc.exitCode !== null) return;
  const exited = new Promise((resolve) => started.proc.once("exit", resolve));
  try {
    process.kill(-started.proc.pid, "SIGTERM");
  } catch {
    return;
  }
  const guard = setTimeout(() => {
    try {
      process.kill(-(started.proc.pid as number), "SIGKILL");
    } catch {
      // already gone
    }
  }, 5000);
  await exited;
  clearTimeout(guard);
}

/** Resolves with the first match of `pattern` in the process's output. */
function waitForOutput(started: Started, pattern: RegExp, what: string): Promise<RegExpMatchArray> {
  return new Promise((resolve, reject) => {
    const check = (): boolean => {
      const m = started.output.join("").match(pattern);
      if (m) {
        clearInterval(timer);
        clearTimeout(guard);
        resolve(m);
      }
      return Boolean(m);
    };
    const timer = setInterval(check, 100);
    const guard = setTimeout(() => {
      clearInterval(timer);
      reject(new Error(`${what} never came; output:\n${started.output.join("").slice(-3000)}`));
    }, STEP_MS);
    started.proc.once("exit", (code) => {
      if (!check()) {
        clearInterval(timer);
        clearTimeout(guard);
        reject(new Error(`${what}: the process exited (${code}); output:\n${started.output.join("").slice(-3000)}`));
      }
    });
  });
}

// ------------------------------------------------------------------------------ driving ---

async function shot(page: Page, name: string): Promise<void> {
  await page.screenshot({ path: path.join(SHOTS, `${name}.png`) });
}

async function runCommand(page: Page, title: string): Promise<void> {
  await page.keyboard.press("F1");
  const input = page.locator(".quick-input-widget input");
  await input.waitFor({ state: "visible", timeout: STEP_MS });
  await input.fill(`>${title}`);
  const row = page.locator(".quick-input-list .monaco-list-row", { hasText: title }).first();
  await row.waitFor({ timeout: STEP_MS });
  await row.click();
}

/** Picks the quick-pick row holding `text` (the palette or a command's own pick). */
async function pick(page: Page, text: string | RegExp): Promise<void> {
  const row = page.locator(".quick-input-list .monaco-list-row", { hasText: text }).first();
  await row.waitFor({ timeout: STEP_MS });
  await row.click();
}

function statusItem(page: Page): Locator {
  return page.locator("#workbench\\.parts\\.statusbar .statusbar-item", { hasText: /lanes|auth|flowd/ }).first();
}

async function statusText(page: Page): Promise<string> {
  return ((await statusItem(page).textContent()) ?? "").trim();
}

/** Waits until `ready` holds of the page, re-checking; fails with the status bar and a screenshot. */
async function until(page: Page, what: string, ready: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + STEP_MS;
  for (;;) {
    if (await ready().catch(() => false)) return;
    if (Date.now() > deadline) {
      await shot(page, `failed-${what.replace(/\W+/g, "-")}`).catch(() => undefined);
      throw new Error(`${what}: never happened; the status bar reads ${JSON.stringify(await statusText(page).catch(() => "?"))}`);
    }
    await page.waitForTimeout(250);
  }
}

function treeRow(page: Page, name: RegExp): Locator {
  return page.locator(".monaco-list-row[role=treeitem]", { hasText: name }).first();
}

/** The Epic Graph webview's frame (the one drawing nodes), if open. */
async function graphFrame(page: Page): Promise<Frame | undefined> {
  for (const frame of page.frames()) {
    if ((await frame.locator("#panel-graph").count().catch(() => 0)) > 0) return frame;
  }
  return undefined;
}

/** The nodes' statuses as drawn, and flow/graph's as the page received them. */
async function graphState(frame: Frame): Promise<{ drawn: Record<string, string>; server: Record<string, string> }> {
  const drawn = await frame.locator("g.node").evaluateAll((els) => Object.fromEntries(els.map((e) => [e.getAttribute("data-story") ?? "", e.getAttribute("data-status") ?? ""])));
  const server = JSON.parse((await frame.locator("body").getAttribute("data-graph")) ?? "{}") as Record<string, string>;
  return { drawn, server };
}

/**
 * The Markdown preview's frame where Mermaid (the extension's `markdown.previewScripts`) drew
 * every block of report.md, the graph and the timeline, as SVGs in `theme` (none failed).
 */
async function mermaidPreview(page: Page, theme: "default" | "dark"): Promise<Frame> {
  let found: Frame | undefined;
  await until(page, `the report preview's Mermaid SVGs (${theme})`, async () => {
    for (const frame of page.frames()) {
      if (frame === page.mainFrame()) continue;
      const count = await frame.locator("div.flowd-mermaid").count().catch(() => 0);
      if (count < 2) continue;
      const failed = frame.locator("div.flowd-mermaid[data-error]");
      if ((await failed.count()) > 0) throw new Error(`Mermaid could not draw a block: ${await failed.first().textContent()}`);
      if ((await frame.locator(`div.flowd-mermaid[data-theme='${theme}'] > svg`).count()) !== count) continue;
      const kinds = await frame.locator("div.flowd-mermaid > svg").evaluateAll((els) => els.map((e) => e.getAttribute("aria-roledescription") ?? ""));
      if (!kinds.some((k) => k.startsWith("flowchart")) || !kinds.includes("gantt")) continue;
      // The graph's nodes are the plan's stories, as text Mermaid laid out.
      const labels = (await frame.locator("div.flowd-mermaid > svg .node").allTextContents()).join(" ");
      if (!/api/.test(labels) || !/ui/.test(labels)) continue;
      // The pictures sit below the report's tables: bring the graph into view for the shot.
      await frame.locator("div.flowd-mermaid").first().scrollIntoViewIfNeeded();
      found = frame;
      return true;
    }
    return false;
  });
  return found as Frame;
}

/**
 * Opens (or reveals) the Epic Graph and waits until it draws `want` (story → status), the drawn
 * statuses being flow/graph's and the Lanes view's (flow/lane) for each story.
 */
async function graphShows(page: Page, want: Record<string, RegExp>): Promise<Frame> {
  await runCommand(page, "Flow: Show Epic Graph");
  let found: Frame | undefined;
  await until(page, `the epic graph to show ${JSON.stringify(Object.fromEntries(Object.entries(want).map(([k, v]) => [k, v.source])))}`, async () => {
    found = await graphFrame(page);
    if (!found) return false;
    const { drawn, server } = await graphState(found);
    if (JSON.stringify(drawn) !== JSON.stringify(server)) return false;
    for (const [story, status] of Object.entries(want)) if (!status.test(drawn[story] ?? "")) return false;
    for (const [story, status] of Object.entries(drawn)) {
      const row = (await treeRow(page, new RegExp(`${story} — `)).textContent()) ?? "";
      if (!row.includes(status)) return false;
    }
    return true;
  });
  return found as Frame;
}

// -------------------------------------------------------------------------------- test ---

describe("VS Code (code-server) with the packaged extension", { timeout: 900_000 }, () => {
  let tmp: string;
  let repo: string;
  let server: Started | undefined;
  let browserProc: Started | undefined;
  let browser: Browser | undefined;
  let page: Page;

  before(async () => {
    tmp = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), "flowd-e2e-")));
    fs.rmSync(SHOTS, { recursive: true, force: true }); // no stale shots from an earlier run
    fs.mkdirSync(SHOTS, { recursive: true });
    repo = makeRepo(tmp);
    const home = path.join(tmp, "home");
    const userData = path.join(tmp, "code-user");
    const extensions = path.join(tmp, "code-extensions");
    fs.mkdirSync(path.join(userData, "User"), { recursive: true });
    fs.writeFileSync(
      path.join(userData, "User", "settings.json"),
      JSON.stringify({
        "flowd.path": FLOWD_BIN,
        "workbench.startupEditor": "none",
        "workbench.tips.enabled": false,
        "workbench.enableExperiments": false,
        "telemetry.telemetryLevel": "off",
        "update.mode": "none",
        "extensions.autoCheckUpdates": false,
        "extensions.autoUpdate": false,
        "security.workspace.trust.enabled": false,
        "git.enabled": false,
        "files.autoSave": "off",
      }),
    );
    // The user's own flowd roster and code-server config stay out of it.
    const env = { ...process.env, HOME: home, XDG_CONFIG_HOME: path.join(home, ".config"), XDG_DATA_HOME: path.join(home, ".local", "share"), FLOWD_SCRIPT_STATE: path.join(home, "script-state") };
    fs.mkdirSync(home);
    const common = ["--user-data-dir", userData, "--extensions-dir", extensions];
    execFileSync(process.execPath, [ENTRY, ...common, "--install-extension", VSIX], { env, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
    assert.ok(fs.readdirSync(extensions).some((d) => d.startsWith("flowd.flowd-")), `the .vsix did not install into ${extensions}`);

    server = start(process.execPath, [ENTRY, ...common, "--bind-addr", "127.0.0.1:0", "--auth", "none", "--disable-telemetry", "--disable-update-check", "--disable-workspace-trust", "--disable-getting-started-override", repo], env);
    const [, url] = await waitForOutput(server, /HTTP server listening on (http:\/\/127\.0\.0\.1:\d+)\//, "code-server's address");

    const profile = path.join(tmp, "chromium-profile");
    browserProc = start(
      CHROMIUM,
      ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-breakpad", "--disable-crash-reporter", `--user-data-dir=${profile}`, "--remote-debugging-port=0", "--window-size=1600,1000", "about:blank"],
      env,
    );
    const [, ws] = await waitForOutput(browserProc, /DevTools listening on (ws:\/\/\S+)/, "chromium's DevTools endpoint");
    browser = await chromium.connectOverCDP(ws);
    const context = browser.contexts()[0] ?? (await browser.newContext());
    page = await context.newPage();
    await page.setViewportSize({ width: 1600, height: 1000 });
    await page.goto(`${url}/?folder=${encodeURIComponent(repo)}`);
    await page.locator(".monaco-workbench").waitFor({ timeout: STEP_MS });
  });

  after(async () => {
    await browser?.close().catch(() => undefined);
    await stop(browserProc);
    await stop(server);
    // The run's own detached `flowd run` processes end with the cancel/resume below; a failed
    // test may leave one: cancel whatever is still going, through flowd itself.
    if (repo) {
      try {
        const status = JSON.parse(execFileSync(FLOWD_BIN, ["status", "--json"], { cwd: repo, encoding: "utf8" })) as { runs?: { runId: string; status: string }[] };
        for (const r of status.runs ?? []) if (!["done", "failed", "cancelled", "halted"].includes(r.status)) execFileSync(FLOWD_BIN, ["cancel", r.runId], { cwd: repo });
      } catch {
        // nothing to cancel
      }
    }
    if (process.env.E2E_KEEP === "1") process.stderr.write(`e2e: kept ${tmp}\n`);
    else if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
  });

  test("launch → live tree and status bar → Problems → cost → cancel → resume", async () => {
    try {
      await journey();
    } catch (err) {
      await shot(page, "failed").catch(() => undefined);
      throw err;
    }
  });

  async function journey(): Promise<void> {
    // The extension activated (the repo has .flow/) and its server is up: the idle status item.
    await until(page, "the flowd status bar item", async () => (await statusText(page)) === "flowd");
    await shot(page, "01-idle");

    // Launch: the palette, the plan, the concurrency prompt (left empty).
    await runCommand(page, "Flow: Launch Epic");
    await pick(page, "auth.epic.json");
    await page.locator(".quick-input-widget input").waitFor({ state: "visible", timeout: STEP_MS });
    await page.keyboard.press("Enter");

    // Live: the Lanes view shows the epic and both lanes; the status bar counts running lanes.
    await until(page, "the status bar to show running lanes", async () => /\d\/2 lanes/.test(await statusText(page)));
    await treeRow(page, /^auth/).waitFor({ timeout: STEP_MS });
    await treeRow(page, /api — Login API/).waitFor({ timeout: STEP_MS });
    await treeRow(page, /ui — Login page/).waitFor({ timeout: STEP_MS });
    await until(page, "the api lane to be active on its task", async () => /active/.test((await treeRow(page, /api — Login API/).textContent()) ?? ""));
    // The epic's row is repainted with its lanes: it counts as many running as the status bar.
    await until(page, "the epic row to count the running lanes", async () => {
      const running = /(\d)\/2 lanes/.exec(await statusText(page))?.[1];
      const row = (await treeRow(page, /^auth/).textContent()) ?? "";
      return running !== undefined && row.includes(`${running} running`);
    });
    await shot(page, "02-running");

    // The Epic Graph beside the editor, at launch: api running, drawn as flow/graph and the Lanes view say.
    const atLaunch = await graphShows(page, { api: /active/, ui: /./ });
    assert.equal(await atLaunch.locator("g.node[tabindex='0']").count(), 2);
    assert.equal(await atLaunch.locator("g.node.critical").count() >= 1, true, "a critical path is marked");
    await shot(page, "graph-1-launch");

    // Problems: typing in the checkout in a path the running api story owns.
    await runCommand(page, "Go to File...");
    await page.locator(".quick-input-widget input").fill("src/api/__init__.py");
    await pick(page, "__init__.py");
    const editor = page.locator(".monaco-editor .view-lines").first();
    await editor.waitFor({ timeout: STEP_MS });
    await editor.click();
    await page.keyboard.type("# mine\n");
    await runCommand(page, "View: Focus Problems");
    const problem = page.locator(".markers-panel .monaco-list-row", { hasText: /api/ }).first();
    await problem.waitFor({ timeout: STEP_MS });
    const problemText = (await page.locator(".markers-panel").textContent()) ?? "";
    assert.match(problemText, /perimeter\.ownedByRunningStory|running story/i, problemText);
    await shot(page, "03-problems");

    // Cost: once the run has spent something, the report as a Markdown preview; `[prices.<model>]` survives.
    await until(page, "the status bar to show the cost", async () => /\$\d/.test(await statusText(page)));
    await runCommand(page, "Flow: Show Cost Report");
    await until(page, "the cost report preview", async () => {
      for (const frame of page.frames()) {
        const text = await frame.locator("body").textContent({ timeout: 1000 }).catch(() => "");
        if (text && text.includes("[prices.<model>]")) return true;
      }
      return false;
    });
    await shot(page, "04-cost");

    // Mid-run: ui merged, api still coding; the timeline tab draws both lanes.
    const mid = await graphShows(page, { api: /active/, ui: /done/ });
    await shot(page, "graph-2-mid");
    await mid.locator("#tab-timeline").click();
    await until(page, "the timeline tab", async () => (await mid.locator("#panel-timeline rect.phase").count()) > 0 && (await mid.locator("#panel-graph").isHidden()));
    assert.deepEqual(
      [...new Set(await mid.locator("#panel-timeline text.lane").allTextContents())].sort(),
      ["api", "ui"],
    );
    await shot(page, "graph-2-mid-timeline");
    await mid.locator("#tab-graph").click();

    // Cancel the run (the api coder is still on its task).
    await runCommand(page, "Flow: Cancel Run");
    await pick(page, /auth/);
    await until(page, "the status bar to say cancelled", async () => /auth cancelled/.test(await statusText(page)));
    await shot(page, "05-cancelled");
    fs.writeFileSync(path.join(repo, ".flow", "demo.script.json"), JSON.stringify(quickCoder(), null, 2));

    // Resume: one epic, the cancelled run its history; the run ends with a notice and Open Report.
    await runCommand(page, "Flow: Resume Run");
    await pick(page, /auth/);
    await until(page, "the resumed run to run", async () => /lanes/.test(await statusText(page)));
    const history = treeRow(page, /^History/);
    await history.waitFor({ timeout: STEP_MS });
    await shot(page, "06-resumed");
    const notice = page.locator(".notification-toast", { hasText: /epic auth done/ }).first();
    await notice.waitFor({ timeout: STEP_MS });
    assert.match(await statusText(page), /auth done · \$0\.\d\d/);
    assert.equal(await page.locator(".monaco-list-row[role=treeitem]", { hasText: /^auth/ }).count(), 1, "the epic is listed once");
    await shot(page, "07-done");
    await notice.locator(".monaco-button", { hasText: "Open Report" }).click();
    await until(page, "the epic report preview", async () => {
      for (const frame of page.frames()) {
        const text = await frame.locator("body").textContent({ timeout: 1000 }).catch(() => "");
        if (text && /api/.test(text) && /ui/.test(text) && /done/.test(text) && frame !== page.mainFrame()) return true;
      }
      return false;
    });
    // VS Code's preview does not draw Mermaid: the extension's preview script does, as SVGs.
    await mermaidPreview(page, "default");
    await shot(page, "08-report");

    // The end: the resumed run's graph, every story done, in the light theme and then the dark one.
    const end = await graphShows(page, { api: /done/, ui: /done/ });
    await end.locator("g.node").first().press("ArrowDown");
    assert.equal(await end.evaluate(() => document.activeElement?.getAttribute("data-story") ?? ""), "ui", "arrow keys move between nodes");
    await shot(page, "graph-3-end");
    await runCommand(page, "Preferences: Color Theme");
    await pick(page, /Dark Modern/);
    await until(page, "the dark theme", async () => (await page.locator(".monaco-workbench.vs-dark").count()) > 0);
    const dark = await graphShows(page, { api: /done/, ui: /done/ });
    await until(page, "the webview to follow the theme", async () => (await dark.locator("body.vscode-dark").count()) > 0);
    await shot(page, "graph-3-end-dark");
    // Back on the report's preview: its pictures are drawn again in Mermaid's dark palette.
    await page.locator(".tabs-container .tab", { hasText: "Preview report.md" }).first().click();
    await mermaidPreview(page, "dark");
    await shot(page, "09-report-dark");
  }
});

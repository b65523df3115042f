// End to end in a real VS Code: code-server with the packaged .vsix installed, driven in
// Debian's chromium over CDP (playwright-core, no browser download), on a real git repository
// with flowd's scripted agent (the only stand-in, at the model boundary) and the real
// `flowd serve` (FLOWD_BIN). Launch → live tree and status bar → Problems → cost → cancel →
// resume → a red merge revised → done, a screenshot at each step; the Epic Graph at launch,
// mid-run, while the red merge is revised and at the end, each in the light and the dark theme.
// Run by scripts/e2e.sh (`make test-e2e`).
//
// Env: CODE_SERVER_ENTRY (code-server's out/node/entry.js), FLOWD_BIN, VSIX, SHOTS (screenshot
// directory), CHROMIUM (default /usr/bin/chromium), E2E_KEEP=1 keeps the temp dir.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { after, before, describe, test } from "node:test";
import { Frame, Page } from "playwright-core";
import * as h from "./harness";
import { git, need, pick, runCommand, Session, statusText, STEP_MS, treeRow } from "./harness";

const FLOWD_BIN = need("FLOWD_BIN");
const SHOTS = need("SHOTS");

const shot = (page: Page, name: string): Promise<void> => h.shot(page, SHOTS, name);
const until = (page: Page, what: string, ready: () => Promise<boolean>): Promise<void> => h.until(page, SHOTS, what, ready);

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

// The epic gate: green on every merge but api's first (src/api/login.py without FIXED), which goes
// back to its coder as a merge revision; story gates (in the story's own worktree) always pass.
const EPIC_GATE =
  `sh -c 'test "$(basename "$(pwd)")" != _epic || test ! -f src/api/login.py || grep -q FIXED src/api/login.py ` +
  `|| { echo "epic check: src/api/login.py not FIXED"; exit 1; }'`;

/**
 * The scripted agents' rules. The first run's api coder takes (practically) forever
 * (`apiDelayMs`): the test looks at the live tree, Problems and the cost, then cancels it
 * mid-task; the resumed run's agents read the script afresh, with a quick api coder. The api
 * merge revision's coder writes its fix, then waits for `release` (a file the test writes once
 * it has looked at the graph while the red merge is being revised).
 */
function script(release: string, apiDelayMs: number): { model: string; rules: object[] } {
  const login = "def login() -> bool:\n    return True\n";
  return {
    model: "scripted",
    rules: [
      { when: { role: "planner", story: "api" }, reply: tasks("Login handler"), usage: usage(900, 150, 0.003) },
      { when: { role: "planner", story: "ui" }, reply: tasks("Login form"), usage: usage(800, 100, 0.002) },
      {
        when: { role: "coder", story: "api", prompt: "epic check: src/api/login\\.py not FIXED" },
        writes: { "src/api/login.py": `# FIXED: the epic check\n${login}` },
        run: [`sh -c 'while [ ! -e "${release}" ]; do sleep 0.2; done'`],
        reply: "Fixed the epic check.",
        usage: usage(1200, 90, 0.004),
      },
      { when: { role: "coder", story: "api" }, delayMs: apiDelayMs, writes: { "src/api/login.py": login }, reply: "Handler done.", usage: usage(3100, 380, 0.015) },
      { when: { role: "coder", story: "ui" }, delayMs: 500, writes: { "src/ui/page.py": "def page() -> str:\n    return '<form></form>'\n" }, reply: "Form done.", usage: usage(2600, 300, 0.012) },
      { when: { role: "reviewer" }, reply: clean, usage: usage(1500, 120, 0.006) },
      { when: { role: "judge" }, reply: clean, usage: usage(2000, 150, 0.008) },
    ],
  };
}

const ROSTER = `[[executors]]
id = "demo"
kind = "script"
script = "demo.script.json"
roles = ["planner", "coder", "reviewer", "judge"]
slots = 3
coderSlots = 2
`;

function makeRepo(base: string, release: string): string {
  const files = { "README.md": "# app\n", "src/api/__init__.py": "", "src/ui/__init__.py": "", "auth.epic.json": JSON.stringify(PLAN, null, 2) + "\n" };
  return h.makeRepo(base, files, {
    "roster.toml": ROSTER,
    "demo.script.json": JSON.stringify(script(release, 600_000), null, 2),
    // A JSON string is a TOML basic string.
    "config.toml": `concurrency = 2\njudgeRounds = 1\nmaxReviewRounds = 1\ngates = [${JSON.stringify(EPIC_GATE)}]\n`,
  });
}

// ------------------------------------------------------------------------------ driving ---

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

/** Switches the workbench's colour theme and waits until the Epic Graph's webview follows it. */
async function colorTheme(page: Page, dark: boolean): Promise<void> {
  await h.runAndPick(page, "Preferences: Color Theme", dark ? /Dark Modern/ : /Light Modern/);
  await until(page, `the ${dark ? "dark" : "light"} theme`, async () => ((await page.locator(".monaco-workbench.vs-dark").count()) > 0) === dark);
  const frame = await graphFrame(page);
  if (frame) await until(page, "the webview to follow the theme", async () => ((await frame.locator("body.vscode-dark").count()) > 0) === dark);
}

/**
 * The Epic Graph shows `want` in the light theme (shot `name`) and in the dark one (shot
 * `name-dark`), then the workbench is light again. Returns the graph's frame.
 */
async function graphInBothThemes(page: Page, want: Record<string, RegExp>, name: string): Promise<Frame> {
  const frame = await graphShows(page, want);
  await shot(page, name);
  await colorTheme(page, true);
  await graphShows(page, want);
  await shot(page, `${name}-dark`);
  await colorTheme(page, false);
  return frame;
}

/** The timeline tab's phases of `lane`, in order (its bars' classes: coding, queued, …). */
async function phases(frame: Frame, lane: string): Promise<string[]> {
  return frame.locator(`#panel-timeline .phase[data-lane='${lane}']`).evaluateAll((els) => els.map((e) => (e.getAttribute("class") ?? "").split(" ").filter((c) => c && c !== "phase").join(" ")));
}

/** The width of `lane`'s last bar on the timeline tab, in the SVG's units. */
async function lastBarWidth(frame: Frame, lane: string): Promise<number> {
  return Number((await frame.locator(`#panel-timeline rect.phase[data-lane='${lane}']`).last().getAttribute("width")) ?? 0);
}

/** Shows the timeline tab once `ready` holds of it; `name` is its shot; back to the graph tab. */
async function timelineShot(page: Page, frame: Frame, name: string, ready: () => Promise<boolean>): Promise<void> {
  await frame.locator("#tab-timeline").click();
  await until(page, `the timeline tab (${name})`, async () => (await frame.locator("#panel-graph").isHidden()) && (await ready()));
  await shot(page, name);
  await frame.locator("#tab-graph").click();
}

// -------------------------------------------------------------------------------- test ---

describe("VS Code (code-server) with the packaged extension", { timeout: 900_000 }, () => {
  let tmp: string;
  let repo: string;
  let release: string;
  let session: Session | undefined;
  let page: Page;

  before(async () => {
    tmp = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), "flowd-e2e-")));
    fs.rmSync(SHOTS, { recursive: true, force: true }); // no stale shots from an earlier run
    fs.mkdirSync(SHOTS, { recursive: true });
    release = path.join(tmp, "release-api-fix");
    repo = makeRepo(tmp, release);
    const home = path.join(tmp, "home");
    fs.mkdirSync(home);
    // The user's own flowd roster and code-server config stay out of it.
    const env = { ...process.env, HOME: home, XDG_CONFIG_HOME: path.join(home, ".config"), XDG_DATA_HOME: path.join(home, ".local", "share"), FLOWD_SCRIPT_STATE: path.join(home, "script-state") };
    session = await h.openVsCode(tmp, repo, { "flowd.path": FLOWD_BIN }, env);
    page = session.page;
  });

  after(async () => {
    if (release) fs.writeFileSync(release, ""); // a waiting fix coder, if the test failed before releasing it
    await session?.close();
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

  test("launch → live tree and status bar → Problems → cost → cancel → resume → red merge revised → done", async () => {
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
    const atLaunch = await graphInBothThemes(page, { api: /active/, ui: /./ }, "graph-1-launch");
    assert.equal(await atLaunch.locator("g.node[tabindex='0']").count(), 2);
    assert.equal(await atLaunch.locator("g.node.critical").count() >= 1, true, "a critical path is marked");

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
    const mid = await graphInBothThemes(page, { api: /active/, ui: /done/ }, "graph-2-mid");
    await timelineShot(page, mid, "graph-2-mid-timeline", async () => (await phases(mid, "api")).length > 0 && (await phases(mid, "ui")).includes("merged"));
    assert.deepEqual([...new Set(await mid.locator("#panel-timeline text.lane").allTextContents())].sort(), ["api", "ui"]);

    // Cancel the run (the api coder is still on its task).
    await h.runAndPick(page, "Flow: Cancel Run", /auth/);
    await until(page, "the status bar to say cancelled", async () => /auth cancelled/.test(await statusText(page)));
    await shot(page, "05-cancelled");
    fs.writeFileSync(path.join(repo, ".flow", "demo.script.json"), JSON.stringify(script(release, 300), null, 2));

    // Resume: one epic, the cancelled run its history.
    await h.runAndPick(page, "Flow: Resume Run", /auth/);
    await until(page, "the resumed run to run", async () => /lanes/.test(await statusText(page)));
    const history = treeRow(page, /^History/);
    await history.waitFor({ timeout: STEP_MS });
    await shot(page, "06-resumed");

    // A red merge being revised: api's first merge turned the epic gate red, and it is back with
    // its coder (who waits for `release`). The timeline says queued/merging, then coding again.
    const red = await graphShows(page, { api: /./ });
    const revised = async (): Promise<boolean> => {
      const seen = await phases(red, "api");
      const merge = seen.findIndex((p) => p === "queued" || p === "merging");
      return merge >= 0 && seen.lastIndexOf("coding") > merge && seen[seen.length - 1] === "coding";
    };
    await red.locator("#tab-timeline").click();
    await until(page, "the timeline to show api coding again after its red merge", revised);
    await red.locator("#tab-graph").click();
    await graphInBothThemes(page, { api: /active/, ui: /done/ }, "graph-3-red-revised");
    // The timeline last, once the revision's coding bar (live, it grows to now) is wide enough to see.
    await timelineShot(page, red, "graph-3-red-revised-timeline", async () => (await revised()) && (await lastBarWidth(red, "api")) >= 24);
    fs.writeFileSync(release, "");

    // The run ends with a notice and Open Report.
    const notice = h.toast(page, /epic auth done/);
    await notice.waitFor({ timeout: STEP_MS });
    assert.match(await statusText(page), /auth done · \$0\.\d\d/);
    assert.equal(await page.locator(".monaco-list-row[role=treeitem]", { hasText: /^auth/ }).count(), 1, "the epic is listed once");
    assert.match(git(repo, "show", "epic/auth:src/api/login.py"), /^# FIXED/, "the merge revision's fix is what merged");
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
    await shot(page, "graph-4-end");
    await colorTheme(page, true);
    await graphShows(page, { api: /done/, ui: /done/ });
    await shot(page, "graph-4-end-dark");
    // Back on the report's preview: its pictures are drawn again in Mermaid's dark palette.
    await page.locator(".tabs-container .tab", { hasText: "Preview report.md" }).first().click();
    await mermaidPreview(page, "dark");
    await shot(page, "09-report-dark");
  }
});

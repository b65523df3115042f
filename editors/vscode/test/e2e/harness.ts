// What the real-editor journeys share (test/e2e/approve.ts): processes in their own group with
// their output kept, code-server with the packaged .vsix and chromium over CDP, and waiting on
// the page. Generous guards for a loaded 2-core machine; a step that never happens fails with a
// screenshot and what the status bar reads.

import assert from "node:assert/strict";
import { ChildProcess, execFileSync, spawn } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { Browser, chromium, Locator, Page } from "playwright-core";

export const STEP_MS = 90_000;

export function need(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`e2e: ${name} is not set (run it through scripts/e2e.sh, or make test-e2e)`);
  return value;
}

export function git(cwd: string, ...args: string[]): string {
  return execFileSync("git", ["-c", "user.name=flowd e2e", "-c", "user.email=e2e@flowd.invalid", ...args], { cwd, encoding: "utf8" });
}

export interface Started {
  proc: ChildProcess;
  output: string[];
}

/** A process in its own group (killed with everything it started), its output kept. */
export function start(command: string, args: string[], env: NodeJS.ProcessEnv): Started {
  const proc = spawn(command, args, { env, detached: true, stdio: ["ignore", "pipe", "pipe"] });
  const output: string[] = [];
  proc.stdout?.setEncoding("utf8").on("data", (d: string) => output.push(d));
  proc.stderr?.setEncoding("utf8").on("data", (d: string) => output.push(d));
  return { proc, output };
}

export async function stop(started: Started | undefined): Promise<void> {
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
export function waitForOutput(started: Started, pattern: RegExp, what: string): Promise<RegExpMatchArray> {
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

/** A VS Code session: code-server on `folder` with the .vsix installed, a chromium page on it. */
export interface Session {
  page: Page;
  close(): Promise<void>;
}

export async function openVsCode(tmp: string, folder: string, settings: Record<string, unknown>, env: NodeJS.ProcessEnv): Promise<Session> {
  const entry = need("CODE_SERVER_ENTRY");
  const userData = path.join(tmp, "code-user");
  const extensions = path.join(tmp, "code-extensions");
  fs.mkdirSync(path.join(userData, "User"), { recursive: true });
  const quiet = {
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
  };
  fs.writeFileSync(path.join(userData, "User", "settings.json"), JSON.stringify(quiet));
  // The journey's own settings go where a code-server user sets them: code-server's window is a
  // remote one, which takes machine-scoped settings (`flowd.path`, `flowd.server.port`) only from
  // the remote machine's settings, never from the user's (docs/editors.md, "VS Code").
  fs.mkdirSync(path.join(userData, "Machine"), { recursive: true });
  fs.writeFileSync(path.join(userData, "Machine", "settings.json"), JSON.stringify(settings));
  const common = ["--user-data-dir", userData, "--extensions-dir", extensions];
  execFileSync(process.execPath, [entry, ...common, "--install-extension", need("VSIX")], { env, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  assert.ok(fs.readdirSync(extensions).some((d) => d.startsWith("flowd.flowd-")), `the .vsix did not install into ${extensions}`);
  const server = start(process.execPath, [entry, ...common, "--bind-addr", "127.0.0.1:0", "--auth", "none", "--disable-telemetry", "--disable-update-check", "--disable-workspace-trust", "--disable-getting-started-override", folder], env);
  const [, url] = await waitForOutput(server, /HTTP server listening on (http:\/\/127\.0\.0\.1:\d+)\//, "code-server's address");
  const profile = path.join(tmp, "chromium-profile");
  const browserProc = start(
    process.env.CHROMIUM ?? "/usr/bin/chromium",
    ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-breakpad", "--disable-crash-reporter", `--user-data-dir=${profile}`, "--remote-debugging-port=0", "--window-size=1600,1000", "about:blank"],
    env,
  );
  const [, ws] = await waitForOutput(browserProc, /DevTools listening on (ws:\/\/\S+)/, "chromium's DevTools endpoint");
  const browser: Browser = await chromium.connectOverCDP(ws);
  const context = browser.contexts()[0] ?? (await browser.newContext());
  const page = await context.newPage();
  await page.setViewportSize({ width: 1600, height: 1000 });
  await page.goto(`${url}/?folder=${encodeURIComponent(folder)}`);
  await page.locator(".monaco-workbench").waitFor({ timeout: STEP_MS });
  return {
    page,
    close: async () => {
      await browser.close().catch(() => undefined);
      await stop(browserProc);
      await stop(server);
    },
  };
}

export async function shot(page: Page, dir: string, name: string): Promise<void> {
  await page.screenshot({ path: path.join(dir, `${name}.png`) });
}

/**
 * Runs `title` from the command palette. The palette closes when something else takes the focus
 * as it opens (a webview being revealed): then it is opened again, up to three times.
 */
export async function runCommand(page: Page, title: string): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    const wait = attempt < 3 ? 10_000 : STEP_MS;
    try {
      // The whole of it again when the palette closes at any point (a webview taking the focus
      // late, on a loaded machine): before it shows, while it is typed into, or before the pick.
      await page.keyboard.press("F1");
      const input = page.locator(".quick-input-widget input");
      await input.waitFor({ state: "visible", timeout: wait });
      await input.fill(`>${title}`, { timeout: wait });
      await pick(page, title, wait);
      return;
    } catch (err) {
      if (attempt >= 3) throw err;
      await page.keyboard.press("Escape").catch(() => undefined);
    }
  }
}

/**
 * Runs `title` and picks `choice` in the quick pick it opens. That pick, too, closes when a
 * webview takes the focus late (a click in it just before, on a loaded machine): then the
 * command is run again, up to three times.
 */
export async function runAndPick(page: Page, title: string, choice: string | RegExp): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    await runCommand(page, title);
    try {
      await pick(page, choice, attempt < 3 ? 10_000 : STEP_MS);
      return;
    } catch (err) {
      if (attempt >= 3) throw err;
      await page.keyboard.press("Escape");
    }
  }
}

/** Picks the quick-pick row holding `text` (the palette or a command's own pick). */
export async function pick(page: Page, text: string | RegExp, timeout = STEP_MS): Promise<void> {
  const row = page.locator(".quick-input-list .monaco-list-row", { hasText: text }).first();
  await row.waitFor({ timeout });
  await row.click({ timeout });
}

export function statusItem(page: Page): Locator {
  return page.locator("#workbench\\.parts\\.statusbar .statusbar-item", { hasText: /lanes|flowd|done|paused|cancelled/ }).first();
}

export async function statusText(page: Page): Promise<string> {
  return ((await statusItem(page).textContent()) ?? "").trim();
}

/** Waits until `ready` holds of the page, re-checking; fails with the status bar and a screenshot. */
export async function until(page: Page, shots: string, what: string, ready: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + STEP_MS;
  for (;;) {
    if (await ready().catch(() => false)) return;
    if (Date.now() > deadline) {
      await shot(page, shots, `failed-${what.replace(/\W+/g, "-")}`).catch(() => undefined);
      throw new Error(`${what}: never happened; the status bar reads ${JSON.stringify(await statusText(page).catch(() => "?"))}`);
    }
    await page.waitForTimeout(250);
  }
}

export function treeRow(page: Page, name: RegExp): Locator {
  return page.locator(".monaco-list-row[role=treeitem]", { hasText: name }).first();
}

/** The notification toast whose text matches `text`. */
export function toast(page: Page, text: RegExp): Locator {
  return page.locator(".notification-toast", { hasText: text }).first();
}

// The one-story epic the approve and dual journeys run: `login`, its story `api` owning src/api/.
export const LOGIN_PLAN = {
  epicId: "login",
  epic: "Password login",
  stories: [{ id: "api", title: "Login API", description: "POST /login.", owned: ["src/api/"], acceptance: ["login() exists"] }],
};

/** A repository `<base>/app` whose first commit holds `files` (path -> text), with flowd's
 * settings `flow` (file name under .flow/ -> text) written after it, untracked. */
export function makeRepo(base: string, files: Record<string, string>, flow: Record<string, string>): string {
  const repo = path.join(base, "app");
  for (const [file, text] of Object.entries(files)) {
    fs.mkdirSync(path.dirname(path.join(repo, file)), { recursive: true });
    fs.writeFileSync(path.join(repo, file), text);
  }
  git(repo, "init", "-q", "-b", "main");
  git(repo, "add", "-A");
  git(repo, "commit", "-q", "-m", "initial");
  fs.mkdirSync(path.join(repo, ".flow"));
  for (const [file, text] of Object.entries(flow)) fs.writeFileSync(path.join(repo, ".flow", file), text);
  return repo;
}

// A repository for it: the plan file, flowd's scripted agent with `script` as its rules (every role),
// no judge rounds and one review round.
export function makeLoginRepo(base: string, script: object): string {
  return makeRepo(
    base,
    { "README.md": "# app\n", "src/api/__init__.py": "", "login.epic.json": JSON.stringify(LOGIN_PLAN, null, 2) + "\n" },
    {
      "roster.toml": '[[executors]]\nid = "demo"\nkind = "script"\nscript = "demo.script.json"\nroles = ["planner", "coder", "reviewer", "judge"]\nslots = 2\n',
      "demo.script.json": JSON.stringify(script, null, 2),
      "config.toml": "judgeRounds = 0\nmaxReviewRounds = 1\n",
    },
  );
}

/** Launch the epic in `file` from the command palette once the extension's server is up (its idle
 * status item reads just "flowd"), taking the launch's default settings. */
export async function launchEpic(page: Page, shots: string, file: string): Promise<void> {
  await until(page, shots, "the flowd status bar item", async () => (await statusText(page)) === "flowd");
  await runCommand(page, "Flow: Launch Epic");
  await pick(page, file);
  await page.locator(".quick-input-widget input").waitFor({ state: "visible", timeout: STEP_MS });
  await page.keyboard.press("Enter");
}

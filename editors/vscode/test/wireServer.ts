// What the wire tests with a one-story epic share (approval.test.ts, revisions.test.ts): a real
// git repository with flowd's scripted agent, and the real `flowd serve` (FLOWD_BIN) over stdio
// feeding a LanesModel, with waits on notifications (no timing) and a clean shutdown.

import { ChildProcess, execFileSync, spawn } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { createMessageConnection, MessageConnection, StreamMessageReader, StreamMessageWriter } from "vscode-jsonrpc/node";
import { feedModel, LanesModel } from "../src/lanesModel";
import { Commands, FlowServer } from "../src/protocol";

export function git(cwd: string, ...args: string[]): string {
  return execFileSync("git", ["-c", "user.name=flowd test", "-c", "user.email=test@flowd.invalid", ...args], { cwd, encoding: "utf8" });
}

export interface OneStory {
  epicId: string;
  epic: string;
  /** a.txt's content in the first commit (story `a` owns it). */
  initial: string;
  /** The scripted agent's script (`.flow/script.json`). */
  script: object;
}

/** `base/app`: one commit with a.txt and `<epicId>.epic.json` (story `a`), a scripted roster. */
export function oneStoryRepo(base: string, o: OneStory): { repo: string; plan: string } {
  const repo = path.join(base, "app");
  fs.mkdirSync(repo, { recursive: true });
  fs.writeFileSync(path.join(repo, "a.txt"), o.initial);
  const plan = path.join(repo, `${o.epicId}.epic.json`);
  fs.writeFileSync(plan, JSON.stringify({ epicId: o.epicId, epic: o.epic, stories: [{ id: "a", title: "Story a", description: "A.", owned: ["a.txt"] }] }));
  git(repo, "init", "-q", "-b", "main");
  git(repo, "add", "-A");
  git(repo, "commit", "-q", "-m", "initial");
  fs.mkdirSync(path.join(repo, ".flow"));
  fs.writeFileSync(path.join(repo, ".flow", "script.json"), JSON.stringify(o.script));
  fs.writeFileSync(path.join(repo, ".flow", "roster.toml"), '[[executors]]\nid = "demo"\nkind = "script"\nscript = "script.json"\nroles = ["planner", "coder", "reviewer", "judge"]\nslots = 2\n');
  fs.writeFileSync(path.join(repo, ".flow", "config.toml"), "judgeRounds = 0\nmaxReviewRounds = 1\n");
  return { repo, plan };
}

export interface WireServer {
  conn: MessageConnection;
  server: FlowServer;
  model: LanesModel;
  /** Resolves once `ready` holds, checked again on every notification. */
  until: (ready: () => boolean, what?: string) => Promise<void>;
  /** Cancels the runs still going, shuts the server down and waits for it to exit. */
  close: () => Promise<void>;
}

/**
 * `flowd serve` in `repo` with `home` as HOME, initialized; `listen` registers more notification
 * handlers before the connection listens (call `wake` after one, so that waits re-check).
 */
export async function startServer(repo: string, home: string, listen?: (conn: MessageConnection, wake: () => void) => void): Promise<WireServer> {
  const model = new LanesModel();
  const waiters: (() => void)[] = [];
  const wake = (): void => {
    for (const w of [...waiters]) w();
  };
  const env = { ...process.env, HOME: home, XDG_CONFIG_HOME: path.join(home, ".config"), FLOWD_SCRIPT_STATE: path.join(home, "state") };
  const proc: ChildProcess = spawn(process.env.FLOWD_BIN ?? "flowd", ["serve"], { cwd: repo, env, stdio: ["pipe", "pipe", "ignore"] });
  const conn = createMessageConnection(new StreamMessageReader(proc.stdout!), new StreamMessageWriter(proc.stdin!));
  feedModel(model, (method, handler) =>
    conn.onNotification(method, (params: unknown) => {
      handler(params);
      wake();
    }),
  );
  listen?.(conn, wake);
  conn.onRequest("window/workDoneProgress/create", () => null);
  conn.onRequest("client/registerCapability", () => null);
  conn.onRequest("workspace/configuration", (p: { items: unknown[] }) => p.items.map(() => null));
  conn.listen();
  const rootUri = `file://${repo}`;
  await conn.sendRequest("initialize", { processId: process.pid, rootUri, workspaceFolders: [{ uri: rootUri, name: "app" }], capabilities: {} });
  await conn.sendNotification("initialized", {});
  const server: FlowServer = {
    executeCommand: <T>(command: string, arg: object) => conn.sendRequest<T>("workspace/executeCommand", { command, arguments: [arg] }),
    request: <T>(method: string, params: object) => conn.sendRequest<T>(method, params),
  };
  const until = (ready: () => boolean, what = ""): Promise<void> =>
    new Promise((resolve, reject) => {
      const guard = setTimeout(() => reject(new Error(`the run never got there${what ? `: ${what}` : ""}`)), 240_000);
      const check = (): void => {
        if (!ready()) return;
        clearTimeout(guard);
        waiters.splice(waiters.indexOf(check), 1);
        resolve();
      };
      waiters.push(check);
      check();
    });
  const close = async (): Promise<void> => {
    for (const run of model.activeRuns()) await server.executeCommand(Commands.cancelEpic, { runId: run.runId }).catch(() => undefined);
    const exited = new Promise((resolve) => proc.once("exit", resolve));
    const guard = setTimeout(() => proc.kill("SIGKILL"), 10_000);
    await conn.sendRequest("shutdown").catch(() => undefined);
    await conn.sendNotification("exit").catch(() => undefined);
    await exited;
    clearTimeout(guard);
    conn.dispose();
    try {
      // The repository's daemon outlives its sessions by design: the test stops what it started.
      execFileSync(process.env.FLOWD_BIN ?? "flowd", ["daemon", "stop"], { cwd: repo, env, stdio: "ignore", timeout: 30_000 });
    } catch {
      // none ran, or it is gone already
    }
  };
  return { conn, server, model, until, close };
}

/** The events of `type` in the run's trace, in order. */
export function traceEvents<T>(repo: string, runId: string, type: string): T[] {
  return fs
    .readFileSync(path.join(repo, ".flow", "runs", runId, "trace.jsonl"), "utf8")
    .split("\n")
    .filter(Boolean)
    .map((line) => (JSON.parse(line) as { event: T & { type: string } }).event)
    .filter((e) => e.type === type);
}

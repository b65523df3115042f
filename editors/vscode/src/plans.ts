// Recognising story plan files (docs/plan-format.md) and drafting new ones with `flowd plan new`.
// No vscode import.

import { spawn } from "node:child_process";
import * as path from "node:path";

export const PLAN_GLOB = "**/*.epic.json";
export const MARKDOWN_GLOB = "**/*.md";
export const EXCLUDE_GLOB = "{**/node_modules/**,**/.git/**,**/.venv/**,**/.flow/**}";

// A fence whose info string is `json storyplan`, at the start of a line (up to 3 spaces in).
const STORYPLAN_FENCE = /^ {0,3}(`{3,}|~{3,})[ \t]*json[ \t]+storyplan\b/m;

export function isMarkdownPlan(text: string): boolean {
  return STORYPLAN_FENCE.test(text);
}

export function isPlanPath(file: string): boolean {
  return file.endsWith(".epic.json");
}

/** `Add password login` → `add-password-login.epic.json` (in `dir`). */
export function defaultDraftPath(dir: string, epicText: string): string {
  const slug = epicText
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, "-")
    .replace(/^-+|-+$/g, "")
    .slice(0, 40)
    .replace(/-+$/, "");
  return path.join(dir, `${slug || "epic"}.epic.json`);
}

export function draftArgs(epicText: string, output: string): string[] {
  return ["plan", "new", epicText, "-o", output];
}

export interface ProcessResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs flowd to completion; `signal` aborts it (the process is killed). */
export function runFlowd(bin: string, args: string[], cwd: string, signal?: AbortSignal, env?: NodeJS.ProcessEnv): Promise<ProcessResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(bin, args, { cwd, env: env ?? process.env, stdio: ["ignore", "pipe", "pipe"], signal });
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8").on("data", (d: string) => (stdout += d));
    child.stderr.setEncoding("utf8").on("data", (d: string) => (stderr += d));
    child.on("error", (err) => reject(err));
    child.on("close", (code) => resolve({ code, stdout, stderr }));
  });
}

/** The one sentence flowd printed on failure (its last stderr line), or a fallback. */
export function failureMessage(result: ProcessResult, what: string): string {
  const lines = result.stderr.split("\n").map((l) => l.trim()).filter(Boolean);
  const last = lines[lines.length - 1];
  return last ?? `${what} failed with exit code ${result.code ?? "?"}.`;
}

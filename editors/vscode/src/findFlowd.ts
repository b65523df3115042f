// Where the flowd executable is: the `flowd.path` setting, else the workspace's virtualenv,
// else PATH. No vscode import: tested against real files in temp dirs.

import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";

export interface FlowdLocation {
  path: string;
  /** How it was found, for the log. */
  source: "setting" | "workspace venv" | "PATH";
}

export interface FindOptions {
  /** The `flowd.path` setting (may be empty, `~/…`, relative to the first folder, or hold `${workspaceFolder}`). */
  setting?: string;
  workspaceFolders: string[];
  /** The PATH to search, by default the process's. */
  envPath?: string;
  platform?: NodeJS.Platform;
}

export type FindResult = { found: FlowdLocation } | { missing: string };

function isExecutable(file: string): boolean {
  try {
    const stat = fs.statSync(file);
    if (!stat.isFile()) return false;
    fs.accessSync(file, fs.constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

function venvCandidates(folder: string, platform: NodeJS.Platform): string[] {
  return platform === "win32"
    ? [path.join(folder, ".venv", "Scripts", "flowd.exe")]
    : [path.join(folder, ".venv", "bin", "flowd")];
}

export function expandSetting(value: string, workspaceFolders: string[]): string {
  let out = value.trim();
  const root = workspaceFolders[0];
  if (root !== undefined) out = out.replace(/\$\{workspaceFolder\}/g, root);
  if (out === "~" || out.startsWith("~/")) out = path.join(os.homedir(), out.slice(1));
  if (!path.isAbsolute(out) && root !== undefined && out.includes("/")) out = path.resolve(root, out);
  return out;
}

/** Finds flowd, or says in one sentence what was looked at and how to fix it. */
export function findFlowd(options: FindOptions): FindResult {
  const platform = options.platform ?? process.platform;
  const setting = options.setting?.trim() ?? "";
  if (setting !== "") {
    const expanded = expandSetting(setting, options.workspaceFolders);
    if (path.isAbsolute(expanded)) {
      return isExecutable(expanded)
        ? { found: { path: expanded, source: "setting" } }
        : { missing: `The setting flowd.path points at ${expanded}, which is not an executable file: fix the setting or clear it to use the workspace's .venv or PATH.` };
    }
    const onPath = searchPath(expanded, options.envPath ?? process.env.PATH ?? "", platform);
    return onPath
      ? { found: { path: onPath, source: "setting" } }
      : { missing: `The setting flowd.path names ${expanded}, which is not on PATH: give an absolute path or clear the setting.` };
  }
  for (const folder of options.workspaceFolders) {
    for (const candidate of venvCandidates(folder, platform)) {
      if (isExecutable(candidate)) return { found: { path: candidate, source: "workspace venv" } };
    }
  }
  const onPath = searchPath("flowd", options.envPath ?? process.env.PATH ?? "", platform);
  if (onPath) return { found: { path: onPath, source: "PATH" } };
  const looked = options.workspaceFolders.length ? `${venvCandidates(options.workspaceFolders[0], platform)[0]} or ` : "";
  return {
    missing: `flowd was not found in ${looked}PATH: install it (pip install flowd, e.g. into the workspace's .venv) or set flowd.path to the executable.`,
  };
}

function searchPath(name: string, envPath: string, platform: NodeJS.Platform): string | undefined {
  const exts = platform === "win32" ? ["", ".exe", ".cmd"] : [""];
  for (const dir of envPath.split(path.delimiter)) {
    if (!dir) continue;
    for (const ext of exts) {
      const candidate = path.join(dir, name + ext);
      if (isExecutable(candidate)) return candidate;
    }
  }
  return undefined;
}

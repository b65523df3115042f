// Exit 0 when node_modules matches package-lock.json, 1 when it is missing or stale.
// npm writes node_modules/.package-lock.json (the "hidden lockfile") for what it installed:
// every package it lists must have the locked version, and every required locked package
// must be installed (optional ones, like other platforms' esbuild binaries, may be absent).
import { readFileSync } from "node:fs";

function read(file) {
  try {
    return JSON.parse(readFileSync(file, "utf8"));
  } catch {
    return undefined;
  }
}

const lock = read("package-lock.json");
const hidden = read("node_modules/.package-lock.json");
if (!lock || !hidden) process.exit(1);
const locked = lock.packages ?? {};
const installed = hidden.packages ?? {};
for (const [key, entry] of Object.entries(locked)) {
  if (key === "") continue;
  const have = installed[key];
  if (!have) {
    if (entry.optional || entry.peer) continue;
    process.exit(1);
  }
  if (have.version !== entry.version) process.exit(1);
}
for (const key of Object.keys(installed)) if (!(key in locked)) process.exit(1);
process.exit(0);

// Regenerates the clients' protocol files from flowd's protocol declaration (`flowd schema
// protocol`): src/protocol.ts (flowd/schema/typescript.py) and the Neovim plugin's
// lua/flowd/protocol.lua (flowd/schema/lua.py). `--check` only compares (exit 1 on drift).
// Uses the Python next to FLOWD_BIN, else the repository's .venv; without either, keeps the
// committed files.
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const targets = [
  ["flowd.schema.typescript", join(root, "src", "protocol.ts")],
  // Beside the extension only in the repository (a packaged extension has no editors/nvim).
  ["flowd.schema.lua", join(root, "..", "nvim", "lua", "flowd", "protocol.lua")],
].filter(([, path]) => existsSync(dirname(path)));
const bins = [process.env.FLOWD_BIN, join(root, "..", "..", ".venv", "bin", "flowd")].filter(Boolean);
const python = bins.map((b) => join(dirname(b), "python")).find((p) => existsSync(p));
if (!python) {
  console.log("protocol: no flowd (set FLOWD_BIN); keeping the committed protocol files");
  process.exit(0);
}
let status = 0;
for (const [module, target] of targets) {
  try {
    execFileSync(python, ["-m", module, target, ...process.argv.slice(2)], { stdio: "inherit" });
  } catch (err) {
    status = typeof err.status === "number" ? err.status : 1;
  }
}
process.exit(status);

// Regenerates src/protocol.ts from flowd's protocol declaration (`flowd schema protocol`, rendered
// by flowd/protocol/typescript.py). `--check` only compares (exit 1 on drift). Uses the Python
// next to FLOWD_BIN, else the repository's .venv; without either, keeps the committed file.
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const target = join(root, "src", "protocol.ts");
const bins = [process.env.FLOWD_BIN, join(root, "..", "..", ".venv", "bin", "flowd")].filter(Boolean);
const python = bins.map((b) => join(dirname(b), "python")).find((p) => existsSync(p));
if (!python) {
  console.log("protocol: no flowd (set FLOWD_BIN); keeping the committed src/protocol.ts");
  process.exit(0);
}
const args = ["-m", "flowd.protocol.typescript", target, ...process.argv.slice(2)];
try {
  execFileSync(python, args, { stdio: "inherit" });
} catch (err) {
  process.exit(typeof err.status === "number" ? err.status : 1);
}

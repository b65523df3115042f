// Regenerates schemas/plan.schema.json from `flowd schema plan` (the plan model is the source of
// truth). Uses FLOWD_BIN, else the repository's .venv; without either, keeps the committed file.
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const target = join(root, "schemas", "plan.schema.json");
const candidates = [process.env.FLOWD_BIN, join(root, "..", "..", ".venv", "bin", "flowd")].filter(Boolean);
const bin = candidates.find((c) => existsSync(c));
if (!bin) {
  console.log("schema: no flowd (set FLOWD_BIN); keeping the committed schemas/plan.schema.json");
  process.exit(0);
}
let text;
try {
  text = execFileSync(bin, ["schema", "plan"], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
} catch (err) {
  console.error(`schema: ${bin} schema plan failed: ${String(err.stderr || err.message).trim()}`);
  process.exit(1);
}
const schema = JSON.parse(text);
schema.title ??= "flowd story plan";
const out = JSON.stringify(schema, null, 2) + "\n";
const before = existsSync(target) ? readFileSync(target, "utf8") : "";
if (before === out) {
  console.log("schema: schemas/plan.schema.json is up to date");
} else {
  writeFileSync(target, out);
  console.log(`schema: wrote schemas/plan.schema.json from ${bin} schema plan`);
}

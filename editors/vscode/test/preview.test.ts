// The Markdown preview's Mermaid (src/preview/): the manifest contributes the bundled script and
// its styles, the build writes them, the packaged .vsix takes them (`vsce ls`, the file list
// `vsce package` uses), mermaid is pinned, and the body's theme class picks Mermaid's palette.
// That the preview really draws an SVG is shown in real VS Code by test/e2e/run.ts.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { describe, test } from "node:test";
import { mermaidTheme } from "../src/preview/theme";

const ROOT = path.join(__dirname, "..", "..");

interface Manifest {
  contributes: Record<string, unknown>;
  dependencies: Record<string, string>;
}

const manifest = (): Manifest => JSON.parse(fs.readFileSync(path.join(ROOT, "package.json"), "utf8")) as Manifest;
const rel = (p: string): string => path.posix.normalize(p.replace(/^\.\//, ""));

describe("Mermaid in the Markdown preview", () => {
  test("the manifest contributes one bundled script and its styles, and the build writes them", () => {
    const contributes = manifest().contributes;
    const scripts = (contributes["markdown.previewScripts"] as string[]).map(rel);
    const styles = (contributes["markdown.previewStyles"] as string[]).map(rel);
    assert.deepEqual(scripts, ["dist/mermaidPreview.js"]);
    assert.deepEqual(styles, ["media/mermaidPreview.css"]);
    fs.rmSync(path.join(ROOT, "dist", "mermaidPreview.js"), { force: true }); // the build must write it anew
    execFileSync(process.execPath, ["scripts/build.mjs"], { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"] });
    const bundle = fs.readFileSync(path.join(ROOT, scripts[0]), "utf8");
    // Mermaid itself is inside (its flowchart and gantt parsers), and our fence adoption.
    assert.match(bundle, /flowd-mermaid/);
    assert.match(bundle, /flowchart/);
    assert.match(bundle, /gantt/);
    // One classic script: nothing left to load at run time (no chunk, no remote module).
    assert.doesNotMatch(bundle, /\bimport\(\s*["'`]/);
    assert.doesNotMatch(bundle, /^\s*(import|export)\s/m);
    assert.ok(fs.statSync(path.join(ROOT, styles[0])).size > 0);
  });

  test("the packaged extension takes the script and the styles", () => {
    const files = execFileSync(path.join(ROOT, "node_modules", ".bin", "vsce"), ["ls", "--no-dependencies"], { cwd: ROOT, encoding: "utf8" })
      .split("\n")
      .map((l) => l.trim());
    for (const f of [...(manifest().contributes["markdown.previewScripts"] as string[]), ...(manifest().contributes["markdown.previewStyles"] as string[])]) {
      assert.ok(files.includes(rel(f)), `${rel(f)} is not in the .vsix: ${files.join(", ")}`);
    }
  });

  test("mermaid is a pinned dependency, the lock file's version", () => {
    const pinned = manifest().dependencies.mermaid;
    assert.match(pinned, /^\d+\.\d+\.\d+$/, `mermaid is pinned to one version, not ${pinned}`);
    const lock = JSON.parse(fs.readFileSync(path.join(ROOT, "package-lock.json"), "utf8")) as { packages: Record<string, { version?: string }> };
    assert.equal(lock.packages["node_modules/mermaid"]?.version, pinned);
  });

  test("the preview body's theme class picks Mermaid's palette", () => {
    const table: [string, string][] = [
      ["vscode-light", "default"],
      ["vscode-dark", "dark"],
      ["vscode-high-contrast", "dark"],
      ["vscode-high-contrast vscode-high-contrast-light", "default"],
      ["vscode-body vscode-dark showEditorSelection", "dark"],
      ["", "default"],
    ];
    for (const [body, want] of table) assert.equal(mermaidTheme(body), want, body);
  });
});

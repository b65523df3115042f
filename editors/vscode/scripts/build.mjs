// esbuild entry points: the extension bundle, the test bundles (with `vscode` aliased to the
// stub in test/stubs), and the README preview renderer.
import * as esbuild from "esbuild";
import { readdirSync, rmSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const mode = process.argv[2] ?? "--extension";
const common = { bundle: true, platform: "node", format: "cjs", target: "node20", sourcemap: true, logLevel: "warning", absWorkingDir: root };

if (mode === "--extension") {
  await esbuild.build({ ...common, entryPoints: ["src/extension.ts"], outfile: "dist/extension.js", external: ["vscode"], minify: process.env.FLOWD_MINIFY === "1" });
  // The Epic Graph webview's script: for the browser, one file the page loads (no remote asset).
  await esbuild.build({ ...common, platform: "browser", format: "iife", target: "es2022", entryPoints: ["src/webview/graph.ts"], outfile: "dist/graphView.js", minify: process.env.FLOWD_MINIFY === "1" });
  // Mermaid for the built-in Markdown preview (`markdown.previewScripts`): the preview loads it
  // as a classic script, so one IIFE with every diagram Mermaid loads lazily inlined (no splitting).
  await esbuild.build({ ...common, platform: "browser", format: "iife", target: "es2022", sourcemap: false, entryPoints: ["src/preview/mermaidPreview.ts"], outfile: "dist/mermaidPreview.js", minify: true });
} else if (mode === "--tests") {
  const tests = readdirSync(join(root, "test")).filter((f) => f.endsWith(".test.ts"));
  rmSync(join(root, "out", "test"), { recursive: true, force: true }); // no stale bundles of removed tests
  await esbuild.build({
    ...common,
    entryPoints: tests.map((f) => join("test", f)),
    outdir: "out/test",
    alias: { vscode: "./test/stubs/vscode.ts" },
  });
} else if (mode === "--e2e") {
  // The real-editor test drives code-server; playwright-core stays a runtime require.
  // Each journey is its own entry point (harness.ts is shared code, bundled into each).
  const journeys = readdirSync(join(root, "test", "e2e")).filter((f) => f.endsWith(".ts") && f !== "harness.ts");
  await esbuild.build({ ...common, entryPoints: journeys.map((f) => join("test", "e2e", f)), outdir: "out/e2e", external: ["playwright-core"] });
} else if (mode === "--preview") {
  await esbuild.build({ ...common, entryPoints: ["scripts/render-preview.ts"], outfile: "out/preview/render-preview.js" });
} else {
  console.error(`build.mjs: unknown mode ${mode} (use --extension, --tests, --e2e or --preview)`);
  process.exit(2);
}

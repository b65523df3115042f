// Parses Mermaid blocks with the real Mermaid parser (npm `mermaid`, in a DOM from `jsdom`):
// reads a JSON list of diagram texts on stdin, prints a JSON list of {ok, type?, error?}.
// Copied next to its node_modules by tests/engine/mermaid_env.py, which installs them.
import { JSDOM } from "jsdom";

const dom = new JSDOM("<!doctype html><html><body></body></html>");
globalThis.window = dom.window;
globalThis.document = dom.window.document;
const { default: mermaid } = await import("mermaid");

let input = "";
for await (const chunk of process.stdin) input += chunk;
const out = [];
for (const text of JSON.parse(input)) {
  try {
    const parsed = await mermaid.parse(text);
    out.push({ ok: true, type: parsed.diagramType });
  } catch (e) {
    out.push({ ok: false, error: String(e && e.message ? e.message : e).split("\n").slice(0, 3).join(" ") });
  }
}
process.stdout.write(JSON.stringify(out));

/// <reference lib="dom" />
// Mermaid in VS Code's built-in Markdown preview (contributed as `markdown.previewScripts`,
// bundled with the `mermaid` npm package into dist/mermaidPreview.js: no remote asset). The
// epic report (report.md) carries its graph and timeline as ```mermaid blocks, which the preview
// alone shows as code. This script draws each block as an SVG, again whenever the preview
// updates its content, and again in the other palette when the theme switches light ↔ dark.

import mermaid from "mermaid";
import { mermaidTheme } from "./theme";

/** The preview's code fence for a ```mermaid block (markdown-it's `language-` class). */
const FENCE = "pre > code.language-mermaid";
let drawn = 0; // unique ids for mermaid.render's scratch elements
let theme = "";
let pass = 0; // a newer pass supersedes one still awaiting renders

/** Each Mermaid fence becomes a `div.flowd-mermaid` holding its source (drawn below). */
function adoptFences(): void {
  for (const code of Array.from(document.querySelectorAll<HTMLElement>(FENCE))) {
    const pre = code.parentElement as HTMLElement;
    const box = document.createElement("div");
    box.className = "flowd-mermaid";
    box.dataset.source = code.textContent ?? "";
    // The preview's scroll sync reads data-line off the block: keep it on the replacement.
    const line = pre.getAttribute("data-line");
    if (line !== null) box.setAttribute("data-line", line);
    box.classList.add(...Array.from(pre.classList));
    pre.replaceWith(box);
  }
}

/** Draws every block not yet drawn in the current theme; a block Mermaid rejects says why. */
async function drawAll(): Promise<void> {
  adoptFences();
  const want = mermaidTheme(document.body.className);
  if (want !== theme) {
    theme = want;
    mermaid.initialize({ startOnLoad: false, securityLevel: "strict", theme: want, suppressErrorRendering: true });
  }
  const mine = ++pass;
  for (const box of Array.from(document.querySelectorAll<HTMLElement>("div.flowd-mermaid"))) {
    if (box.dataset.theme === want) continue;
    const source = box.dataset.source ?? "";
    try {
      const { svg } = await mermaid.render(`flowd-mermaid-${++drawn}`, source);
      if (mine !== pass) return;
      box.innerHTML = svg;
      box.dataset.theme = want;
      box.removeAttribute("data-error");
    } catch (err) {
      if (mine !== pass) return;
      const pre = document.createElement("pre");
      pre.textContent = `Mermaid could not draw this block: ${err instanceof Error ? err.message : String(err)}\n\n${source}`;
      box.replaceChildren(pre);
      box.dataset.theme = want;
      box.dataset.error = "1";
    }
  }
}

function schedule(): void {
  void drawAll();
}

// The preview replaces its body's content on every edit and fires this event after it.
window.addEventListener("vscode.markdown.updateContent", schedule);
// The theme switches by the body's class (vscode-light / vscode-dark / vscode-high-contrast).
new MutationObserver(schedule).observe(document.body, { attributes: true, attributeFilter: ["class"] });
if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", schedule);
else schedule();

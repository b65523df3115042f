// Which Mermaid theme the Markdown preview's body asks for: VS Code marks the preview's body
// `vscode-light`, `vscode-dark`, `vscode-high-contrast` (dark) or `vscode-high-contrast-light`.
// Kept apart from mermaidPreview.ts so the unit tests read it without the DOM or Mermaid.

export function mermaidTheme(bodyClass: string): "default" | "dark" {
  const classes = new Set(bodyClass.split(/\s+/));
  if (classes.has("vscode-high-contrast-light") || classes.has("vscode-light")) return "default";
  if (classes.has("vscode-dark") || classes.has("vscode-high-contrast")) return "dark";
  return "default";
}

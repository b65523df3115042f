// Markdown text from the server shown in VS Code's preview. No vscode import.

/**
 * Escapes `<` outside code (a `>` alone starts no tag, and may be a blockquote), so text such as `[prices.<model>]` reads as written
 * instead of being taken for an HTML tag the preview drops. Fenced blocks and inline code
 * spans are left alone (Markdown shows them literally already).
 */
export function escapeAngleBrackets(markdown: string): string {
  let fence: string | undefined;
  return markdown
    .split("\n")
    .map((line) => {
      const opener = /^ {0,3}(`{3,}|~{3,})/.exec(line);
      if (fence !== undefined) {
        if (opener && opener[1][0] === fence[0] && opener[1].length >= fence.length) fence = undefined;
        return line;
      }
      if (opener) {
        fence = opener[1];
        return line;
      }
      return escapeOutsideCodeSpans(line);
    })
    .join("\n");
}

function escapeOutsideCodeSpans(line: string): string {
  // Split on code spans (`…`, ``…``): odd pieces are code.
  return line
    .split(/(`+[^`]*?`+)/)
    .map((piece, i) => (i % 2 === 1 ? piece : piece.replace(/</g, "&lt;")))
    .join("");
}

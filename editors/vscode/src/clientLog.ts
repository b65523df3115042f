// The language client's log lines, as the flowd output channel shows them. No vscode import.

// vscode-languageclient logs every exit of the server process at error level, a clean one too:
// `[Error - 10:01:02 AM] Server process exited with code 0.` After a stop or a restart that
// worked, that is no error.
const CLEAN_EXIT = /^\[Error\s*-\s*([^\]]*)\] (Server process exited with code 0\.)$/;

/** The line to log instead of `line` (the same line unless it misstates a clean exit). */
export function clientLogLine(line: string): string {
  const m = CLEAN_EXIT.exec(line);
  return m ? `[Info  - ${m[1]}] ${m[2]}` : line;
}

/** The part of an output channel the language client writes to. */
export interface LineSink {
  append(value: string): void;
  appendLine(value: string): void;
}

/**
 * Wraps an output channel for the language client: every call goes through, `appendLine`
 * after `clientLogLine`. A Proxy, so every other member of the channel stays the real one's.
 */
export function clientLogChannel<T extends LineSink>(channel: T): T {
  return new Proxy(channel, {
    get(target, key, receiver) {
      if (key === "appendLine") return (value: string) => target.appendLine(clientLogLine(value));
      const value: unknown = Reflect.get(target, key, receiver);
      return typeof value === "function" ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
}

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
 * Wraps an output channel for the language client: every member goes to the channel,
 * `appendLine` after `clientLogLine`. A plain object of bound members, not a Proxy: VS Code's
 * output channels are frozen, and a Proxy may not answer differently for a frozen property.
 */
export function clientLogChannel<T extends LineSink>(channel: T): T {
  const wrapper: Record<string | symbol, unknown> = {};
  for (let o: object | null = channel; o !== null && o !== Object.prototype; o = Object.getPrototypeOf(o) as object | null) {
    for (const key of Reflect.ownKeys(o)) {
      if (key === "constructor" || key in wrapper) continue;
      const value: unknown = Reflect.get(channel, key);
      wrapper[key] = typeof value === "function" ? (value as (...a: unknown[]) => unknown).bind(channel) : value;
    }
  }
  wrapper.appendLine = (value: string) => channel.appendLine(clientLogLine(value));
  return wrapper as unknown as T;
}

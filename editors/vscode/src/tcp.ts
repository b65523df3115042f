// Connecting to a `flowd serve --tcp` someone already started (docs/editors.md): the server
// proves nothing to us, we prove we are its user with the token it wrote for the user alone.
// No vscode import.

import * as fs from "node:fs";
import * as net from "node:net";
import * as os from "node:os";
import * as path from "node:path";

/**
 * `$XDG_RUNTIME_DIR/flowd/serve-<port>.json` (when that directory exists), else
 * `~/.cache/flowd/serve-<port>.json`: where `flowd serve --tcp` writes it.
 */
export function tokenFile(port: number, env: NodeJS.ProcessEnv = process.env): string {
  const runtime = env.XDG_RUNTIME_DIR;
  const dir = runtime && isDir(runtime) ? path.join(runtime, "flowd") : path.join(env.HOME || os.homedir(), ".cache", "flowd");
  return path.join(dir, `serve-${port}.json`);
}

function isDir(dir: string): boolean {
  try {
    return fs.statSync(dir).isDirectory();
  } catch {
    return false;
  }
}

export type TokenResult = { token: string } | { problem: string };

/** The token of the server on `port`, or one sentence saying why there is none. */
export function readToken(port: number, env: NodeJS.ProcessEnv = process.env): TokenResult {
  const file = tokenFile(port, env);
  let data: unknown;
  try {
    data = JSON.parse(fs.readFileSync(file, "utf8"));
  } catch (err) {
    const missing = (err as NodeJS.ErrnoException).code === "ENOENT";
    return {
      problem: missing
        ? `flowd: no server token at ${file}; start \`flowd serve --tcp --port ${port}\` as this user, or clear flowd.server.port`
        : `flowd: ${file} is not readable JSON (${(err as Error).message}); restart \`flowd serve --tcp\``,
    };
  }
  const record = data as { port?: unknown; token?: unknown };
  if (typeof record.token !== "string" || record.token === "") return { problem: `flowd: ${file} has no "token"; restart \`flowd serve --tcp\`` };
  if (record.port !== undefined && record.port !== port) return { problem: `flowd: ${file} is for port ${JSON.stringify(record.port)}, not ${port}` };
  return { token: record.token };
}

/** A loopback connection to the server, resolved once connected. */
export function connectLoopback(port: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: "127.0.0.1", port });
    socket.once("connect", () => {
      socket.off("error", reject);
      resolve(socket);
    });
    socket.once("error", reject);
  });
}

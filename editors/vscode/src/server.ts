// Finding flowd and running `flowd serve` through vscode-languageclient.

import * as path from "node:path";
import * as vscode from "vscode";
import { ExecuteCommandRequest, LanguageClient, LanguageClientOptions, ServerOptions, State } from "vscode-languageclient/node";
import { clientLogChannel } from "./clientLog";
import { findFlowd, FlowdLocation } from "./findFlowd";
import { feedModel, LanesModel } from "./lanesModel";
import { ATTENTION, AttentionParams, FlowServer, Requests, StatusResult } from "./protocol";
import { mainCheckout } from "./repoRoot";
import { connectLoopback, readToken } from "./tcp";

/**
 * The repository the window's server serves: the main checkout of the first workspace folder,
 * so a window on a story worktree is served like the repository itself (docs/editors.md).
 */
export function serverRoot(): string | undefined {
  const folder = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath;
  return folder ? mainCheckout(folder) : undefined;
}

/** The language client seen as the FlowServer the commands talk to. */
export class ClientServer implements FlowServer {
  constructor(private readonly client: LanguageClient) {}

  executeCommand<T>(command: string, arg: object): Promise<T> {
    return this.client.sendRequest(ExecuteCommandRequest.type, { command, arguments: [arg] }) as Promise<T>;
  }

  request<T>(method: string, params: object): Promise<T> {
    return this.client.sendRequest<T>(method, params);
  }
}

export type ServerState = "starting" | "running" | "stopped" | "missing";

/** In a remote window (code-server, SSH, a container) VS Code applies a machine setting such as
 * `flowd.path` only from the remote's settings, never from the user's (docs/editors.md, "VS Code"). */
function remoteHint(setting: string): string {
  const remote = vscode.env.remoteName;
  return setting.trim() === "" && remote
    ? ` This is a remote window (${remote}): set flowd.path under Remote in the Settings editor; it is a machine setting, and one in your user settings does not apply here.`
    : "";
}

export class ServerManager implements vscode.Disposable {
  private client: LanguageClient | undefined;
  private flow: FlowServer | undefined;
  private location: FlowdLocation | undefined;
  private toldMissing = false;
  private readonly stateListeners: ((state: ServerState, detail: string) => void)[] = [];

  /** Called with every `flow/attention` notice. */
  onAttention: ((params: AttentionParams) => void) | undefined;

  constructor(
    private readonly model: LanesModel,
    private readonly log: vscode.OutputChannel,
  ) {}

  onDidChangeState(listener: (state: ServerState, detail: string) => void): void {
    this.stateListeners.push(listener);
  }

  server(): FlowServer | undefined {
    return this.client?.state === State.Running ? this.flow : undefined;
  }

  flowdPath(): string | undefined {
    return this.location?.path ?? this.locate()?.path;
  }

  private setState(state: ServerState, detail = ""): void {
    for (const l of this.stateListeners) l(state, detail);
  }

  private locate(): FlowdLocation | undefined {
    const folders = (vscode.workspace.workspaceFolders ?? []).map((f) => f.uri.fsPath);
    const setting = vscode.workspace.getConfiguration("flowd").get<string>("path") ?? "";
    const result = findFlowd({ setting, workspaceFolders: folders });
    if ("found" in result) return result.found;
    const missing = result.missing + remoteHint(setting);
    this.log.appendLine(`[error] ${missing}`);
    this.setState("missing", missing);
    if (!this.toldMissing) {
      this.toldMissing = true;
      void vscode.window.showErrorMessage(missing, "Open Settings", "Show Log").then((choice) => {
        if (choice === "Open Settings") void vscode.commands.executeCommand("workbench.action.openSettings", "flowd.path");
        if (choice === "Show Log") this.log.show(true);
      });
    }
    return undefined;
  }

  /** How to reach the server: a `flowd serve` of our own over stdio, or a running one over TCP. */
  private serverOptions(cwd: string | undefined): { options: ServerOptions; token?: string } | undefined {
    const port = vscode.workspace.getConfiguration("flowd").get<number | null>("server.port");
    if (typeof port === "number" && port > 0) {
      const token = readToken(port);
      if ("problem" in token) {
        this.log.appendLine(`[error] ${token.problem}`);
        this.setState("stopped", token.problem);
        void vscode.window.showErrorMessage(token.problem, "Open Settings").then((choice) => {
          if (choice === "Open Settings") void vscode.commands.executeCommand("workbench.action.openSettings", "flowd.server.port");
        });
        return undefined;
      }
      this.log.appendLine(`connecting to flowd serve on 127.0.0.1:${port}`);
      const options: ServerOptions = async () => {
        const socket = await connectLoopback(port);
        return { reader: socket, writer: socket };
      };
      return { options, token: token.token };
    }
    this.location = this.locate();
    if (!this.location) return undefined;
    this.log.appendLine(`starting ${this.location.path} serve (found via ${this.location.source}${cwd ? `, in ${cwd}` : ""})`);
    return { options: { command: this.location.path, args: ["serve"], options: cwd ? { cwd } : {} } };
  }

  async start(): Promise<void> {
    const cwd = serverRoot();
    const how = this.serverOptions(cwd);
    if (!how) return;
    const serverOptions = how.options;
    const clientOptions: LanguageClientOptions = {
      // Every file: perimeter diagnostics land on any path an agent or the user touches.
      documentSelector: [{ scheme: "file" }],
      outputChannel: clientLogChannel(this.log),
      diagnosticCollectionName: "flowd",
      // The main checkout is the root even when the window holds a story worktree (or a subfolder).
      workspaceFolder: cwd && cwd !== vscode.workspace.workspaceFolders?.[0]?.uri.fsPath ? { uri: vscode.Uri.file(cwd), name: path.basename(cwd), index: 0 } : undefined,
      initializationOptions: how.token ? { token: how.token } : undefined,
    };
    // The id `flowd` makes the client honour the `flowd.trace.server` setting.
    const client = new LanguageClient("flowd", "flowd", serverOptions, clientOptions);
    this.client = client;
    this.flow = new ClientServer(client);
    client.onDidChangeState((e) => {
      if (e.newState === State.Running) this.setState("running");
      else if (e.newState === State.Stopped) this.setState("stopped", "the flowd language server stopped");
      else this.setState("starting");
    });
    feedModel(this.model, (method, handler) => client.onNotification(method, handler));
    client.onNotification(ATTENTION, (params: AttentionParams) => this.onAttention?.(params));
    this.setState("starting");
    try {
      await client.start();
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      this.log.appendLine(`[error] flowd serve did not start: ${message}`);
      this.setState("stopped", message);
      void vscode.window.showErrorMessage(`flowd: the language server did not start (${message}).`, "Show Log").then((choice) => {
        if (choice === "Show Log") this.log.show(true);
      });
      return;
    }
    await this.refresh();
  }

  /** Resyncs the model from `flow/status` (a late attach, a reload, a user's refresh). */
  async refresh(): Promise<StatusResult | undefined> {
    const flow = this.server();
    if (!flow) return undefined;
    try {
      const status = await flow.request<StatusResult>(Requests.status, {});
      this.model.applyStatus(status);
      return status;
    } catch (err) {
      this.log.appendLine(`[error] flow/status: ${err instanceof Error ? err.message : String(err)}`);
      return undefined;
    }
  }

  async stop(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    this.flow = undefined;
    if (client && client.state !== State.Stopped) {
      try {
        await client.stop(2000);
      } catch (err) {
        this.log.appendLine(`[warn] stopping flowd serve: ${err instanceof Error ? err.message : String(err)}`);
      }
    }
  }

  async restart(): Promise<void> {
    await this.stop();
    this.toldMissing = false;
    await this.start();
  }

  dispose(): void {
    void this.stop();
  }
}

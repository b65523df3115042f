// A small stand-in for the `vscode` module, for unit tests under `node --test` (VS Code itself
// cannot be downloaded here). Test bundles alias `vscode` to this file (scripts/build.mjs).
// UI prompts answer from queues the test fills; files and folders are the real file system.

import * as fs from "node:fs";
import * as path from "node:path";

// ------------------------------------------------------------------------------ basics ---

export class Disposable {
  constructor(private readonly fn: () => void = () => undefined) {}
  static from(...items: { dispose(): unknown }[]): Disposable {
    return new Disposable(() => items.forEach((i) => i.dispose()));
  }
  dispose(): void {
    this.fn();
  }
}

type Listener<T> = (e: T) => unknown;
export type Event<T> = (listener: Listener<T>) => Disposable;

export class EventEmitter<T> {
  private listeners: Listener<T>[] = [];
  readonly event: Event<T> = (listener) => {
    this.listeners.push(listener);
    return new Disposable(() => (this.listeners = this.listeners.filter((l) => l !== listener)));
  };
  fire(e: T): void {
    for (const l of [...this.listeners]) l(e);
  }
  dispose(): void {
    this.listeners = [];
  }
}

export class Uri {
  private constructor(
    readonly scheme: string,
    readonly fsPath: string,
    readonly raw: string,
  ) {}
  static file(p: string): Uri {
    return new Uri("file", path.resolve(p), `file://${path.resolve(p)}`);
  }
  static parse(value: string): Uri {
    const scheme = value.split(":", 1)[0];
    return scheme === "file" ? Uri.file(decodeURIComponent(value.replace(/^file:\/\//, ""))) : new Uri(scheme, "", value);
  }
  static joinPath(base: Uri, ...parts: string[]): Uri {
    return Uri.file(path.join(base.fsPath, ...parts));
  }
  get path(): string {
    return this.fsPath;
  }
  toString(): string {
    return this.raw;
  }
}

export class ThemeColor {
  constructor(readonly id: string) {}
}

export class ThemeIcon {
  constructor(
    readonly id: string,
    readonly color?: ThemeColor,
  ) {}
}

export enum TreeItemCollapsibleState {
  None = 0,
  Collapsed = 1,
  Expanded = 2,
}

export class TreeItem {
  id?: string;
  description?: string;
  tooltip?: string;
  contextValue?: string;
  iconPath?: ThemeIcon;
  constructor(
    public label: string,
    public collapsibleState: TreeItemCollapsibleState = TreeItemCollapsibleState.None,
  ) {}
}

export enum StatusBarAlignment {
  Left = 1,
  Right = 2,
}

export enum ProgressLocation {
  SourceControl = 1,
  Window = 10,
  Notification = 15,
}

export enum ViewColumn {
  Active = -1,
  Beside = -2,
  One = 1,
}

export enum ConfigurationTarget {
  Global = 1,
  Workspace = 2,
  WorkspaceFolder = 3,
}

// vscode-languageclient subclasses these at load time; the tests never construct them.
export class CallHierarchyItem {}
export class CodeLens {}
export class CompletionItem {}
export class DocumentLink {}
export class InlayHint {}
export class SymbolInformation {}
export class TypeHierarchyItem {}
export class CodeAction {}
export class Diagnostic {}
export class CancellationError extends Error {}

// ------------------------------------------------------------------- recorded test state ---

export interface Shown {
  kind: "info" | "warning" | "error";
  message: string;
  items: string[];
}

export interface OpenedDocument {
  uri: Uri;
  languageId: string;
  content: string;
}

/** Everything the code under test did through the API, and the answers it will get. */
export const recorded = {
  messages: [] as Shown[],
  quickPicks: [] as { items: unknown[]; options: unknown }[],
  inputBoxes: [] as { value?: string; prompt?: string; validate?: (v: string) => unknown }[],
  openDialogs: [] as unknown[],
  executed: [] as { command: string; args: unknown[] }[],
  documents: [] as OpenedDocument[],
  shownDocuments: [] as Uri[],
  terminals: [] as { name?: string; cwd?: string; sent: string[] }[],
  log: [] as string[],
  statusBarItems: [] as { text: string }[],
};

/** Answers for the next prompts, in order. A function receives the items (quick pick). */
export const answers = {
  quickPick: [] as ((items: unknown[]) => unknown)[],
  inputBox: [] as (string | undefined)[],
  message: [] as (string | undefined)[],
  openDialog: [] as (Uri[] | undefined)[],
};

export const settings = new Map<string, unknown>();
const registered = new Map<string, (...args: unknown[]) => unknown>();

let untitled = 0;

export function reset(folders: string[] = []): void {
  for (const list of Object.values(recorded)) list.length = 0;
  answers.quickPick.length = 0;
  answers.inputBox.length = 0;
  answers.message.length = 0;
  answers.openDialog.length = 0;
  settings.clear();
  registered.clear();
  workspace.workspaceFolders = folders.map((f, index) => ({ uri: Uri.file(f), name: path.basename(f), index }));
  window.activeTextEditor = undefined;
}

// ------------------------------------------------------------------------------ window ---

function message(kind: Shown["kind"]) {
  return (text: string, ...items: unknown[]): Promise<string | undefined> => {
    const labels = items.filter((i): i is string => typeof i === "string");
    recorded.messages.push({ kind, message: text, items: labels });
    return Promise.resolve(answers.message.shift());
  };
}

export interface StubOutputChannel {
  name: string;
  lines: string[];
  append(s: string): void;
  appendLine(s: string): void;
  show(): void;
  clear(): void;
  dispose(): void;
}

export const window = {
  activeTextEditor: undefined as { document: { uri: Uri; getText(): string } } | undefined,
  showInformationMessage: message("info"),
  showWarningMessage: message("warning"),
  showErrorMessage: message("error"),
  showQuickPick(items: unknown[] | Promise<unknown[]>, options?: unknown): Promise<unknown> {
    return Promise.resolve(items).then((list) => {
      recorded.quickPicks.push({ items: list, options });
      const answer = answers.quickPick.shift();
      return answer ? answer(list) : undefined;
    });
  },
  showInputBox(options?: { value?: string; prompt?: string; validateInput?: (v: string) => unknown }): Promise<string | undefined> {
    recorded.inputBoxes.push({ value: options?.value, prompt: options?.prompt, validate: options?.validateInput });
    return Promise.resolve(answers.inputBox.shift());
  },
  showOpenDialog(options?: unknown): Promise<Uri[] | undefined> {
    recorded.openDialogs.push(options);
    return Promise.resolve(answers.openDialog.shift());
  },
  createOutputChannel(name: string): StubOutputChannel {
    const lines: string[] = [];
    return {
      name,
      lines,
      append: (s) => lines.push(s),
      appendLine: (s) => {
        lines.push(s);
        recorded.log.push(s);
      },
      show: () => undefined,
      clear: () => (lines.length = 0),
      dispose: () => undefined,
    };
  },
  createStatusBarItem(id?: string, alignment?: StatusBarAlignment, priority?: number) {
    const item = {
      id,
      alignment,
      priority,
      name: "",
      text: "",
      tooltip: "" as unknown,
      command: undefined as unknown,
      backgroundColor: undefined as ThemeColor | undefined,
      visible: false,
      show() {
        this.visible = true;
      },
      hide() {
        this.visible = false;
      },
      dispose() {
        this.visible = false;
      },
    };
    recorded.statusBarItems.push(item);
    return item;
  },
  createTreeView(id: string, options: unknown) {
    return { id, options, dispose: () => undefined };
  },
  createTerminal(options: { name?: string; cwd?: string }) {
    const terminal = { name: options.name, cwd: options.cwd, sent: [] as string[] };
    recorded.terminals.push(terminal);
    return {
      show: () => undefined,
      sendText: (text: string) => terminal.sent.push(text),
      dispose: () => undefined,
    };
  },
  async withProgress<R>(_options: unknown, task: (progress: { report(v: unknown): void }, token: { isCancellationRequested: boolean; onCancellationRequested: Event<void> }) => Promise<R>): Promise<R> {
    const cancel = new EventEmitter<void>();
    return task({ report: () => undefined }, { isCancellationRequested: false, onCancellationRequested: cancel.event });
  },
  showTextDocument(doc: { uri: Uri }): Promise<unknown> {
    recorded.shownDocuments.push(doc.uri);
    return Promise.resolve({ document: doc });
  },
};

// --------------------------------------------------------------------------- workspace ---

/** `**\/*.ext`-style globs, `{a,b}` alternatives, over real directories. */
function globToRegExp(glob: string): RegExp {
  let re = "";
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i];
    if (c === "*" && glob[i + 1] === "*") {
      re += glob[i + 2] === "/" ? "(?:.*/)?" : ".*";
      i += glob[i + 2] === "/" ? 2 : 1;
    } else if (c === "*") re += "[^/]*";
    else if (c === "?") re += "[^/]";
    else if (c === "{") re += "(?:";
    else if (c === "}") re += ")";
    else if (c === ",") re += "|";
    else re += c.replace(/[.+^$()|[\]\\]/g, "\\$&");
  }
  return new RegExp(`^${re}$`);
}

function walk(dir: string, base: string, out: string[]): void {
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    const rel = path.relative(base, full);
    if (entry.isDirectory()) {
      if (entry.name !== ".git") walk(full, base, out);
    } else out.push(rel);
  }
}

export const workspace = {
  workspaceFolders: undefined as { uri: Uri; name: string; index: number }[] | undefined,
  findFiles(include: string, exclude?: string | null, maxResults?: number): Promise<Uri[]> {
    const inc = globToRegExp(include);
    const exc = exclude ? globToRegExp(exclude) : undefined;
    const found: Uri[] = [];
    for (const folder of workspace.workspaceFolders ?? []) {
      const files: string[] = [];
      walk(folder.uri.fsPath, folder.uri.fsPath, files);
      for (const rel of files) if (inc.test(rel) && !exc?.test(rel)) found.push(Uri.file(path.join(folder.uri.fsPath, rel)));
    }
    return Promise.resolve(maxResults ? found.slice(0, maxResults) : found);
  },
  asRelativePath(target: Uri | string): string {
    const p = typeof target === "string" ? target : target.fsPath;
    const folder = workspace.workspaceFolders?.[0]?.uri.fsPath;
    return folder && p.startsWith(folder + path.sep) ? path.relative(folder, p) : p;
  },
  getConfiguration(section?: string) {
    return {
      get<T>(key: string, fallback?: T): T | undefined {
        const full = section ? `${section}.${key}` : key;
        return settings.has(full) ? (settings.get(full) as T) : fallback;
      },
    };
  },
  fs: {
    readFile(uri: Uri): Promise<Uint8Array> {
      return fs.promises.readFile(uri.fsPath);
    },
  },
  openTextDocument(arg: Uri | { language?: string; content?: string }): Promise<{ uri: Uri; languageId: string; getText(): string }> {
    let doc: OpenedDocument;
    if (arg instanceof Uri) {
      doc = { uri: arg, languageId: path.extname(arg.fsPath).slice(1), content: fs.readFileSync(arg.fsPath, "utf8") };
    } else {
      doc = { uri: Uri.parse(`untitled:Untitled-${++untitled}`), languageId: arg.language ?? "plaintext", content: arg.content ?? "" };
    }
    recorded.documents.push(doc);
    return Promise.resolve({ uri: doc.uri, languageId: doc.languageId, getText: () => doc.content });
  },
  onDidChangeConfiguration(_listener: unknown): Disposable {
    return new Disposable();
  },
  registerTextDocumentContentProvider(scheme: string, provider: { provideTextDocumentContent(uri: Uri): string }): Disposable {
    contentProviders.set(scheme, provider);
    return new Disposable(() => contentProviders.delete(scheme));
  },
};

/** Content providers registered by scheme (`registerTextDocumentContentProvider`). */
export const contentProviders = new Map<string, { provideTextDocumentContent(uri: Uri): string }>();

// ---------------------------------------------------------------------------- commands ---

export const commands = {
  registerCommand(id: string, fn: (...args: unknown[]) => unknown): Disposable {
    if (registered.has(id)) throw new Error(`command '${id}' already exists`);
    registered.set(id, fn);
    return new Disposable(() => registered.delete(id));
  },
  executeCommand(command: string, ...args: unknown[]): Promise<unknown> {
    recorded.executed.push({ command, args });
    const fn = registered.get(command);
    return Promise.resolve(fn ? fn(...args) : undefined);
  },
  getCommands(): Promise<string[]> {
    return Promise.resolve([...registered.keys()]);
  },
};

export const env = { appName: "stub", language: "en" };

// ---------------------------------------------------------------------------- comments ---

export class Position {
  constructor(
    readonly line: number,
    readonly character: number,
  ) {}
}

export class Range {
  readonly start: Position;
  readonly end: Position;
  constructor(startLine: number, startCharacter: number, endLine: number, endCharacter: number) {
    this.start = new Position(startLine, startCharacter);
    this.end = new Position(endLine, endCharacter);
  }
}

export enum CommentMode {
  Editing = 0,
  Preview = 1,
}

export enum CommentThreadCollapsibleState {
  Collapsed = 0,
  Expanded = 1,
}

export enum CommentThreadState {
  Unresolved = 0,
  Resolved = 1,
}

export interface StubComment {
  body: string | { value: string };
  mode: CommentMode;
  author: { name: string };
  contextValue?: string;
}

export interface StubCommentThread {
  uri: Uri;
  range: Range;
  comments: StubComment[];
  canReply: boolean;
  label?: string;
  contextValue?: string;
  state?: CommentThreadState;
  collapsibleState: CommentThreadCollapsibleState;
  dispose(): void;
}

export interface StubCommentController {
  id: string;
  label: string;
  options?: { prompt?: string; placeHolder?: string };
  commentingRangeProvider?: { provideCommentingRanges(document: unknown, token?: unknown): unknown };
  threads: StubCommentThread[];
  createCommentThread(uri: Uri, range: Range, comments: StubComment[]): StubCommentThread;
  dispose(): void;
}

export const commentControllers: StubCommentController[] = [];

export const comments = {
  createCommentController(id: string, label: string): StubCommentController {
    const controller: StubCommentController = {
      id,
      label,
      threads: [],
      createCommentThread(uri, range, initial) {
        const thread: StubCommentThread = {
          uri,
          range,
          comments: initial,
          canReply: true,
          collapsibleState: CommentThreadCollapsibleState.Collapsed,
          dispose: () => (controller.threads = controller.threads.filter((t) => t !== thread)),
        };
        controller.threads.push(thread);
        return thread;
      },
      dispose: () => {
        const at = commentControllers.indexOf(controller);
        if (at >= 0) commentControllers.splice(at, 1);
      },
    };
    commentControllers.push(controller);
    return controller;
  },
};

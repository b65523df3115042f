// Commands on a plan file: find or pick one (any path on disk), launch it as an epic, validate it.

import * as path from "node:path";
import * as vscode from "vscode";
import { launchPauseOn } from "./approval";
import { DEFAULT_PAUSE_ON } from "./attention";
import { CommandContext, guarded, LANES_CONTAINER_COMMAND, PaletteCommands, requireServer } from "./commandContext";
import { isMarkdownPlan, isPlanPath, EXCLUDE_GLOB, MARKDOWN_GLOB, PLAN_GLOB } from "./plans";
import { Commands, LaunchArgs, LaunchResult, ValidateResult } from "./protocol";

interface PlanItem extends vscode.QuickPickItem {
  uri: vscode.Uri;
}

/** `*.epic.json` files and Markdown files holding a `json storyplan` block, the open one first. */
export async function findPlans(): Promise<vscode.Uri[]> {
  const json = await vscode.workspace.findFiles(PLAN_GLOB, EXCLUDE_GLOB);
  const markdown = await vscode.workspace.findFiles(MARKDOWN_GLOB, EXCLUDE_GLOB, 2000);
  const plans = [...json];
  for (const uri of markdown) {
    try {
      const text = new TextDecoder().decode(await vscode.workspace.fs.readFile(uri));
      if (isMarkdownPlan(text)) plans.push(uri);
    } catch {
      // unreadable: not a plan we can launch
    }
  }
  plans.sort((a, b) => a.fsPath.localeCompare(b.fsPath));
  const active = vscode.window.activeTextEditor?.document.uri;
  if (active) {
    const at = plans.findIndex((p) => p.fsPath === active.fsPath);
    if (at > 0) plans.unshift(...plans.splice(at, 1));
  }
  return plans;
}

export const BROWSE_LABEL = "$(folder-opened) Browse…";

/** A plan anywhere on disk: any absolute path, as `flowd run` takes (docs/editors.md). */
async function browsePlan(title: string): Promise<vscode.Uri | undefined> {
  const picked = await vscode.window.showOpenDialog({
    title,
    openLabel: "Use this plan",
    canSelectMany: false,
    filters: { "Story plans": ["json", "md"], "All files": ["*"] },
  });
  return picked?.[0];
}

async function pickPlan(title: string): Promise<vscode.Uri | undefined> {
  const plans = await findPlans();
  if (plans.length === 0) {
    const choice = await vscode.window.showWarningMessage(
      "flowd: no plan in this workspace (*.epic.json, or a Markdown file with a ```json storyplan block).",
      "Browse…",
      "Draft Epic Plan",
    );
    if (choice === "Browse…") return browsePlan(title);
    if (choice === "Draft Epic Plan") await vscode.commands.executeCommand(PaletteCommands.draftPlan);
    return undefined;
  }
  const items: (PlanItem | (vscode.QuickPickItem & { uri?: undefined }))[] = plans.map((uri) => ({
    label: path.basename(uri.fsPath),
    description: vscode.workspace.asRelativePath(uri),
    uri,
  }));
  items.push({ label: BROWSE_LABEL, description: "a plan file anywhere on disk" });
  const picked = await vscode.window.showQuickPick(items, { title, placeHolder: "Plan file", matchOnDescription: true });
  if (picked && !picked.uri) return browsePlan(title);
  return picked?.uri;
}

/** The plan named by the argument, the active editor when it holds one, or the user's pick. */
async function planFromArg(arg: unknown, title: string): Promise<vscode.Uri | undefined> {
  if (arg instanceof vscode.Uri) return arg;
  return pickPlan(title);
}

function parseConcurrency(value: string): number | undefined {
  return value.trim() === "" ? undefined : Number(value.trim());
}

export async function launchEpic(ctx: CommandContext, arg?: unknown): Promise<LaunchResult | undefined> {
  const server = requireServer(ctx);
  if (!server) return undefined;
  const plan = await planFromArg(arg, "Flow: Launch Epic");
  if (!plan) return undefined;
  const preset = vscode.workspace.getConfiguration("flowd").get<number | null>("defaultConcurrency");
  const concurrency = await vscode.window.showInputBox({
    title: `Launch ${path.basename(plan.fsPath)}`,
    prompt: "Stories at once (empty: the project's setting)",
    value: preset ? String(preset) : "",
    validateInput: (v) => {
      const n = parseConcurrency(v);
      return n === undefined || (Number.isInteger(n) && n >= 1) ? undefined : "A whole number of stories, 1 or more, or empty.";
    },
  });
  if (concurrency === undefined) return undefined;
  const settings = vscode.workspace.getConfiguration("flowd");
  const pauseOn = launchPauseOn(settings.get<string[]>("pauseOn") ?? DEFAULT_PAUSE_ON, settings.get<boolean>("pauseOnMerge") ?? false);
  const args: LaunchArgs = { plan: plan.fsPath, pauseOn };
  const n = parseConcurrency(concurrency);
  if (n !== undefined) args.concurrency = n;
  const result = await guarded(ctx, "launching the epic", () => server.executeCommand<LaunchResult>(Commands.launchEpic, args));
  if (!result) return undefined;
  ctx.log.appendLine(`launched epic ${result.epicId} as run ${result.runId} on ${result.epicBranch}`);
  void vscode.window.showInformationMessage(`flowd: epic ${result.epicId} launched (run ${result.runId}, branch ${result.epicBranch}).`);
  void vscode.commands.executeCommand(LANES_CONTAINER_COMMAND);
  void ctx.refresh();
  return result;
}

export async function validatePlan(ctx: CommandContext, arg?: unknown): Promise<ValidateResult | undefined> {
  const server = requireServer(ctx);
  if (!server) return undefined;
  let plan: vscode.Uri | undefined = arg instanceof vscode.Uri ? arg : undefined;
  const active = vscode.window.activeTextEditor?.document;
  if (!plan && active && (isPlanPath(active.uri.fsPath) || isMarkdownPlan(active.getText()))) plan = active.uri;
  plan ??= await pickPlan("Flow: Validate Plan");
  if (!plan) return undefined;
  const name = vscode.workspace.asRelativePath(plan);
  const result = await guarded(ctx, "validating the plan", () => server.executeCommand<ValidateResult>(Commands.validatePlan, { plan: plan.fsPath }));
  if (!result) return undefined;
  if (result.violations.length === 0) {
    void vscode.window.showInformationMessage(`flowd: ${name} is a valid plan.`);
  } else {
    ctx.log.appendLine(`${name}: ${result.violations.length} violation(s)`);
    for (const v of result.violations) ctx.log.appendLine(`  - ${v}`);
    const n = result.violations.length;
    void vscode.window.showWarningMessage(`flowd: ${name} has ${n} violation${n === 1 ? "" : "s"}: ${result.violations[0]}`, "Show All").then((choice) => {
      if (choice === "Show All") ctx.log.show(true);
    });
  }
  return result;
}

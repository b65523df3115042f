import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterEach, beforeEach, describe, test } from "node:test";
import { activate, deactivate } from "../src/extension";
import * as stub from "./stubs/vscode";

let workspace: string;

beforeEach(() => {
  workspace = fs.mkdtempSync(path.join(os.tmpdir(), "flowd-activate-"));
  stub.reset([workspace]);
});

afterEach(async () => {
  await deactivate();
  fs.rmSync(workspace, { recursive: true, force: true });
});

describe("activate", () => {
  test("without flowd: commands registered, one clear notification, status bar says so", async () => {
    stub.settings.set("flowd.path", path.join(workspace, "no-such", "flowd"));
    const context = { subscriptions: [] as { dispose(): unknown }[] };
    const api = activate(context as never);
    assert.ok(api.model);
    const ids = await stub.commands.getCommands();
    for (const id of ["flowd.launchEpic", "flowd.cancelRun", "flowd.resumeRun", "flowd.validatePlan", "flowd.showCostReport", "flowd.draftPlan", "flowd.addRevision", "flowd.showGraph"]) {
      assert.ok(ids.includes(id), id);
    }
    assert.ok(!ids.some((id) => id.startsWith("flow.")), "the server's own command ids are left to the language client");
    assert.deepEqual(
      stub.commentControllers.map((c) => c.id),
      ["flowd.review"],
    );
    const errors = stub.recorded.messages.filter((m) => m.kind === "error");
    assert.equal(errors.length, 1);
    assert.match(errors[0].message, /^The setting flowd.path points at .*no-such\/flowd, which is not an executable file/);
    assert.deepEqual(errors[0].items, ["Open Settings", "Show Log"]);
    const bar = stub.recorded.statusBarItems[0];
    assert.equal(bar.text, "$(warning) flowd not found");
    // Launching now explains instead of failing obscurely.
    await stub.commands.executeCommand("flowd.launchEpic");
    assert.match(stub.recorded.messages[stub.recorded.messages.length - 1].message, /language server is not running/);
    for (const d of context.subscriptions) d.dispose();
  });
});

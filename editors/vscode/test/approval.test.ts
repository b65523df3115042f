// Approve before merge from VS Code, on the wire (docs/answers.md: `merge`): a run launched with
// `flowd.pauseOnMerge` on stops its finished story `ready`; the extension's own code opens its
// diff against the epic (the epic side through the `flowd-base:` provider, read from git), asks
// for changes in free text (the story goes back and asks again), takes a line comment on the
// diff (back again), then approves, and the story merges. The real `flowd serve` (FLOWD_BIN),
// real git, the bundled scripted agent; no timing: every wait is on a notification.

import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { after, before, describe, test } from "node:test";
import { BASE_SCHEME, changedFiles, forkPoint, isApproval, launchPauseOn, readBaseUri, readyStories } from "../src/approval";
import { ApprovalCommands, approveStory, registerApproval, requestChanges } from "../src/approvalView";
import { DEFAULT_PAUSE_ON } from "../src/attention";
import { CommandContext } from "../src/commands";
import { LanesModel } from "../src/lanesModel";
import { AttentionParams, Commands, FlowServer, isRunActive, LaunchResult } from "../src/protocol";
import { ADD_REVISION_COMMAND, ReviewComments } from "../src/reviewComments";
import * as stub from "./stubs/vscode";
import { git, oneStoryRepo, startServer, traceEvents, WireServer } from "./wireServer";

const FLOWD_BIN = process.env.FLOWD_BIN ?? "";
const WIRE = process.env.FLOWD_WIRE !== "0";

/** One story `a` owning a.txt: "quiet" first; "LOUD" when told to shout; "LOUD!" for a bang. */
function makeRepo(base: string): { repo: string; plan: string } {
  const script = {
    model: "scripted",
    rules: [
      { when: { role: "coder", story: "a", prompt: "add a bang" }, writes: { "a.txt": "LOUD!\n" }, reply: "done" },
      { when: { role: "coder", story: "a", prompt: "shout it" }, writes: { "a.txt": "LOUD\n" }, reply: "done" },
      { when: { role: "coder", story: "a" }, writes: { "a.txt": "quiet\n" }, reply: "done" },
    ],
  };
  return oneStoryRepo(base, { epicId: "ok", epic: "Approve", initial: "before\n", script });
}

test("launchPauseOn: merge only with the setting on, never twice", () => {
  assert.deepEqual(launchPauseOn(DEFAULT_PAUSE_ON, false), ["budget", "blocked", "noExecutor"]);
  assert.deepEqual(launchPauseOn(DEFAULT_PAUSE_ON, true), ["budget", "blocked", "noExecutor", "merge"]);
  assert.deepEqual(launchPauseOn(["merge"], true), ["merge"]);
  assert.deepEqual(launchPauseOn(["merge", "budget"], false), ["merge", "budget"]); // asked for by name
});

test("isApproval: a story's pause that offers approve, nothing else", () => {
  const base: AttentionParams = { runId: "r", lane: "a", reason: "paused", message: "m", actions: ["approve"] };
  assert.equal(isApproval(base), true);
  assert.equal(isApproval({ ...base, actions: ["wait", "stop"] }), false);
  assert.equal(isApproval({ ...base, reason: "blocked" }), false);
  assert.equal(isApproval({ ...base, lane: undefined }), false);
});

if (!WIRE) {
  process.stderr.write("approval wire tests opted out with FLOWD_WIRE=0\n");
} else if (!FLOWD_BIN) {
  test("approval wire tests need FLOWD_BIN=/path/to/flowd (make test sets it)", () => {
    assert.fail("FLOWD_BIN is not set: run `make test` from the repository root, or set FLOWD_WIRE=0 to opt out");
  });
} else {
  describe("approve before merge: flow.answer and flow.addRevision on the wire", { timeout: 300_000 }, () => {
    let tmp: string;
    let repo: string;
    let plan: string;
    let wire: WireServer;
    let server: FlowServer;
    let model: LanesModel;
    let until: WireServer["until"];
    const attention: AttentionParams[] = [];
    const asked = (): AttentionParams[] => attention.filter(isApproval);

    before(async () => {
      tmp = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), "flowd-approve-")));
      ({ repo, plan } = makeRepo(tmp));
      const home = path.join(tmp, "home");
      fs.mkdirSync(home);
      wire = await startServer(repo, home, (conn, wake) =>
        conn.onNotification("flow/attention", (p: AttentionParams) => {
          attention.push(p);
          wake();
        }),
      );
      ({ server, model, until } = wire);
    });

    after(async () => {
      await wire?.close();
      fs.rmSync(tmp, { recursive: true, force: true });
    });

    test("review the diff, request changes, comment on a line, approve: the story merges what was approved", async () => {
      stub.reset([repo]);
      const log = stub.window.createOutputChannel("flowd");
      const ctx: CommandContext = { model, log: log as never, server: () => server, flowdPath: () => undefined, refresh: () => Promise.resolve(undefined) };
      const disposables = registerApproval(ctx);
      const { runId } = await server.executeCommand<LaunchResult>(Commands.launchEpic, { plan, pauseOn: launchPauseOn(DEFAULT_PAUSE_ON, true) });

      await until(() => model.run(runId)?.lanes.get("a")?.status === "ready" && asked().length === 1, "story a ready, asked once");
      assert.deepEqual(readyStories(model), [{ runId, story: "a", epicId: "ok" }]);
      assert.equal(git(repo, "show", "epic/ok:a.txt"), "before\n"); // nothing merged yet

      // The diff: the extension's command, with no argument (the one ready story).
      stub.answers.message.push(undefined); // the Approve / Request Changes prompt, dismissed
      const shown = await stub.commands.executeCommand(ApprovalCommands.review);
      assert.deepEqual(shown, ["a.txt"]);
      const changes = stub.recorded.executed.find((e) => e.command === "vscode.changes");
      assert.ok(changes, "vscode.changes was opened");
      assert.equal(changes.args[0], "Story a against epic/ok");
      const [[mine, theirs, modified]] = changes.args[1] as stub.Uri[][];
      assert.equal(modified, mine);
      const worktree = path.join(tmp, "app.flowd", "ok", "a");
      assert.equal(mine.fsPath, path.join(worktree, "a.txt"));
      assert.equal(fs.readFileSync(mine.fsPath, "utf8"), "quiet\n");
      const provider = stub.contentProviders.get(BASE_SCHEME);
      assert.ok(provider && readBaseUri(theirs.toString().split("?")[1]));
      assert.equal(provider.provideTextDocumentContent(theirs), "before\n"); // the epic side
      assert.deepEqual(changedFiles(repo, forkPoint(repo, "story/ok/a", "epic/ok") ?? "", "story/ok/a"), [{ status: "M", path: "a.txt", basePath: "a.txt" }]);
      assert.equal(stub.recorded.messages.at(-1)?.message.includes("ready to merge"), true);
      assert.deepEqual(stub.recorded.messages.at(-1)?.items, ["Approve", "Request Changes…"]);

      // Request Changes…: free text to its coder; it goes back and asks again.
      stub.answers.inputBox.push("   ");
      assert.equal(await requestChanges(ctx, { runId, story: "a" }), undefined); // empty: nothing sent
      stub.answers.inputBox.push("shout it");
      assert.equal(await requestChanges(ctx, { runId, story: "a" }), "shout it");
      await until(() => asked().length === 2 && model.run(runId)?.lanes.get("a")?.status === "ready", "asked again");
      assert.equal(fs.readFileSync(path.join(worktree, "a.txt"), "utf8"), "LOUD\n");

      // A comment on a line of the diff's story side sends it back too.
      const review = new ReviewComments({ model, server: () => server, repo: () => repo });
      stub.commands.registerCommand(ADD_REVISION_COMMAND, (reply) => review.submit(reply as never));
      const [controller] = stub.commentControllers;
      const thread = controller.createCommentThread(stub.Uri.file(path.join(worktree, "a.txt")), new stub.Range(0, 0, 0, 0), []);
      await stub.commands.executeCommand(ADD_REVISION_COMMAND, { thread, text: "add a bang" });
      assert.equal(thread.state, stub.CommentThreadState.Resolved);
      await until(() => asked().length === 3 && model.run(runId)?.lanes.get("a")?.status === "ready", "asked a third time");

      assert.equal(await approveStory(ctx, { runId, story: "a" }), "approve");
      await until(() => !isRunActive(model.run(runId)?.status ?? "running"), "the run ended");
      assert.equal(model.run(runId)?.status, "done");
      assert.equal(git(repo, "show", "epic/ok:a.txt"), "LOUD!\n");
      const answered = traceEvents<{ effect?: string; by?: string }>(repo, runId, "StoryAnswered");
      assert.deepEqual(
        answered.map((e) => [e.effect, e.by]),
        [
          ["revise", "editor"],
          ["revise", "editor"],
          ["approve", "editor"],
        ],
      );
      review.dispose();
      for (const d of disposables) d.dispose();
    });
  });
}

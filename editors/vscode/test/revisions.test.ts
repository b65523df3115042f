// Review from the editor, on the wire: a comment thread on a line of a story worktree's file goes
// to the real `flowd serve` (FLOWD_BIN) as `flow.addRevision`, the run's answer lands on the
// thread, and the story's coder takes the comment (its scripted rule matches the comment's text).
// The story's first coder turn waits for a file the test creates, so nothing depends on timing.

import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { after, before, describe, test } from "node:test";
import { LanesModel } from "../src/lanesModel";
import { Commands, FlowServer, isRunActive, LaunchResult } from "../src/protocol";
import { ADD_REVISION_COMMAND, REVIEW_CONTROLLER, ReviewComments } from "../src/reviewComments";
import { worktreeTarget } from "../src/revisions";
import * as stub from "./stubs/vscode";
import { git, oneStoryRepo, startServer, traceEvents, WireServer } from "./wireServer";

const FLOWD_BIN = process.env.FLOWD_BIN ?? "";
const WIRE = process.env.FLOWD_WIRE !== "0";

/** A repository whose one story `a` owns a.txt; its first coder turn waits for `go`. */
function makeRepo(base: string, go: string): { repo: string; plan: string } {
  const wait = `sh -c 'for i in $(seq 1200); do [ -e ${go} ] && exit 0; sleep 0.05; done; exit 1'`;
  const script = {
    model: "scripted",
    rules: [
      { when: { role: "coder", story: "a", prompt: "make it loud" }, writes: { "a.txt": "LOUD\n" }, reply: "done" },
      { when: { role: "coder", story: "a" }, writes: { "a.txt": "quiet, v2\n" }, run: [wait], reply: "done" },
    ],
  };
  return oneStoryRepo(base, { epicId: "rev", epic: "Review", initial: "quiet\n", script });
}

function bodyOf(comment: stub.StubComment): string {
  return typeof comment.body === "string" ? comment.body : comment.body.value;
}

if (!WIRE) {
  process.stderr.write("review wire tests opted out with FLOWD_WIRE=0\n");
} else if (!FLOWD_BIN) {
  test("review wire tests need FLOWD_BIN=/path/to/flowd (make test sets it)", () => {
    assert.fail("FLOWD_BIN is not set: run `make test` from the repository root, or set FLOWD_WIRE=0 to opt out");
  });
} else {
  describe("review comments: flow.addRevision on the wire", { timeout: 240_000 }, () => {
    let tmp: string;
    let repo: string;
    let plan: string;
    let go: string;
    let wire: WireServer;
    let server: FlowServer;
    let model: LanesModel;
    let until: WireServer["until"];

    before(async () => {
      tmp = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), "flowd-review-")));
      go = path.join(tmp, "go");
      ({ repo, plan } = makeRepo(tmp, go));
      const home = path.join(tmp, "home");
      fs.mkdirSync(home);
      wire = await startServer(repo, home);
      ({ server, model, until } = wire);
    });

    after(async () => {
      fs.writeFileSync(go, "");
      await wire?.close();
      fs.rmSync(tmp, { recursive: true, force: true });
    });

    test("a thread on a story worktree's line becomes the story's next task; a bad line stays open with the reason", async () => {
      const { runId } = await server.executeCommand<LaunchResult>(Commands.launchEpic, { plan });
      await until(() => model.run(runId)?.lanes.get("a")?.status === "active");
      const file = path.join(tmp, "app.flowd", "rev", "a", "a.txt");
      await until(() => fs.existsSync(file));
      assert.deepEqual(worktreeTarget(model, repo, file), { runId, story: "a" });
      assert.equal(worktreeTarget(model, repo, path.join(repo, "a.txt")), undefined); // the checkout's copy asks the server

      stub.reset([repo]);
      const review = new ReviewComments({ model, server: () => server, repo: () => repo });
      stub.commands.registerCommand(ADD_REVISION_COMMAND, (reply) => review.submit(reply as never));
      const [controller] = stub.commentControllers;
      assert.equal(controller.id, REVIEW_CONTROLLER);
      const ranges = (await controller.commentingRangeProvider?.provideCommentingRanges({ uri: stub.Uri.file(file), lineCount: 1 })) as stub.Range[];
      assert.equal(ranges.length, 1);
      // The user's checkout: story a owns a.txt there too (the server's flow/perimeter says so).
      const mine = (await controller.commentingRangeProvider?.provideCommentingRanges({ uri: stub.Uri.file(path.join(repo, "a.txt")), lineCount: 1 })) as stub.Range[];
      assert.equal(mine.length, 1);
      const unowned = (await controller.commentingRangeProvider?.provideCommentingRanges({ uri: stub.Uri.file(path.join(repo, "rev.epic.json")), lineCount: 1 })) as stub.Range[];
      assert.deepEqual(unowned, []);

      const bad = controller.createCommentThread(stub.Uri.file(file), new stub.Range(6, 0, 6, 0), []);
      await stub.commands.executeCommand(ADD_REVISION_COMMAND, { thread: bad, text: "nothing here" });
      assert.deepEqual(bad.comments.map((c) => c.author.name), ["you", "flowd"]);
      assert.match(bodyOf(bad.comments[1]), /^a\.txt:7 is past the end of the file \(1 line\(s\)\)/);
      assert.equal(bad.state, stub.CommentThreadState.Unresolved);

      const thread = controller.createCommentThread(stub.Uri.file(file), new stub.Range(0, 0, 0, 0), []);
      await stub.commands.executeCommand(ADD_REVISION_COMMAND, { thread, text: "make it loud" });
      assert.deepEqual(
        thread.comments.map((c) => [c.author.name, bodyOf(c)]),
        [
          ["you", "make it loud"],
          ["flowd", "Story a takes the revision on a.txt:1 next, after its current task."],
        ],
      );
      assert.equal(thread.state, stub.CommentThreadState.Resolved);
      assert.equal(thread.canReply, false);

      fs.writeFileSync(go, "");
      await until(() => !isRunActive(model.run(runId)?.status ?? "running"));
      assert.equal(model.run(runId)?.status, "done");
      assert.equal(git(repo, "show", "epic/rev:a.txt"), "LOUD\n");
      const asked = traceEvents<{ by?: string; line?: number }>(repo, runId, "RevisionRequested");
      assert.deepEqual(
        asked.map((e) => [e.by, e.line]),
        [["editor", 1]],
      );
      review.dispose();
    });
  });
}

-- GENERATED from `flowd schema protocol` by flowd/schema/lua.py: do not edit by hand.
-- Regenerate: `node editors/vscode/scripts/protocol.mjs` (it writes the extension's protocol.ts too).
-- flowd's custom LSP protocol (docs/protocol.md): every method's wire name by its short name.
return {
  commands = {
    launchEpic = "flow.launchEpic",
    cancelEpic = "flow.cancelEpic",
    resumeEpic = "flow.resumeEpic",
    validatePlan = "flow.validatePlan",
    answer = "flow.answer",
    addRevision = "flow.addRevision",
  },
  requests = {
    status = "flow/status",
    costReport = "flow/costReport",
    perimeter = "flow/perimeter",
    graph = "flow/graph",
    timeline = "flow/timeline",
  },
  notifications = {
    run = "flow/run",
    lane = "flow/lane",
    task = "flow/task",
    clone = "flow/clone",
    cost = "flow/cost",
    attention = "flow/attention",
  },
  -- Outcomes a run ends with (RunEnded.outcome); any other status means it is still going.
  run_outcomes = { "done", "failed", "cancelled", "halted" },
  -- The words of status and reason fields (flowd.protocol.ENUMS), by snake_case name.
  lane_statuses = { "planned", "active", "waiting", "ready", "done", "failed", "skipped", "queued", "merging" },
  run_statuses = { "running", "paused", "interrupted", "done", "failed", "cancelled", "halted" },
  attention_reasons = { "paused", "blocked", "failed", "budget", "repaired", "escaped", "unconfined", "cleared" },
  waiting_reasons = { "paused", "blocked", "budget", "failed" },
  pause_reasons = { "budget", "blocked", "noExecutor", "merge" },
  timeline_phases = { "planned", "coding", "gated", "queued", "merging", "merged", "paused", "failed" },
}

-- The user commands (:FlowLaunch, :FlowCancel, :FlowResume, :FlowStatus, :FlowCost,
-- :FlowValidate, :FlowAnswer, and the ones other modules serve), each a short flow: ask, send
-- through the repository's client, say the outcome.
local Cm = {}
local P = require("flowd.protocol")
local S = require("flowd.state")
local H = require("flowd.handlers")
local K = require("flowd.client")
local R, C = P.requests, P.commands
-- An older flowd server may lack `flow.answer`: :FlowAnswer checks its command list first.
local ANSWER = C.answer
local OTHER = "other answer…"

local function config() return require("flowd").config end
local function say(msg, level) require("flowd").say(msg, level) end

local function plan_arg(arg)
  local plan = arg ~= "" and arg or vim.api.nvim_buf_get_name(0)
  if plan == "" then return nil end
  return vim.fn.fnamemodify(plan, ":p")
end

local function pick_run(arg, wanted, what, on_run)
  if arg ~= "" then return on_run(arg) end
  local client = K.client()
  if not client then return end
  local candidates = {}
  for _, run in ipairs(S.runs_newest_first(S.of(client.id))) do
    if wanted(run) then table.insert(candidates, run) end
  end
  if #candidates == 0 then return say("no run to " .. what, vim.log.levels.WARN) end
  if #candidates == 1 then return on_run(candidates[1].runId) end
  vim.ui.select(candidates, {
    prompt = "flowd: run to " .. what,
    format_item = function(r) return ("%s %s %s"):format(r.runId, r.epicId, r.status) end,
  }, function(choice) if choice then on_run(choice.runId) end end)
end

function Cm.launch(arg)
  local plan = plan_arg(arg or "")
  if not plan then return say("give a plan: :FlowLaunch path/to/epic.json", vim.log.levels.ERROR) end
  local args = { plan = plan }
  if config().pause_on or config().pause_on_merge then args.pauseOn = require("flowd.approve").pause_on(config()) end
  K.execute(C.launchEpic, args, function(res)
    say(("launched run %s (epic %s on %s)"):format(res.runId, res.epicId, res.epicBranch))
  end)
end

function Cm.cancel(arg)
  pick_run(arg or "", function(r) return S.ACTIVE[r.status] end, "cancel", function(run_id)
    K.execute(C.cancelEpic, { runId = run_id }, function(res)
      say(("run %s: %s"):format(res.runId, res.outcome))
    end)
  end)
end

local function resumable(s, run)
  if S.ACTIVE[run.status] or run.status == "done" then return false end
  for _, other in pairs(s.runs) do
    -- A later run of the same epic already took over from this one.
    if other.epicId == run.epicId and S.sort_key(other.runId) > S.sort_key(run.runId) then return false end
  end
  return true
end

function Cm.resume(arg)
  local client = K.client()
  if not client then return end
  local s = S.of(client.id)
  pick_run(arg or "", function(r) return resumable(s, r) end, "resume", function(run_id)
    K.execute(C.resumeEpic, { runId = run_id }, function(res)
      say(("resumed as run %s (epic %s)"):format(res.runId, res.epicId))
    end)
  end)
end

function Cm.status()
  K.request(R.status, vim.empty_dict(), function(res)
    local lines = {}
    for _, run in ipairs(res.runs) do
      table.insert(lines, ("%s %s %s"):format(run.runId, run.epicId, run.status))
      for _, lane in ipairs(run.lanes) do
        local task = lane.task and ("task %d/%d %s"):format(lane.task.index, lane.task.count, lane.task.title) or ""
        table.insert(lines, ("  %-12s %-9s %s"):format(lane.lane, lane.status, task))
      end
    end
    say(#lines > 0 and table.concat(lines, "\n") or "no runs")
  end)
end

function Cm.cost()
  K.request(R.costReport, { format = "text" }, function(res) say(res.text) end)
end

function Cm.validate(arg)
  local plan = plan_arg(arg or "")
  if not plan then return say("give a plan: :FlowValidate path/to/epic.json", vim.log.levels.ERROR) end
  K.execute(C.validatePlan, { plan = plan }, function(res)
    if #res.violations == 0 then
      say(plan .. ": no problems")
    else
      say(plan .. ":\n" .. table.concat(res.violations, "\n"), vim.log.levels.ERROR)
    end
  end)
end

--- :FlowAnswer: answers a paused story or run with `flow.answer`, when the server has it.
function Cm.answer(arg)
  local client = K.client()
  if not client then return end
  local commands = vim.tbl_get(client.server_capabilities or {}, "executeCommandProvider", "commands") or {}
  if not vim.tbl_contains(commands, ANSWER) then
    return say("answering a paused run is not available yet: this flowd server has no " .. ANSWER,
      vim.log.levels.WARN)
  end
  local pauses = vim.tbl_filter(function(w) return H.PAUSED[w.params.reason] end, S.waiting())
  if #pauses == 0 then return say("nothing waits for an answer") end
  local function answer(p)
    local function send(text)
      text = text and vim.trim(text) or ""
      if text == "" then return end
      local argument = { runId = p.runId, story = p.lane, answer = text }
      K.execute(ANSWER, argument, function(res) say(res.message) end)
    end
    if arg and arg ~= "" then return send(arg) end
    -- Its options, then free text (what a blocked coder needs, or `raise 7`).
    local items = vim.list_extend(vim.deepcopy(p.actions or {}), { OTHER })
    vim.ui.select(items, { prompt = p.message }, function(choice)
      if choice == OTHER then
        vim.ui.input({ prompt = "flowd answer: " }, send)
      else
        send(choice)
      end
    end)
  end
  if #pauses == 1 then return answer(pauses[1].params) end
  vim.ui.select(pauses, {
    prompt = "flowd: answer which?",
    format_item = function(w) return ("%s %s: %s"):format(w.params.runId, w.params.lane or "(run)", w.params.message) end,
  }, function(choice) if choice then answer(choice.params) end end)
end

Cm.COMMANDS = {
  FlowLaunch = { function(o) Cm.launch(o.args) end, { nargs = "?", complete = "file" } },
  FlowCancel = { function(o) Cm.cancel(o.args) end, { nargs = "?" } },
  FlowResume = { function(o) Cm.resume(o.args) end, { nargs = "?" } },
  FlowStatus = { function() Cm.status() end, {} },
  FlowCost = { function() Cm.cost() end, {} },
  FlowValidate = { function(o) Cm.validate(o.args) end, { nargs = "?", complete = "file" } },
  FlowLanes = { function() require("flowd.lanes").lanes() end, {} },
  FlowGraph = { function(o) require("flowd.graph").show(require("flowd"), o.args) end, { nargs = "?" } },
  FlowAnswer = { function(o) Cm.answer(o.args) end, { nargs = "?" } },
  FlowRevise = { function(o) require("flowd.revise").revise(require("flowd"), o.args) end, { nargs = "*" } },
  FlowReview = { function(o) require("flowd.approve").review(require("flowd"), o.args) end, { nargs = "?" } },
  FlowApprove = { function(o) require("flowd.approve").approve(require("flowd"), o.args) end, { nargs = "?" } },
  FlowRequestChanges = { function(o) require("flowd.approve").request_changes(require("flowd"), o.args) end, { nargs = "*" } },
}

return Cm

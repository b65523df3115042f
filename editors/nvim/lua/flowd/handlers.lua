-- The handlers of flowd's notifications (every name from the generated flowd/protocol.lua):
-- each keeps what it says (flowd/state.lua), tells the user of transitions with vim.notify, and
-- redraws the lanes buffer, the statusline and the graph.
local H = {}
local P = require("flowd.protocol")
local S = require("flowd.state")
local V = require("flowd.lanes")
local N = P.notifications

-- `flow/attention` reasons that mean a story waits on a person (generated; `repaired` only informs).
local WAITING = {}
for _, reason in ipairs(P.waiting_reasons) do WAITING[reason] = true end
local PAUSED = { paused = true, blocked = true, budget = true }
H.PAUSED = PAUSED

local function say(msg, level) require("flowd").say(msg, level) end

local function graph_changed(client_id, run_id)
  require("flowd.graph").changed(require("flowd"), client_id, run_id)
end

local LEVEL = { failed = vim.log.levels.ERROR, waiting = vim.log.levels.WARN, halted = vim.log.levels.WARN,
  interrupted = vim.log.levels.WARN, cancelled = vim.log.levels.WARN }

local handlers = {}
H.handlers = handlers

handlers[N.run] = function(_, p, ctx)
  local s = S.of(ctx.client_id)
  local before = s.runs[p.runId]
  s.runs[p.runId] = vim.tbl_extend("force", before or {}, p)
  if before and before.status ~= p.status then
    say(("epic %s %s: %d/%d done, %d failed"):format(p.epicId, p.status, p.done, p.total, p.failed),
      LEVEL[p.status])
  elseif not before and p.status == "running" then
    say(("epic %s running (run %s)"):format(p.epicId, p.runId))
  end
  graph_changed(ctx.client_id, p.runId)
  V.redraw()
end

handlers[N.lane] = function(_, p, ctx)
  local before = S.put_lane(S.of(ctx.client_id), p)
  if (not before or before.status ~= p.status) and p.status ~= "planned" then
    local why = p.reason and (": " .. p.reason) or ""
    say(("%s %s%s"):format(p.lane, p.status, why), LEVEL[p.status])
  end
  -- docs/revisions.md: a merge sent back for revision, a gate green only on a rerun.
  if (p.mergeRevision or 0) > ((before or {}).mergeRevision or 0) then
    say(("%s: epic gates red after merging; merge undone, merge revision %d"):format(p.lane,
      p.mergeRevision), vim.log.levels.WARN)
  end
  if (p.flaky or 0) > ((before or {}).flaky or 0) then
    say(("%s: flaky gates: %d (green only on a rerun; not charged)"):format(p.lane, p.flaky))
  end
  graph_changed(ctx.client_id, p.runId)
  V.redraw()
end

handlers[N.task] = function(_, p, ctx) graph_changed(ctx.client_id, p.runId) end

handlers[N.clone] = function(_, p)
  if p.state == "excluded" then
    say(("executor %s excluded: %s"):format(p.executor, p.reason or ""), vim.log.levels.WARN)
  end
end

handlers[N.cost] = function(_, p, ctx)
  S.of(ctx.client_id).cost[p.runId] = p
  V.redraw()
end

handlers[N.attention] = function(_, p, ctx)
  local open = S.of(ctx.client_id).attention
  local key = p.runId .. "\0" .. (p.lane or "")
  if p.reason == "cleared" then
    open[key] = nil
  elseif WAITING[p.reason] then
    open[key] = p
  end
  local level = p.reason == "cleared" and vim.log.levels.INFO or vim.log.levels.WARN
  local hint = PAUSED[p.reason] and " (:FlowAnswer)" or ""
  if require("flowd.approve").is_approval(p) then hint = " (:FlowReview, :FlowApprove, :FlowRequestChanges)" end
  -- A failed lane is already told by flow/lane; it still counts in the statusline.
  if p.reason ~= "failed" then say(p.message .. hint, level) end
  V.redraw()
end


return H

-- What the servers have told the plugin, per client id (docs/editors.md): runs[runId] = flow/run
-- params (+ epicId), lanes[runId] = { order = {lane...}, by = {lane -> flow/lane params} },
-- cost[runId] = flow/cost, attention[runId .. "\0" .. lane] = the open flow/attention params (lane
-- "" for the run). Branches and paths (a run's `epicBranch`, `reportMarkdown`; a lane's
-- `worktree`, `branch`, `findings`) are the server's, kept as sent: the plugin builds none
-- (docs/protocol.md).
local S = {}

S.ACTIVE = { running = true, paused = true }

local state = {}

function S.of(client_id)
  state[client_id] = state[client_id] or { runs = {}, lanes = {}, cost = {}, attention = {} }
  return state[client_id]
end

--- The state of `client_id` if any (nil: that client never heard from its server).
function S.get(client_id) return state[client_id] end

function S.forget(client_id) state[client_id] = nil end

-- Run ids carry their start time (`<epic>-20261130T090418-3eb1`): newest first, across epics.
function S.sort_key(run_id)
  return run_id:match("%d%d%d%d%d%d%d%dT%d%d%d%d%d%d") or run_id
end

function S.runs_newest_first(s)
  local list = vim.tbl_values(s.runs)
  table.sort(list, function(a, b)
    local ka, kb = S.sort_key(a.runId), S.sort_key(b.runId)
    if ka ~= kb then return ka > kb end
    return a.runId > b.runId
  end)
  return list
end

--- Keep flow/lane params `p`; returns what the lane was before (nil: a new lane).
function S.put_lane(s, p)
  local lanes = s.lanes[p.runId]
  if not lanes then
    lanes = { order = {}, by = {} }
    s.lanes[p.runId] = lanes
  end
  if not lanes.by[p.lane] then table.insert(lanes.order, p.lane) end
  local before = lanes.by[p.lane]
  lanes.by[p.lane] = p
  return before
end

--- The open waits of every flowd client: { { client = id, params = flow/attention params } }.
function S.waiting()
  local out = {}
  for client_id, s in pairs(state) do
    for _, p in pairs(s.attention or {}) do table.insert(out, { client = client_id, params = p }) end
  end
  table.sort(out, function(a, b) return (a.params.runId .. (a.params.lane or "")) < (b.params.runId .. (b.params.lane or "")) end)
  return out
end

--- What the server said of run `run_id` (flow/run params), or nil.
function S.run_of(client_id, run_id) return S.of(client_id).runs[run_id] end

--- What the server said of lane `lane` of run `run_id` (flow/lane params), or nil.
function S.lane_of(client_id, run_id, lane)
  local lanes = S.of(client_id).lanes[run_id]
  return lanes and lanes.by[lane] or nil
end

--- The run :FlowGraph shows by default: the newest running one, else the newest.
function S.default_run(client_id)
  local runs = S.runs_newest_first(S.of(client_id))
  for _, run in ipairs(runs) do
    if S.ACTIVE[run.status] then return run.runId end
  end
  return runs[1] and runs[1].runId
end

return S

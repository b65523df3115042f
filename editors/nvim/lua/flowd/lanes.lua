-- The lanes buffer (:FlowLanes, filetype flowlanes) and the statusline function: what the
-- servers said of the runs (flowd/state.lua), drawn, and redrawn as it changes.
local V = {}
local S = require("flowd.state")

local LANES_FT = "flowlanes"
local lanes_bufs = {} -- client id -> lanes buffer

local function epic_cost(s, epic_id)
  local total, known = 0, false
  for run_id, run in pairs(s.runs) do
    if run.epicId == epic_id then
      local cost = s.cost[run_id] and s.cost[run_id].costUsd or (run.totals and run.totals.costUsd)
      if cost and cost ~= vim.NIL then
        total, known = total + cost, true
      end
    end
  end
  return known and total or nil
end

--- A short string for the statusline: "⟳ 2/5 lanes · $0.04" (lanes done of the epic's lanes, and
--- what the epic cost over all its runs), "" when no run is going.
function V.statusline()
  local parts = {}
  for _, client in ipairs(vim.lsp.get_clients({ name = "flowd" })) do
    local s = S.get(client.id)
    if s then
      for _, run in ipairs(S.runs_newest_first(s)) do
        if S.ACTIVE[run.status] then
          local text = ("⟳ %d/%d lanes"):format(run.done or 0, run.total or 0)
          local cost = epic_cost(s, run.epicId)
          if cost then text = text .. (" · $%.2f"):format(cost) end
          table.insert(parts, text)
        end
      end
    end
  end
  -- Stories waiting on a person (docs/editors.md).
  local count = #S.waiting()
  if count > 0 then table.insert(parts, ("⚑ %d"):format(count)) end
  return table.concat(parts, " | ")
end

local function money(v)
  if v == nil or v == vim.NIL then return "—" end
  return ("$%.2f"):format(v)
end

--- The lines of the lanes buffer: per run (running ones, else the latest), a header and one line per
--- lane with status (with the merge train's batch), executor#clone, task i/n, tokens and cost, then its
--- merge revision and flaky gates if any.
function V.lane_lines(client_id)
  local s = S.get(client_id)
  if not s then return { "flowd: no server" } end
  local runs, shown = S.runs_newest_first(s), {}
  for _, run in ipairs(runs) do
    if S.ACTIVE[run.status] then table.insert(shown, run) end
  end
  if #shown == 0 and runs[1] then shown = { runs[1] } end
  if #shown == 0 then return { "flowd: no runs yet (:FlowLaunch [plan])" } end
  local lines = {}
  for _, run in ipairs(shown) do
    table.insert(lines, ("%s  %s  %s  %d/%d done  %s"):format(run.epicId or "?", run.runId, run.status,
      run.done or 0, run.total or 0, money(epic_cost(s, run.epicId))))
    local lanes = s.lanes[run.runId] or { order = {}, by = {} }
    for _, name in ipairs(lanes.order) do
      local l = lanes.by[name]
      local who = l.executor and (l.executor .. (l.clone and ("#" .. l.clone) or "")) or "-"
      if l.node then who = who .. " @" .. l.node end -- a lane on a cluster node (docs/scale-out.md)
      local task = l.task and ("task %d/%d %s"):format(l.task.index, l.task.count, l.task.title) or "-"
      local tokens = ("%s%d tok"):format(l.estimated and "~" or "", l.tokens or 0)
      local extra = (l.port and ("  port " .. (l.ports or l.port)) or "")
        .. (l.mergeRevision and ("  merge revision " .. l.mergeRevision) or "")
        .. (l.flaky and ("  flaky gates: " .. l.flaky) or "")
      -- The merge train (docs/merging.md): `queued`, or `merging #<batch>` while a candidate holds it.
      local status = l.batch and (l.status .. " #" .. l.batch) or l.status
      table.insert(lines, ("  %-12s %-11s %-12s %-40s %12s %8s%s"):format(l.lane, status, who, task, tokens,
        money(l.costUsd), extra))
    end
  end
  return lines
end

function V.render_lanes(client_id, buf)
  vim.bo[buf].modifiable = true
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, V.lane_lines(client_id))
  vim.bo[buf].modifiable = false
  vim.bo[buf].modified = false
end

--- :FlowLanes: a scratch buffer (filetype flowlanes), redrawn as lanes change.
function V.lanes()
  local client = require("flowd.client").client()
  if not client then return end
  local buf = lanes_bufs[client.id]
  if not (buf and vim.api.nvim_buf_is_valid(buf)) then
    buf = vim.api.nvim_create_buf(false, true)
    vim.bo[buf].bufhidden = "hide"
    vim.bo[buf].swapfile = false
    pcall(vim.api.nvim_buf_set_name, buf, "flowd://lanes/" .. client.root_dir)
    vim.bo[buf].filetype = LANES_FT
    lanes_bufs[client.id] = buf
  end
  V.render_lanes(client.id, buf)
  local win = vim.fn.bufwinid(buf)
  if win == -1 then
    vim.cmd("botright split")
    vim.api.nvim_win_set_buf(0, buf)
  else
    vim.api.nvim_set_current_win(win)
  end
  return buf
end

--- Redraw every lanes buffer and the statusline, once per batch of changes.
local redraw_pending = false
function V.redraw()
  if redraw_pending then return end
  redraw_pending = true
  vim.schedule(function()
    redraw_pending = false
    for client_id, buf in pairs(lanes_bufs) do
      if vim.api.nvim_buf_is_valid(buf) then
        V.render_lanes(client_id, buf)
      else
        lanes_bufs[client_id] = nil
      end
    end
    vim.cmd("redrawstatus!")
  end)
end

return V

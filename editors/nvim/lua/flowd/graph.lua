-- :FlowGraph [runId]: the epic graph in a scratch buffer (filetype flowgraph), stories in layers
-- left to right with status signs and the critical path marked, and its timeline in a second
-- buffer (filetype flowtimeline); both redrawn live from flow/graph and flow/timeline when the
-- run's lanes change. <CR> on a story opens its worktree, else its findings (docs/editors.md).
local G = {}
local P = require("flowd.protocol")

G.SIGNS = { planned = "○", active = "●", queued = "◔", merging = "◑", ready = "◇", waiting = "‖",
  done = "✓", failed = "✗", skipped = "–" }
-- One character per phase on the timeline's bars.
G.MARKS = { planned = ".", coding = "=", gated = "g", queued = "q", merging = "m", merged = "M", paused = "p",
  failed = "X" }
G.PHASES = P.timeline_phases -- generated (flowd.protocol.ENUMS)
local BAR = 60
local NS = vim.api.nvim_create_namespace("flowd.graph")
-- Defaults the user's colorscheme may override (`default`); also defined by syntax/flowgraph.vim.
vim.api.nvim_set_hl(0, "FlowGraphCritical", { default = true, bold = true, underline = true, fg = "#e5484d", ctermfg = 1 })
for name, target in pairs({ FlowGraphDone = "DiagnosticOk", FlowGraphFailed = "DiagnosticError",
  FlowGraphActive = "DiagnosticInfo", FlowGraphWaiting = "DiagnosticWarn" }) do
  vim.api.nvim_set_hl(0, name, { default = true, link = target })
end

-- Open views: views[client_id] = { run_id =, graph = buf, timeline = buf, spots = {...}, pending = bool }
local views = {}

-- -- pure rendering -------------------------------------------------------------------------------

--- Stories by depth (the longest chain of dependencies before them), plan order within a layer.
function G.layers(stories)
  local by, depth = {}, {}
  for _, s in ipairs(stories) do by[s.id] = s end
  local function of(id, seen)
    if depth[id] then return depth[id] end
    seen[id] = true
    local d = 1
    for _, dep in ipairs(by[id].dependsOn or {}) do
      if by[dep] and not seen[dep] then d = math.max(d, of(dep, seen) + 1) end
    end
    seen[id] = nil
    depth[id] = d
    return d
  end
  local out = {}
  for _, s in ipairs(stories) do
    local d = of(s.id, {})
    out[d] = out[d] or {}
    table.insert(out[d], s)
  end
  return out
end

local function cell(s)
  return ("%s %s%s"):format(G.SIGNS[s.status] or "?", s.id, s.critical and " *" or "")
end

--- The graph buffer's lines, and where each story is: spots = { {line, col, width, story, critical} }
--- (line from 1, col from 0, in bytes).
function G.graph_lines(graph, title)
  local layers = G.layers(graph.stories or {})
  local lines, spots = { title, "" }, {}
  local widths, rows = {}, 0
  for i, layer in ipairs(layers) do
    widths[i] = #("L" .. i)
    for _, s in ipairs(layer) do widths[i] = math.max(widths[i], vim.fn.strdisplaywidth(cell(s))) end
    rows = math.max(rows, #layer)
  end
  local head = {}
  for i = 1, #layers do table.insert(head, ("L%d"):format(i) .. (" "):rep(widths[i] - #("L" .. i))) end
  table.insert(lines, table.concat(head, "   "))
  for r = 1, rows do
    local parts, col = {}, 0
    for i, layer in ipairs(layers) do
      local s = layer[r]
      local text = s and cell(s) or ""
      local pad = (" "):rep(widths[i] - vim.fn.strdisplaywidth(text))
      if s then
        table.insert(spots, { line = #lines + 1, col = col, width = #text, story = s.id, critical = s.critical,
          status = s.status })
      end
      table.insert(parts, text .. pad)
      col = col + #text + #pad + 3
    end
    table.insert(lines, (table.concat(parts, "   "):gsub("%s+$", "")))
  end
  table.insert(lines, "")
  local critical = {}
  for _, s in ipairs(graph.stories or {}) do
    if s.critical then table.insert(critical, s.id) end
    if #(s.dependsOn or {}) > 0 then
      table.insert(lines, ("%s ← %s"):format(s.id, table.concat(s.dependsOn, ", ")))
    end
  end
  if #critical > 0 then table.insert(lines, "critical path: " .. table.concat(critical, " → ")) end
  for _, b in ipairs(graph.batches or {}) do
    local verdict = b.ok == true and "green" or b.ok == false and "red" or "gating"
    table.insert(lines, ("batch %d: %s (%s)"):format(b.batch, table.concat(b.lanes, ", "), verdict))
  end
  return lines, spots
end

--- Milliseconds since 1970 of an ISO-8601 UTC time ("2026-12-01T10:00:05.250Z").
function G.ms(iso)
  local y, mo, d, h, mi, s, frac = iso:match("^(%d+)-(%d+)-(%d+)T(%d+):(%d+):(%d+)%.?(%d*)")
  if not y then return nil end
  y, mo = tonumber(y), tonumber(mo)
  if mo <= 2 then y = y - 1 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local doy = math.floor((153 * (mo + (mo > 2 and -3 or 9)) + 2) / 5) + tonumber(d) - 1
  local days = era * 146097 + yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy - 719468
  local ms = frac ~= "" and tonumber((frac .. "00"):sub(1, 3)) or 0
  return ((days * 24 + tonumber(h)) * 60 + tonumber(mi)) * 60000 + tonumber(s) * 1000 + ms
end

local function clock(ms)
  local s = math.floor(ms / 1000 + 0.5)
  return ("%d:%02d"):format(math.floor(s / 60), s % 60)
end

--- The timeline buffer's lines: per lane a bar of phase marks over the run's span, then its phases.
function G.timeline_lines(timeline, title)
  local first, last
  for _, lane in ipairs(timeline.lanes or {}) do
    for _, p in ipairs(lane.phases) do
      for _, t in ipairs({ p.start, p["end"] }) do
        local v = t and G.ms(t)
        if v then first, last = math.min(first or v, v), math.max(last or v, v) end
      end
    end
  end
  local legend = {}
  for _, phase in ipairs(G.PHASES) do table.insert(legend, G.MARKS[phase] .. " " .. phase) end
  local lines = { title, "", table.concat(legend, "  ") }
  if not first then return lines end
  local span = math.max(last - first, 1)
  table.insert(lines, ("%-12s 0:00%s%s"):format("", (" "):rep(BAR - 8), clock(span)))
  for _, lane in ipairs(timeline.lanes) do
    local bar = {}
    for i = 1, BAR do bar[i] = " " end
    local said = {}
    for _, p in ipairs(lane.phases) do
      local a = G.ms(p.start)
      local b = p["end"] and G.ms(p["end"]) or last
      local from = math.min(BAR, math.floor((a - first) / span * (BAR - 1)) + 1)
      local to = math.max(from, math.min(BAR, math.floor((b - first) / span * (BAR - 1)) + 1))
      for i = from, to do bar[i] = G.MARKS[p.phase] or "?" end
      table.insert(said, ("%s %s"):format(p.phase, clock(a - first)))
    end
    table.insert(lines, ("%-12s %s  %s"):format(lane.lane, table.concat(bar), lane.status))
    table.insert(lines, ("%-12s %s"):format("", table.concat(said, ", ")))
  end
  return lines
end

-- -- buffers ---------------------------------------------------------------------------------------

local function scratch(name, filetype)
  local buf = vim.api.nvim_create_buf(false, true)
  vim.bo[buf].bufhidden = "hide"
  vim.bo[buf].swapfile = false
  pcall(vim.api.nvim_buf_set_name, buf, name)
  vim.bo[buf].filetype = filetype
  return buf
end

local function set_lines(buf, lines)
  vim.bo[buf].modifiable = true
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].modifiable = false
  vim.bo[buf].modified = false
end

local STATUS_HL = { done = "FlowGraphDone", failed = "FlowGraphFailed", active = "FlowGraphActive",
  queued = "FlowGraphWaiting", merging = "FlowGraphActive", waiting = "FlowGraphWaiting", ready = "FlowGraphWaiting" }

local function highlight(buf, spots)
  vim.api.nvim_buf_clear_namespace(buf, NS, 0, -1)
  for _, spot in ipairs(spots) do
    local group = spot.critical and "FlowGraphCritical" or STATUS_HL[spot.status]
    if group then
      vim.api.nvim_buf_set_extmark(buf, NS, spot.line - 1, spot.col, { end_col = spot.col + spot.width, hl_group = group })
    end
  end
end

local function header(flowd, client_id, run_id, what)
  local run = flowd.run_of(client_id, run_id) or {}
  return ("%s of epic %s  run %s  %s"):format(what, run.epicId or "?", run_id, run.status or "")
end

--- Ask for the graph and the timeline of the view's run and draw them.
function G.refresh(flowd, client_id)
  local view = views[client_id]
  local client = vim.lsp.get_client_by_id(client_id)
  if not (view and client) then return end
  client:request(P.requests.graph, { runId = view.run_id }, function(err, graph)
    if err or not vim.api.nvim_buf_is_valid(view.graph) then return end
    local lines, spots = G.graph_lines(graph, header(flowd, client_id, view.run_id, "graph"))
    view.spots, view.last_graph = spots, graph
    set_lines(view.graph, lines)
    highlight(view.graph, spots)
  end)
  client:request(P.requests.timeline, { runId = view.run_id }, function(err, timeline)
    if err or not vim.api.nvim_buf_is_valid(view.timeline) then return end
    set_lines(view.timeline, G.timeline_lines(timeline, header(flowd, client_id, view.run_id, "timeline")))
  end)
end

--- A notification of `run_id` arrived: redraw its open view once things settle (150 ms).
function G.changed(flowd, client_id, run_id)
  local view = views[client_id]
  if not view or view.run_id ~= run_id or view.pending then return end
  view.pending = true
  vim.defer_fn(function()
    view.pending = false
    G.refresh(flowd, client_id)
  end, 150)
end

--- The story under the cursor in the graph buffer, or nil.
function G.story_at(client_id, line, col)
  for _, spot in ipairs((views[client_id] or {}).spots or {}) do
    if spot.line == line and col >= spot.col and col < spot.col + spot.width then return spot.story end
  end
  for _, spot in ipairs((views[client_id] or {}).spots or {}) do
    if spot.line == line then return spot.story end -- on the row, between cells: the first
  end
end

--- <CR>: the story's worktree when it has one, else its findings.
function G.open(flowd, client_id)
  local cursor = vim.api.nvim_win_get_cursor(0)
  local story = G.story_at(client_id, cursor[1], cursor[2])
  if not story then return end
  -- Where the story's worktree and findings are, as its `flow/lane` said.
  local lane = flowd.lane_of(client_id, views[client_id].run_id, story) or {}
  local worktree = require("flowd.revise").worktree_of(lane)
  local findings = type(lane.findings) == "string" and lane.findings or nil
  local target = worktree and vim.fn.isdirectory(worktree) == 1 and worktree
    or findings and vim.fn.filereadable(findings) == 1 and findings
  if not target then
    flowd.say(("story %s has no worktree or findings yet"):format(story))
    return
  end
  vim.cmd("wincmd p")
  vim.cmd.edit(vim.fn.fnameescape(target))
end

--- :FlowGraph [runId]: the graph buffer above its timeline buffer, for the run (default: the
--- newest running one, else the newest).
function G.show(flowd, arg)
  local client = flowd.client()
  if not client then return end
  local run_id = arg ~= "" and arg or flowd.default_run(client.id)
  if not run_id then
    flowd.say("no runs yet (:FlowLaunch [plan])", vim.log.levels.WARN)
    return
  end
  local view = views[client.id]
  if not (view and vim.api.nvim_buf_is_valid(view.graph) and vim.api.nvim_buf_is_valid(view.timeline)) then
    view = {
      graph = scratch("flowd://graph/" .. client.root_dir, "flowgraph"),
      timeline = scratch("flowd://timeline/" .. client.root_dir, "flowtimeline"),
    }
    views[client.id] = view
    local id = client.id
    vim.keymap.set("n", "<CR>", function() G.open(flowd, id) end,
      { buffer = view.graph, silent = true, desc = "open the story's worktree or findings" })
  end
  view.run_id = run_id
  if vim.fn.bufwinid(view.graph) == -1 then
    vim.cmd("botright split")
    vim.api.nvim_win_set_buf(0, view.graph)
    vim.cmd("belowright split")
    vim.api.nvim_win_set_buf(0, view.timeline)
    vim.cmd("wincmd k")
  else
    vim.api.nvim_set_current_win(vim.fn.bufwinid(view.graph))
  end
  G.refresh(flowd, client.id)
  return view.graph, view.timeline
end

function G.view(client_id) return views[client_id] end

return G

-- flowd for Neovim 0.11+: one `flowd serve` client per repository, commands, a live lanes
-- buffer, a statusline function, transitions shown with vim.notify. See docs/editors.md.
local M = {}

-- Every method name comes from the generated protocol module (docs/protocol.md).
local P = require("flowd.protocol")
local N, R, C = P.notifications, P.requests, P.commands
-- An older flowd server may lack `flow.answer`: the plugin checks its command list first.
local ANSWER = C.answer

local NAME = "flowd"
local LANES_FT = "flowlanes"
local ACTIVE = { running = true, paused = true }

M.config = {
  cmd = { "flowd", "serve" },
  -- Echo the run's $/progress (title and message) as it changes; vim.lsp.status() and progress
  -- plugins keep working either way, since the built-in $/progress handler is left in place.
  progress = true,
  -- Notify on transitions (a run or lane changing status, a repair, an excluded executor).
  notify = true,
  -- { port = P, host? = "127.0.0.1" }: connect to a running `flowd serve --tcp` instead of
  -- starting one, with the token it wrote for the user.
  tcp = nil,
  -- What a run launched with :FlowLaunch waits for your answer on (:FlowAnswer) instead of
  -- halting: `pauseOn` of flow.launchEpic (docs/answers.md). {} halts as `flowd run` does.
  pause_on = { "budget", "blocked", "noExecutor" },
  -- Approve before merge: each finished story waits for :FlowApprove (or :FlowRequestChanges)
  -- before it merges; adds `merge` to `pauseOn` (docs/answers.md). Off: stories merge at once.
  pause_on_merge = false,
}

-- `flow/attention` reasons that mean a story waits on a person (generated; `repaired` only informs).
local WAITING = {}
for _, reason in ipairs(P.waiting_reasons) do WAITING[reason] = true end
local PAUSED = { paused = true, blocked = true, budget = true }
local OTHER = "other answer…"

-- What the server has told us, per client id: runs[runId] = flow/run params (+ epicId),
-- lanes[runId] = { order = {lane...}, by = {lane -> flow/lane params} }, cost[runId] = flow/cost.
-- Branches and paths (a run's `epicBranch`, `reportMarkdown`; a lane's `worktree`, `branch`,
-- `findings`) are the server's, kept as sent: the plugin builds none (docs/protocol.md).
local state = {}
local roots = {} -- directory -> main checkout root (or false: not in a git repository)
local lanes_bufs = {} -- client id -> lanes buffer

local function st(client_id)
  -- attention[runId .. "\0" .. lane] = the open flow/attention params (lane "" for the run)
  state[client_id] = state[client_id] or { runs = {}, lanes = {}, cost = {}, attention = {} }
  return state[client_id]
end

local function notify(msg, level)
  if M.config.notify then
    vim.schedule(function() vim.notify("flowd: " .. msg, level or vim.log.levels.INFO, { title = "flowd" }) end)
  end
end

-- -- roots: one server per repository -----------------------------------------------------------

--- The main checkout of the repository containing `dir`, also from a linked worktree (a story
--- worktree's `.git` is a file pointing into the main checkout's `.git`).
function M.root_of(dir)
  if not dir or dir == "" then return nil end
  if roots[dir] ~= nil then return roots[dir] or nil end
  local out = vim.system({ "git", "-C", dir, "rev-parse", "--path-format=absolute", "--git-common-dir" },
    { text = true }):wait()
  local root = false
  if out.code == 0 then
    local common = vim.trim(out.stdout)
    if vim.fs.basename(common) == ".git" then
      root = vim.fs.dirname(common)
    else
      local top = vim.system({ "git", "-C", dir, "rev-parse", "--show-toplevel" }, { text = true }):wait()
      if top.code == 0 then root = vim.trim(top.stdout) end
    end
  end
  roots[dir] = root
  return root or nil
end

local function buf_dir(buf)
  local name = vim.api.nvim_buf_get_name(buf)
  if name == "" or name:match("^%a+://") then return nil end
  local dir = vim.fs.dirname(vim.fs.normalize(vim.fn.fnamemodify(name, ":p")))
  while dir and vim.fn.isdirectory(dir) == 0 do
    local up = vim.fs.dirname(dir)
    if up == dir then return nil end
    dir = up
  end
  return dir
end

-- -- notifications --------------------------------------------------------------------------------

-- Run ids carry their start time (`<epic>-20261130T090418-3eb1`): newest first, across epics.
local function sort_key(run_id)
  return run_id:match("%d%d%d%d%d%d%d%dT%d%d%d%d%d%d") or run_id
end

local function runs_newest_first(s)
  local list = vim.tbl_values(s.runs)
  table.sort(list, function(a, b)
    local ka, kb = sort_key(a.runId), sort_key(b.runId)
    if ka ~= kb then return ka > kb end
    return a.runId > b.runId
  end)
  return list
end

local function graph_changed(client_id, run_id)
  require("flowd.graph").changed(M, client_id, run_id)
end

local function put_lane(s, p)
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

local redraw_pending = false
local function redraw()
  if redraw_pending then return end
  redraw_pending = true
  vim.schedule(function()
    redraw_pending = false
    for client_id, buf in pairs(lanes_bufs) do
      if vim.api.nvim_buf_is_valid(buf) then
        M.render_lanes(client_id, buf)
      else
        lanes_bufs[client_id] = nil
      end
    end
    vim.cmd("redrawstatus!")
  end)
end

local LEVEL = { failed = vim.log.levels.ERROR, waiting = vim.log.levels.WARN, halted = vim.log.levels.WARN,
  interrupted = vim.log.levels.WARN, cancelled = vim.log.levels.WARN }

local handlers = {}

handlers[N.run] = function(_, p, ctx)
  local s = st(ctx.client_id)
  local before = s.runs[p.runId]
  s.runs[p.runId] = vim.tbl_extend("force", before or {}, p)
  if before and before.status ~= p.status then
    notify(("epic %s %s: %d/%d done, %d failed"):format(p.epicId, p.status, p.done, p.total, p.failed),
      LEVEL[p.status])
  elseif not before and p.status == "running" then
    notify(("epic %s running (run %s)"):format(p.epicId, p.runId))
  end
  graph_changed(ctx.client_id, p.runId)
  redraw()
end

handlers[N.lane] = function(_, p, ctx)
  local before = put_lane(st(ctx.client_id), p)
  if (not before or before.status ~= p.status) and p.status ~= "planned" then
    local why = p.reason and (": " .. p.reason) or ""
    notify(("%s %s%s"):format(p.lane, p.status, why), LEVEL[p.status])
  end
  -- docs/revisions.md: a merge sent back for revision, a gate green only on a rerun.
  if (p.mergeRevision or 0) > ((before or {}).mergeRevision or 0) then
    notify(("%s: epic gates red after merging; merge undone, merge revision %d"):format(p.lane,
      p.mergeRevision), vim.log.levels.WARN)
  end
  if (p.flaky or 0) > ((before or {}).flaky or 0) then
    notify(("%s: flaky gates: %d (green only on a rerun; not charged)"):format(p.lane, p.flaky))
  end
  graph_changed(ctx.client_id, p.runId)
  redraw()
end

handlers[N.task] = function(_, p, ctx) graph_changed(ctx.client_id, p.runId) end

handlers[N.clone] = function(_, p)
  if p.state == "excluded" then
    notify(("executor %s excluded: %s"):format(p.executor, p.reason or ""), vim.log.levels.WARN)
  end
end

handlers[N.cost] = function(_, p, ctx)
  st(ctx.client_id).cost[p.runId] = p
  redraw()
end

handlers[N.attention] = function(_, p, ctx)
  local open = st(ctx.client_id).attention
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
  if p.reason ~= "failed" then notify(p.message .. hint, level) end
  redraw()
end

--- The open waits of every flowd client: { { client = id, params = flow/attention params } }.
local function waiting()
  local out = {}
  for client_id, s in pairs(state) do
    for _, p in pairs(s.attention or {}) do table.insert(out, { client = client_id, params = p }) end
  end
  table.sort(out, function(a, b) return (a.params.runId .. (a.params.lane or "")) < (b.params.runId .. (b.params.lane or "")) end)
  return out
end

-- -- the client -----------------------------------------------------------------------------------

local function on_init(client)
  -- Finished runs (for :FlowResume, :FlowLanes); running ones arrive as a snapshot anyway.
  client:request(R.status, vim.empty_dict(), function(err, res)
    if err or not res then return end
    local s = st(client.id)
    for _, run in ipairs(res.runs) do
      s.runs[run.runId] = vim.tbl_extend("keep", s.runs[run.runId] or {}, {
        runId = run.runId, epicId = run.epicId, status = run.status, startedAt = run.startedAt,
        totals = run.totals, total = #run.lanes, epicBranch = run.epicBranch,
        reportMarkdown = run.reportMarkdown, reportJson = run.reportJson,
        done = #vim.tbl_filter(function(l) return l.status == "done" end, run.lanes),
      })
      for _, lane in ipairs(run.lanes) do
        if not (s.lanes[run.runId] and s.lanes[run.runId].by[lane.lane]) then put_lane(s, lane) end
      end
    end
    redraw()
  end)
end

--- The token a `flowd serve --tcp --port P` wrote for its user (docs/protocol.md).
function M.tcp_token(port)
  local runtime = os.getenv("XDG_RUNTIME_DIR")
  local base = (runtime and vim.fn.isdirectory(runtime) == 1) and runtime or (vim.fn.expand("~") .. "/.cache")
  local path = ("%s/flowd/serve-%d.json"):format(base, port)
  local ok, lines = pcall(vim.fn.readfile, path)
  if not ok then return nil, path end
  local decoded_ok, data = pcall(vim.json.decode, table.concat(lines, "\n"))
  return decoded_ok and type(data) == "table" and data.token or nil, path
end

local function config_for(root)
  local cmd, init_options = M.config.cmd, nil
  local tcp = M.config.tcp
  if tcp then
    local token, path = M.tcp_token(tcp.port)
    if not token then
      notify(("no token in %s: start `flowd serve --tcp --port %d` first"):format(path, tcp.port),
        vim.log.levels.ERROR)
      return nil
    end
    cmd, init_options = vim.lsp.rpc.connect(tcp.host or "127.0.0.1", tcp.port), { token = token }
  end
  return {
    name = NAME,
    cmd = cmd,
    init_options = init_options,
    root_dir = root,
    handlers = handlers,
    on_init = on_init,
    on_exit = function(_, _, client_id)
      state[client_id] = nil
      vim.schedule(function() vim.cmd("redrawstatus!") end)
    end,
  }
end

--- Attach `buf` to its repository's client (started on first use). Returns the client id.
function M.attach(buf)
  buf = (buf == nil or buf == 0) and vim.api.nvim_get_current_buf() or buf
  if vim.bo[buf].buftype ~= "" then return nil end
  local root = M.root_of(buf_dir(buf))
  local config = root and config_for(root)
  if not config then return nil end
  return vim.lsp.start(config, { bufnr = buf, silent = false })
end

--- The client of the current buffer's repository, else of the working directory's; started if needed.
function M.client()
  local buf = vim.api.nvim_get_current_buf()
  local root = M.root_of(buf_dir(buf)) or M.root_of(vim.fn.getcwd())
  if not root then
    notify("not inside a git repository (open a file of the repository, or :cd into it)", vim.log.levels.ERROR)
    return nil
  end
  for _, client in ipairs(vim.lsp.get_clients({ name = NAME })) do
    if client.root_dir == root then return client end
  end
  local config = config_for(root)
  local id = config and vim.lsp.start(config, { attach = false })
  return id and vim.lsp.get_client_by_id(id) or nil
end

local function request(method, params, on_result)
  local client = M.client()
  if not client then return end
  client:request(method, params, function(err, res)
    if err then
      notify(err.message, vim.log.levels.ERROR)
    elseif on_result then
      on_result(res, client)
    end
  end)
end

local function execute(command, argument, on_result)
  request("workspace/executeCommand", { command = command, arguments = { argument } }, on_result)
end

-- For the plugin's other modules (flowd/revise.lua, flowd/graph.lua, flowd/approve.lua).
M.execute = execute
M.say = function(msg, level) notify(msg, level) end
M.waiting = function() return waiting() end

--- What the server said of run `run_id` (flow/run params), or nil.
function M.run_of(client_id, run_id) return st(client_id).runs[run_id] end

--- What the server said of lane `lane` of run `run_id` (flow/lane params), or nil.
function M.lane_of(client_id, run_id, lane)
  local lanes = st(client_id).lanes[run_id]
  return lanes and lanes.by[lane] or nil
end

--- The run :FlowGraph shows by default: the newest running one, else the newest.
function M.default_run(client_id)
  local runs = runs_newest_first(st(client_id))
  for _, run in ipairs(runs) do
    if ACTIVE[run.status] then return run.runId end
  end
  return runs[1] and runs[1].runId
end

-- -- statusline and lanes --------------------------------------------------------------------------

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
function M.statusline()
  local parts = {}
  for _, client in ipairs(vim.lsp.get_clients({ name = NAME })) do
    local s = state[client.id]
    if s then
      for _, run in ipairs(runs_newest_first(s)) do
        if ACTIVE[run.status] then
          local text = ("⟳ %d/%d lanes"):format(run.done or 0, run.total or 0)
          local cost = epic_cost(s, run.epicId)
          if cost then text = text .. (" · $%.2f"):format(cost) end
          table.insert(parts, text)
        end
      end
    end
  end
  -- Stories waiting on a person (docs/editors.md).
  local count = #waiting()
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
function M.lane_lines(client_id)
  local s = state[client_id]
  if not s then return { "flowd: no server" } end
  local runs, shown = runs_newest_first(s), {}
  for _, run in ipairs(runs) do
    if ACTIVE[run.status] then table.insert(shown, run) end
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

function M.render_lanes(client_id, buf)
  vim.bo[buf].modifiable = true
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, M.lane_lines(client_id))
  vim.bo[buf].modifiable = false
  vim.bo[buf].modified = false
end

--- :FlowLanes: a scratch buffer (filetype flowlanes), redrawn as lanes change.
function M.lanes()
  local client = M.client()
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
  M.render_lanes(client.id, buf)
  local win = vim.fn.bufwinid(buf)
  if win == -1 then
    vim.cmd("botright split")
    vim.api.nvim_win_set_buf(0, buf)
  else
    vim.api.nvim_set_current_win(win)
  end
  return buf
end

-- -- commands ----------------------------------------------------------------------------------------

local function plan_arg(arg)
  local plan = arg ~= "" and arg or vim.api.nvim_buf_get_name(0)
  if plan == "" then return nil end
  return vim.fn.fnamemodify(plan, ":p")
end

local function pick_run(arg, wanted, what, on_run)
  if arg ~= "" then return on_run(arg) end
  local client = M.client()
  if not client then return end
  local candidates = {}
  for _, run in ipairs(runs_newest_first(st(client.id))) do
    if wanted(run) then table.insert(candidates, run) end
  end
  if #candidates == 0 then return notify("no run to " .. what, vim.log.levels.WARN) end
  if #candidates == 1 then return on_run(candidates[1].runId) end
  vim.ui.select(candidates, {
    prompt = "flowd: run to " .. what,
    format_item = function(r) return ("%s %s %s"):format(r.runId, r.epicId, r.status) end,
  }, function(choice) if choice then on_run(choice.runId) end end)
end

function M.launch(arg)
  local plan = plan_arg(arg or "")
  if not plan then return notify("give a plan: :FlowLaunch path/to/epic.json", vim.log.levels.ERROR) end
  local args = { plan = plan }
  if M.config.pause_on or M.config.pause_on_merge then args.pauseOn = require("flowd.approve").pause_on(M.config) end
  execute(C.launchEpic, args, function(res)
    notify(("launched run %s (epic %s on %s)"):format(res.runId, res.epicId, res.epicBranch))
  end)
end

function M.cancel(arg)
  pick_run(arg or "", function(r) return ACTIVE[r.status] end, "cancel", function(run_id)
    execute(C.cancelEpic, { runId = run_id }, function(res)
      notify(("run %s: %s"):format(res.runId, res.outcome))
    end)
  end)
end

local function resumable(s, run)
  if ACTIVE[run.status] or run.status == "done" then return false end
  for _, other in pairs(s.runs) do
    -- A later run of the same epic already took over from this one.
    if other.epicId == run.epicId and sort_key(other.runId) > sort_key(run.runId) then return false end
  end
  return true
end

function M.resume(arg)
  local client = M.client()
  if not client then return end
  local s = st(client.id)
  pick_run(arg or "", function(r) return resumable(s, r) end, "resume", function(run_id)
    execute(C.resumeEpic, { runId = run_id }, function(res)
      notify(("resumed as run %s (epic %s)"):format(res.runId, res.epicId))
    end)
  end)
end

function M.status()
  request(R.status, vim.empty_dict(), function(res)
    local lines = {}
    for _, run in ipairs(res.runs) do
      table.insert(lines, ("%s %s %s"):format(run.runId, run.epicId, run.status))
      for _, lane in ipairs(run.lanes) do
        local task = lane.task and ("task %d/%d %s"):format(lane.task.index, lane.task.count, lane.task.title) or ""
        table.insert(lines, ("  %-12s %-9s %s"):format(lane.lane, lane.status, task))
      end
    end
    notify(#lines > 0 and table.concat(lines, "\n") or "no runs")
  end)
end

function M.cost()
  request(R.costReport, { format = "text" }, function(res) notify(res.text) end)
end

function M.validate(arg)
  local plan = plan_arg(arg or "")
  if not plan then return notify("give a plan: :FlowValidate path/to/epic.json", vim.log.levels.ERROR) end
  execute(C.validatePlan, { plan = plan }, function(res)
    if #res.violations == 0 then
      notify(plan .. ": no problems")
    else
      notify(plan .. ":\n" .. table.concat(res.violations, "\n"), vim.log.levels.ERROR)
    end
  end)
end

--- :FlowAnswer: answers a paused story or run with `flow.answer`, when the server has it.
function M.answer(arg)
  local client = M.client()
  if not client then return end
  local commands = vim.tbl_get(client.server_capabilities or {}, "executeCommandProvider", "commands") or {}
  if not vim.tbl_contains(commands, ANSWER) then
    return notify("answering a paused run is not available yet: this flowd server has no " .. ANSWER,
      vim.log.levels.WARN)
  end
  local pauses = vim.tbl_filter(function(w) return PAUSED[w.params.reason] end, waiting())
  if #pauses == 0 then return notify("nothing waits for an answer") end
  local function answer(p)
    local function send(text)
      text = text and vim.trim(text) or ""
      if text == "" then return end
      local argument = { runId = p.runId, story = p.lane, answer = text }
      execute(ANSWER, argument, function(res) notify(res.message) end)
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

local COMMANDS = {
  FlowLaunch = { function(o) M.launch(o.args) end, { nargs = "?", complete = "file" } },
  FlowCancel = { function(o) M.cancel(o.args) end, { nargs = "?" } },
  FlowResume = { function(o) M.resume(o.args) end, { nargs = "?" } },
  FlowStatus = { function() M.status() end, {} },
  FlowCost = { function() M.cost() end, {} },
  FlowValidate = { function(o) M.validate(o.args) end, { nargs = "?", complete = "file" } },
  FlowLanes = { function() M.lanes() end, {} },
  FlowGraph = { function(o) require("flowd.graph").show(M, o.args) end, { nargs = "?" } },
  FlowAnswer = { function(o) M.answer(o.args) end, { nargs = "?" } },
  FlowRevise = { function(o) require("flowd.revise").revise(M, o.args) end, { nargs = "*" } },
  FlowReview = { function(o) require("flowd.approve").review(M, o.args) end, { nargs = "?" } },
  FlowApprove = { function(o) require("flowd.approve").approve(M, o.args) end, { nargs = "?" } },
  FlowRequestChanges = { function(o) require("flowd.approve").request_changes(M, o.args) end, { nargs = "*" } },
}

function M.setup(opts)
  M.config = vim.tbl_deep_extend("force", M.config, opts or {})
  for name, spec in pairs(COMMANDS) do
    vim.api.nvim_create_user_command(name, spec[1], spec[2])
  end
  local group = vim.api.nvim_create_augroup("flowd", { clear = true })
  vim.api.nvim_create_autocmd({ "BufReadPost", "BufNewFile" }, {
    group = group,
    callback = function(args) M.attach(args.buf) end,
  })
  vim.api.nvim_create_autocmd("LspProgress", {
    group = group,
    callback = function(args)
      local client = vim.lsp.get_client_by_id(args.data.client_id)
      local value = args.data.params and args.data.params.value
      if not (M.config.progress and client and client.name == NAME and type(value) == "table") then return end
      local title = value.title or ""
      local text = value.message and (title ~= "" and (title .. ": ") or "") .. value.message or title
      vim.api.nvim_echo({ { "flowd: " .. text } }, false, {})
    end,
  })
  for _, buf in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_loaded(buf) and vim.api.nvim_buf_get_name(buf) ~= "" then M.attach(buf) end
  end
end

return M

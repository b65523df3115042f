-- The plugin's LSP clients: one `flowd serve` per repository (its main checkout, also from a
-- linked worktree), started on first use or reached over TCP with the user's token, and the
-- requests and commands the other modules send through it.
local K = {}
local P = require("flowd.protocol")
local S = require("flowd.state")
local R = P.requests

K.NAME = "flowd"
local NAME = K.NAME
local roots = {} -- directory -> main checkout root (or false: not in a git repository)

local function config() return require("flowd").config end
local function say(msg, level) require("flowd").say(msg, level) end

--- The main checkout of the repository containing `dir`, also from a linked worktree (a story
--- worktree's `.git` is a file pointing into the main checkout's `.git`).
function K.root_of(dir)
  if not dir or dir == "" then return nil end
  if roots[dir] ~= nil then return roots[dir] or nil end
  local out = vim.system({ "git", "-C", dir, "rev-parse", "--path-format=absolute", "--git-common-dir" },
    { text = true }):wait()
  local root = false
  if out.code == 0 then
    local common = vim.trim(out.stdout)
    -- A story's worktree while its lane runs: git reports the lane's own git dir, in the worktree's
    -- admin dir of the repository's (<repo>/.git/worktrees/<id>/flowd-git; docs/sandbox.md).
    local admins = vim.fs.dirname(vim.fs.dirname(common))
    if vim.fs.basename(common) == "flowd-git" and vim.fs.basename(admins) == "worktrees" then
      common = vim.fs.dirname(admins)
    end
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

local function on_init(client)
  -- Finished runs (for :FlowResume, :FlowLanes); running ones arrive as a snapshot anyway.
  client:request(R.status, vim.empty_dict(), function(err, res)
    if err or not res then return end
    local s = S.of(client.id)
    for _, run in ipairs(res.runs) do
      s.runs[run.runId] = vim.tbl_extend("keep", s.runs[run.runId] or {}, {
        runId = run.runId, epicId = run.epicId, status = run.status, startedAt = run.startedAt,
        totals = run.totals, total = #run.lanes, epicBranch = run.epicBranch,
        reportMarkdown = run.reportMarkdown, reportJson = run.reportJson,
        done = #vim.tbl_filter(function(l) return l.status == "done" end, run.lanes),
      })
      for _, lane in ipairs(run.lanes) do
        if not (s.lanes[run.runId] and s.lanes[run.runId].by[lane.lane]) then S.put_lane(s, lane) end
      end
    end
    require("flowd.lanes").redraw()
  end)
end

--- The token a `flowd serve --tcp --port P` wrote for its user (docs/protocol.md).
function K.tcp_token(port)
  local runtime = os.getenv("XDG_RUNTIME_DIR")
  local base = (runtime and vim.fn.isdirectory(runtime) == 1) and runtime or (vim.fn.expand("~") .. "/.cache")
  local path = ("%s/flowd/serve-%d.json"):format(base, port)
  local ok, lines = pcall(vim.fn.readfile, path)
  if not ok then return nil, path end
  local decoded_ok, data = pcall(vim.json.decode, table.concat(lines, "\n"))
  return decoded_ok and type(data) == "table" and data.token or nil, path
end

local function config_for(root)
  local cmd, init_options = config().cmd, nil
  local tcp = config().tcp
  if tcp then
    local token, path = K.tcp_token(tcp.port)
    if not token then
      say(("no token in %s: start `flowd serve --tcp --port %d` first"):format(path, tcp.port),
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
    handlers = require("flowd.handlers").handlers,
    on_init = on_init,
    on_exit = function(_, _, client_id)
      S.forget(client_id)
      vim.schedule(function() vim.cmd("redrawstatus!") end)
    end,
  }
end

--- Attach `buf` to its repository's client (started on first use). Returns the client id.
function K.attach(buf)
  buf = (buf == nil or buf == 0) and vim.api.nvim_get_current_buf() or buf
  if vim.bo[buf].buftype ~= "" then return nil end
  local root = K.root_of(buf_dir(buf))
  local config = root and config_for(root)
  if not config then return nil end
  return vim.lsp.start(config, { bufnr = buf, silent = false })
end

--- The client of the current buffer's repository, else of the working directory's; started if needed.
function K.client()
  local buf = vim.api.nvim_get_current_buf()
  local root = K.root_of(buf_dir(buf)) or K.root_of(vim.fn.getcwd())
  if not root then
    say("not inside a git repository (open a file of the repository, or :cd into it)", vim.log.levels.ERROR)
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
  local client = K.client()
  if not client then return end
  client:request(method, params, function(err, res)
    if err then
      say(err.message, vim.log.levels.ERROR)
    elseif on_result then
      on_result(res, client)
    end
  end)
end

local function execute(command, argument, on_result)
  request("workspace/executeCommand", { command = command, arguments = { argument } }, on_result)
end


K.request = request
K.execute = execute

return K

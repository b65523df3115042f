-- flowd for Neovim 0.11+: one `flowd serve` client per repository, commands, a live lanes
-- buffer, a statusline function, transitions shown with vim.notify. See docs/editors.md.
-- This module is the plugin's face: its settings, setup() and the functions users and the
-- plugin's other modules call; each concept lives in a module of its own: flowd/state.lua (what
-- the servers said), flowd/client.lua (the clients), flowd/handlers.lua (notifications),
-- flowd/lanes.lua (lanes buffer, statusline), flowd/commands.lua (user commands).
local M = {}

local S = require("flowd.state")
local K = require("flowd.client")
local V = require("flowd.lanes")
local Cm = require("flowd.commands")

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

function M.say(msg, level)
  if M.config.notify then
    vim.schedule(function() vim.notify("flowd: " .. msg, level or vim.log.levels.INFO, { title = "flowd" }) end)
  end
end

-- The clients (flowd/client.lua).
M.root_of, M.tcp_token, M.attach, M.client, M.execute = K.root_of, K.tcp_token, K.attach, K.client, K.execute
-- What the servers said (flowd/state.lua), for flowd/revise.lua, flowd/graph.lua, flowd/approve.lua.
M.waiting, M.run_of, M.lane_of, M.default_run = S.waiting, S.run_of, S.lane_of, S.default_run
-- The lanes buffer and the statusline (flowd/lanes.lua).
M.statusline, M.lane_lines, M.render_lanes, M.lanes = V.statusline, V.lane_lines, V.render_lanes, V.lanes
-- The user commands (flowd/commands.lua).
M.launch, M.cancel, M.resume, M.status = Cm.launch, Cm.cancel, Cm.resume, Cm.status
M.cost, M.validate, M.answer = Cm.cost, Cm.validate, Cm.answer

function M.setup(opts)
  M.config = vim.tbl_deep_extend("force", M.config, opts or {})
  for name, spec in pairs(Cm.COMMANDS) do
    vim.api.nvim_create_user_command(name, spec[1], spec[2])
  end
  local group = vim.api.nvim_create_augroup("flowd", { clear = true })
  vim.api.nvim_create_autocmd({ "BufReadPost", "BufNewFile" }, {
    group = group,
    callback = function(args) K.attach(args.buf) end,
  })
  vim.api.nvim_create_autocmd("LspProgress", {
    group = group,
    callback = function(args)
      local client = vim.lsp.get_client_by_id(args.data.client_id)
      local value = args.data.params and args.data.params.value
      if not (M.config.progress and client and client.name == K.NAME and type(value) == "table") then return end
      local title = value.title or ""
      local text = value.message and (title ~= "" and (title .. ": ") or "") .. value.message or title
      vim.api.nvim_echo({ { "flowd: " .. text } }, false, {})
    end,
  })
  for _, buf in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_loaded(buf) and vim.api.nvim_buf_get_name(buf) ~= "" then K.attach(buf) end
  end
end

return M

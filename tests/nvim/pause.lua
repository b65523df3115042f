-- Pause and ask in Neovim against a real `flowd serve`: :FlowLaunch passes pauseOn, a coder's
-- BLOCKED_ON arrives as a notification, the statusline counts it, :FlowAnswer offers its options
-- with vim.ui.select and takes free text with vim.ui.input, and the answer clears the wait.
vim.opt.rtp:append(os.getenv("PLUGIN_DIR"))
package.path = os.getenv("HARNESS_DIR") .. "/?.lua;" .. package.path
local H = require("harness")
local out = H.out

-- The user's picks: "other answer…" in the select, then the text in the input.
out.selects, out.inputs = {}, {}
vim.ui.select = function(items, opts, on_choice)
  table.insert(out.selects, { items = items, prompt = opts.prompt })
  on_choice(items[#items])
end
vim.ui.input = function(opts, on_confirm)
  table.insert(out.inputs, opts.prompt)
  on_confirm("  say HOWDY to everyone ")
end

H.run(function()
  local repo, plan = os.getenv("REPO"), os.getenv("PLAN")
  local flowd = require("flowd")
  flowd.setup({ cmd = vim.json.decode(os.getenv("FLOWD_CMD")) })
  vim.cmd.edit(vim.fn.fnameescape(repo .. "/README.md"))
  H.wait("the client to initialize", function()
    local c = vim.lsp.get_clients({ name = "flowd", bufnr = 0 })[1]
    return c and c.initialized and c
  end)

  vim.cmd("FlowAnswer")
  out.nothing = H.wait("nothing to answer", function() return H.note("nothing waits") end).msg

  vim.cmd("FlowLaunch " .. vim.fn.fnameescape(plan))
  local launched = H.wait("the launch", function() return H.note("launched run ") end)
  out.run_id = launched.msg:match("launched run (%S+)")
  out.blocked = H.wait("the blocked notification", function() return H.note("(:FlowAnswer)") end)
  out.statusline_paused = H.wait("the statusline to count it", function()
    local line = flowd.statusline()
    return line:find("⚑ 1", 1, true) and line
  end)

  local mark = #out.notes
  vim.cmd("FlowAnswer")
  out.answered = H.wait("the answer's reply", function() return H.note("goes on", mark) end).msg
  out.cleared = H.wait("the cleared notification", function() return H.note("answered (editor)", mark) end).msg
  H.wait("the run to finish", function() return H.note("epic greet done", mark) end, 90000)
  out.statusline_done = flowd.statusline()
end)

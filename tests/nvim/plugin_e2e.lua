-- The plugin against a real `flowd serve` on the demo repository: launch, lanes buffer,
-- statusline, a live perimeter diagnostic in a first attempt, cancel, resume, the other commands.
vim.opt.rtp:append(os.getenv("PLUGIN_DIR"))
package.path = os.getenv("HARNESS_DIR") .. "/?.lua;" .. package.path
local H = require("harness")
local out = H.out

H.run(function()
  local repo, plan, worktrees = os.getenv("REPO"), os.getenv("PLAN"), os.getenv("WORKTREES")
  local flowd = require("flowd")
  flowd.setup({ cmd = vim.json.decode(os.getenv("FLOWD_CMD")) })

  vim.cmd.edit(vim.fn.fnameescape(repo .. "/README.md"))
  local client = H.wait("the client to initialize", function()
    local c = vim.lsp.get_clients({ name = "flowd", bufnr = 0 })[1]
    return c and c.initialized and c
  end)
  out.root_dir = client.root_dir
  out.statusline_idle = flowd.statusline()

  vim.cmd("FlowLaunch " .. vim.fn.fnameescape(plan))
  local launched = H.wait("the launch", function() return H.note("launched run ") end)
  local run_id = launched.msg:match("launched run (%S+)")
  out.run_id = run_id

  H.wait("core active", function() return H.note("core active") end)
  local lanes_buf = flowd.lanes()
  out.lanes_filetype = vim.bo[lanes_buf].filetype
  out.lanes_running = H.wait("the lanes buffer to show core active", function()
    local lines = vim.api.nvim_buf_get_lines(lanes_buf, 0, -1, false)
    for _, line in ipairs(lines) do
      if line:match("^%s+core%s+active%s+demo#%d") then return lines end
    end
  end)
  out.statusline_running = flowd.statusline()

  -- A stray write in core's worktree during its first attempt: a live diagnostic, on the worktree
  -- file and mirrored in the checkout.
  local core = worktrees .. "/calc/core"
  vim.fn.writefile({ "the user's hand edit" }, core .. "/NOTES.txt")
  local stray = vim.uri_from_fname(core .. "/NOTES.txt")
  local mirror = vim.uri_from_fname(repo .. "/NOTES.txt")
  local function flagged(uri)
    for _, d in ipairs(vim.diagnostic.get(vim.uri_to_bufnr(uri))) do
      if d.code == "perimeter.outside" then return d end
    end
  end
  local d = H.wait("the perimeter diagnostic", function() return flagged(stray) end)
  out.diagnostic = { message = d.message, severity = d.severity, source = d.source }
  H.wait("the mirrored diagnostic", function() return flagged(mirror) end)

  -- A buffer of the story worktree attaches to the main checkout's client, not a second server.
  vim.cmd.edit(vim.fn.fnameescape(core .. "/calc/__init__.py"))
  H.wait("the worktree buffer to attach", function()
    return #vim.lsp.get_clients({ name = "flowd", bufnr = 0 }) == 1
  end)
  out.clients = #vim.lsp.get_clients({ name = "flowd" })
  out.worktree_client_root = vim.lsp.get_clients({ name = "flowd", bufnr = 0 })[1].root_dir

  vim.cmd("FlowCancel")
  H.wait("the cancel answer", function() return H.note("run " .. run_id .. ": cancelled") end)
  H.wait("the run to end cancelled", function() return H.note("epic calc cancelled") end)
  out.statusline_cancelled = flowd.statusline()

  local mark = #out.notes
  vim.cmd("FlowResume")
  local resumed = H.wait("the resume", function() return H.note("resumed as run ", mark) end)
  out.resumed_id = resumed.msg:match("resumed as run (%S+)")
  H.wait("the resumed run to finish", function() return H.note("epic calc done", mark) end)
  H.wait("the repair attention", function() return H.note("perimeter repair restored", mark) end)
  out.lanes_done = H.wait("the lanes buffer to show the resumed run done", function()
    local lines = vim.api.nvim_buf_get_lines(lanes_buf, 0, -1, false)
    return lines[1] and lines[1]:find(out.resumed_id, 1, true) and lines[1]:find(" done ", 1, true) and lines
  end)
  out.statusline_done = flowd.statusline()
  H.wait("the mirrored diagnostic to clear", function() return not flagged(mirror) end)

  mark = #out.notes
  vim.cmd("FlowStatus")
  out.status = H.wait("the status", function() return H.note(out.resumed_id .. " calc done", mark) end).msg
  vim.cmd("FlowCost")
  out.cost = H.wait("the cost report", function() return H.note("flowd cost", mark) end).msg
  vim.cmd("FlowValidate " .. vim.fn.fnameescape(plan))
  H.wait("the validation", function() return H.note(plan .. ": no problems", mark) end)
  vim.cmd("FlowAnswer")
  out.answer = H.wait("the answer", function() return H.note("nothing waits", mark) end).msg
  out.progress_echoes = vim.tbl_filter(function(e) return e:find("Epic calc", 1, true) end, out.echoes)
end)

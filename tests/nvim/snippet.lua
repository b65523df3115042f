-- docs/editors.md's plain vim.lsp snippet, sourced verbatim, against a real `flowd serve`.
package.path = os.getenv("HARNESS_DIR") .. "/?.lua;" .. package.path
local H = require("harness")
local out = H.out

H.run(function()
  local repo, plan, worktrees = os.getenv("REPO"), os.getenv("PLAN"), os.getenv("WORKTREES")
  vim.cmd.source(vim.fn.fnameescape(os.getenv("SNIPPET")))
  vim.cmd.edit(vim.fn.fnameescape(repo .. "/README.md"))
  local client = H.wait("the client to initialize", function()
    local c = vim.lsp.get_clients({ name = "flowd", bufnr = 0 })[1]
    return c and c.initialized and c
  end)
  out.root_dir = client.root_dir

  vim.cmd("FlowStatus")
  H.wait("the empty status", function() return H.note("flowd: no runs") end)
  vim.cmd("FlowLaunch " .. vim.fn.fnameescape(plan))
  out.launched = H.wait("the launch", function() return H.note('epicId = "calc"') end).msg

  local core = worktrees .. "/calc/core/calc/__init__.py"
  H.wait("core's worktree", function() return vim.fn.filereadable(core) == 1 end)
  vim.cmd.edit(vim.fn.fnameescape(core))
  H.wait("the worktree buffer to attach", function()
    return #vim.lsp.get_clients({ name = "flowd", bufnr = 0 }) == 1
  end)
  out.clients = #vim.lsp.get_clients({ name = "flowd" })

  H.wait("the run to finish", function() return H.note("epic calc done: 5/5 done") end)
  local mark = #out.notes
  vim.cmd("FlowStatus")
  out.status = H.wait("the status", function() return H.note(" calc done", mark) end).msg
  vim.cmd("FlowCost")
  out.cost = H.wait("the cost", function() return H.note("flowd cost", mark) end).msg
end)

-- The plugin on a run whose story is sent back for a merge revision and meets a flaky gate: the
-- notifications say so, and the lanes buffer shows both (docs/revisions.md).
vim.opt.rtp:append(os.getenv("PLUGIN_DIR"))
package.path = os.getenv("HARNESS_DIR") .. "/?.lua;" .. package.path
local H = require("harness")
local out = H.out

H.run(function()
  local repo, plan = os.getenv("REPO"), os.getenv("PLAN")
  local flowd = require("flowd")
  flowd.setup({ cmd = vim.json.decode(os.getenv("FLOWD_CMD")) })
  vim.cmd.edit(vim.fn.fnameescape(repo .. "/README.md"))
  local client = H.wait("the client to initialize", function()
    local c = vim.lsp.get_clients({ name = "flowd", bufnr = 0 })[1]
    return c and c.initialized and c
  end)
  vim.cmd("FlowLaunch " .. vim.fn.fnameescape(plan))
  H.wait("the launch", function() return H.note("launched run ") end)
  H.wait("a done", function() return H.note("a done") end, 120000)
  out.revision_note = H.wait("the merge revision note", function() return H.note("merge revision 1") end).msg
  out.flaky_note = H.wait("the flaky note", function() return H.note("flaky gates: 1") end).msg
  out.lanes = flowd.lane_lines(client.id)
end)

-- The plugin on a run whose epic gates take a while: the lanes buffer shows the story `queued` or
-- `merging #<batch>` while the merge train holds it (docs/merging.md), then `done`.
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
  out.merging = H.wait("a merging in its batch", function()
    for _, line in ipairs(flowd.lane_lines(client.id)) do
      if line:match("^  a%s+merging #%d+") then return line end
    end
  end, 120000)
  H.wait("a done", function() return H.note("a done") end, 120000)
  out.lanes = flowd.lane_lines(client.id)
end)

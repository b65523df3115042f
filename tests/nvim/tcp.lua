-- The plugin connecting to a `flowd serve --tcp` it did not start, with the user's token.
vim.opt.rtp:append(os.getenv("PLUGIN_DIR"))
package.path = os.getenv("HARNESS_DIR") .. "/?.lua;" .. package.path
local H = require("harness")
local out = H.out

H.run(function()
  local flowd = require("flowd")
  flowd.setup({ tcp = { port = tonumber(os.getenv("PORT")) } })
  vim.cmd.edit(vim.fn.fnameescape(os.getenv("REPO") .. "/README.md"))
  local client = H.wait("the client to initialize", function()
    local c = vim.lsp.get_clients({ name = "flowd", bufnr = 0 })[1]
    return c and c.initialized and c
  end)
  out.root_dir = client.root_dir
  -- Bad input: one message each, and the client keeps working.
  vim.cmd("FlowCancel nope")
  out.cancel_error = H.wait("the cancel error", function() return H.note("flow.cancelEpic") end)
  vim.cmd("FlowValidate " .. vim.fn.fnameescape(os.getenv("REPO") .. "/gone.epic.json"))
  out.validate_error = H.wait("the validate error", function() return H.note("no such plan file") end)
  vim.cmd("FlowStatus")
  out.status = H.wait("the status", function() return H.note("flowd: no runs") end).msg
end)

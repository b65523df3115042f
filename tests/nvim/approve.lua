-- Approve before merge in Neovim against a real `flowd serve`: setup({pause_on_merge = true})
-- makes :FlowLaunch pass `merge`; the finished story's approval arrives as a notification;
-- :FlowReview shows its diff against the epic; :FlowRequestChanges sends it back with free text
-- (vim.ui.input); it asks again; :FlowApprove merges it.
vim.opt.rtp:append(os.getenv("PLUGIN_DIR"))
package.path = os.getenv("HARNESS_DIR") .. "/?.lua;" .. package.path
local H = require("harness")
local out = H.out

out.inputs = {}
vim.ui.input = function(opts, on_confirm)
  table.insert(out.inputs, opts.prompt)
  on_confirm("  shout it  ")
end

H.run(function()
  local repo, plan = os.getenv("REPO"), os.getenv("PLAN")
  local flowd = require("flowd")
  flowd.setup({ cmd = vim.json.decode(os.getenv("FLOWD_CMD")), pause_on_merge = true })
  out.pause_on = require("flowd.approve").pause_on(flowd.config)
  vim.cmd.edit(vim.fn.fnameescape(repo .. "/README.md"))
  H.wait("the client to initialize", function()
    local c = vim.lsp.get_clients({ name = "flowd", bufnr = 0 })[1]
    return c and c.initialized and c
  end)

  vim.cmd("FlowApprove")
  out.nothing = H.wait("nothing to approve", function() return H.note("no story is waiting for approval") end).msg

  vim.cmd("FlowLaunch " .. vim.fn.fnameescape(plan))
  H.wait("the launch", function() return H.note("launched run ") end)
  out.asked = H.wait("the approval", function() return H.note("(:FlowReview, :FlowApprove") end)
  local _, at = H.note("(:FlowReview, :FlowApprove")
  out.lanes_ready = H.wait("the lane ready", function()
    for _, line in ipairs(flowd.lane_lines(vim.lsp.get_clients({ name = "flowd" })[1].id)) do
      if line:find("ready", 1, true) then return line end
    end
  end)

  vim.cmd("FlowReview")
  out.review_name = vim.api.nvim_buf_get_name(0)
  out.review_ft = vim.bo.filetype
  out.review = vim.api.nvim_buf_get_lines(0, 0, -1, false)
  out.review_maps = vim.tbl_map(function(m) return m.lhs end, vim.api.nvim_buf_get_keymap(0, "n"))

  local mark = #out.notes
  vim.cmd("FlowRequestChanges")
  out.sent_back = H.wait("the revision's reply", function() return H.note("goes back to its coder", mark) end).msg
  H.wait("asked again", function() return H.note("(:FlowReview, :FlowApprove", at) end)

  mark = #out.notes
  vim.cmd("FlowReview a")
  out.review_again = vim.api.nvim_buf_get_lines(0, 0, -1, false)
  vim.api.nvim_feedkeys("ga", "x", false)
  out.approved = H.wait("the approval's reply", function() return H.note("merges next", mark) end).msg
  H.wait("the run to finish", function() return H.note("epic ok done", mark) end, 90000)
end)

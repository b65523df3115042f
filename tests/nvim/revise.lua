-- :FlowRevise against a real `flowd serve` and run: story a's first coder turn waits for GO_A,
-- story b (after a) for GO_B. A comment in a's worktree (text given), one in the main checkout
-- (story picked with vim.ui.select, text typed in vim.ui.input), and refusals.
vim.opt.rtp:append(os.getenv("PLUGIN_DIR"))
package.path = os.getenv("HARNESS_DIR") .. "/?.lua;" .. package.path
local H = require("harness")
local out = H.out

H.run(function()
  local repo, plan, worktrees = os.getenv("REPO"), os.getenv("PLAN"), os.getenv("WORKTREES")
  local flowd = require("flowd")
  flowd.setup({ cmd = vim.json.decode(os.getenv("FLOWD_CMD")) })

  vim.cmd.edit(vim.fn.fnameescape(repo .. "/README.md"))
  H.wait("the client to initialize", function()
    local c = vim.lsp.get_clients({ name = "flowd", bufnr = 0 })[1]
    return c and c.initialized and c
  end)
  vim.cmd("FlowLaunch " .. vim.fn.fnameescape(plan))
  local launched = H.wait("the launch", function() return H.note("launched run ") end)
  out.run_id = launched.msg:match("launched run (%S+)")
  H.wait("a active", function() return H.note("flowd: a active") end)
  local in_worktree = worktrees .. "/ep/a/a.txt"
  H.wait("a's worktree", function() return vim.fn.filereadable(in_worktree) == 1 end)

  -- In the story worktree: the story is known, the text given.
  vim.cmd.edit(vim.fn.fnameescape(in_worktree))
  vim.api.nvim_win_set_cursor(0, { 1, 0 })
  local mark = #out.notes
  vim.cmd("FlowRevise make it loud")
  out.worktree_reply = H.wait("the worktree reply", function() return H.note("takes the revision", mark) end)

  -- In the main checkout: b owns b.txt; the story is chosen with vim.ui.select, the text typed.
  local offered
  vim.ui.select = function(items, opts, on_choice)
    offered = vim.tbl_map(function(i) return opts.format_item(i) end, items)
    on_choice(items[1])
  end
  local prompts = {}
  vim.ui.input = function(opts, on_confirm)
    table.insert(prompts, opts.prompt)
    on_confirm("add a header")
  end
  vim.cmd.edit(vim.fn.fnameescape(repo .. "/b.txt"))
  vim.api.nvim_win_set_cursor(0, { 1, 0 })
  mark = #out.notes
  vim.cmd("FlowRevise")
  out.checkout_reply = H.wait("the checkout reply", function() return H.note("takes the revision", mark) end)
  out.offered = offered
  out.prompts = prompts

  -- Refused by the run: a line past the end (one sentence, an error).
  vim.cmd.edit(vim.fn.fnameescape(in_worktree))
  vim.cmd("normal! Go")
  vim.cmd("normal! ox")
  vim.api.nvim_win_set_cursor(0, { 3, 0 })
  mark = #out.notes
  vim.cmd("FlowRevise x")
  out.bad_line = H.wait("the bad line refusal", function() return H.note("past the end", mark) end)
  vim.cmd("edit!")

  -- A file no live story owns: nothing sent.
  vim.cmd.edit(vim.fn.fnameescape(plan))
  mark = #out.notes
  vim.cmd("FlowRevise x")
  out.unowned = H.wait("the unowned refusal", function() return H.note("no story of a live run", mark) end)

  vim.fn.writefile({}, os.getenv("GO_A"))
  H.wait("a merged", function() return H.note("flowd: a done") end, 120000)
  vim.cmd.edit(vim.fn.fnameescape(repo .. "/a.txt"))
  mark = #out.notes
  vim.cmd("FlowRevise again")
  out.merged = H.wait("the merged refusal", function() return H.note("has already merged", mark) end)
  vim.fn.writefile({}, os.getenv("GO_B"))
  H.wait("the run to finish", function() return H.note("epic ep done") end, 120000)
end)

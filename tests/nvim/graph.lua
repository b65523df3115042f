-- :FlowGraph against a real `flowd serve` running the demo epic: the graph and timeline buffers at
-- launch, mid-run and at the end, each beside the server's own flow/graph; <CR> on an active story
-- opens its worktree.
vim.opt.rtp:append(os.getenv("PLUGIN_DIR"))
package.path = os.getenv("HARNESS_DIR") .. "/?.lua;" .. package.path
local H = require("harness")
local out = H.out
out.points = {}

local function lines(buf) return vim.api.nvim_buf_get_lines(buf, 0, -1, false) end

H.run(function()
  local repo, plan = os.getenv("REPO"), os.getenv("PLAN")
  local flowd = require("flowd")
  local graph = require("flowd.graph")
  flowd.setup({ cmd = vim.json.decode(os.getenv("FLOWD_CMD")) })
  vim.cmd.edit(vim.fn.fnameescape(repo .. "/README.md"))
  local client = H.wait("the client to initialize", function()
    local c = vim.lsp.get_clients({ name = "flowd", bufnr = 0 })[1]
    return c and c.initialized and c
  end)

  vim.cmd("FlowLaunch " .. vim.fn.fnameescape(plan))
  local run_id = H.wait("the launch", function() return H.note("launched run ") end).msg:match("launched run (%S+)")
  out.run_id = run_id
  vim.cmd("FlowGraph")
  local view = graph.view(client.id)
  out.filetypes = { vim.bo[view.graph].filetype, vim.bo[view.timeline].filetype }

  -- Each point: the buffers once they show `want` (a line holding it), and the server's graph then.
  local function point(name, want)
    H.wait(name, function()
      for _, line in ipairs(lines(view.graph)) do
        if line:find(want, 1, true) then return true end
      end
    end, 120000)
    local server = client:request_sync("flow/graph", { runId = run_id }, 10000).result
    table.insert(out.points, { name = name, graph = lines(view.graph), timeline = lines(view.timeline), server = server })
  end

  point("launch", "● core")
  point("mid-run", "● parser")
  -- <CR> on parser, active: its worktree opens in the other window.
  local graph_win = vim.fn.bufwinid(view.graph)
  vim.api.nvim_set_current_win(graph_win)
  for _, spot in ipairs(view.spots) do
    if spot.story == "parser" then vim.api.nvim_win_set_cursor(0, { spot.line, spot.col }) end
  end
  vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes("<CR>", true, false, true), "x", false)
  out.opened = vim.api.nvim_buf_get_name(0)
  H.wait("the run to finish", function() return H.note("epic calc done") end, 120000)
  point("end", "✓ cli")
end)

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

  local function statuses(graph)
    local out = {}
    for _, s in ipairs((graph or {}).stories or {}) do out[s.id] = s.status end
    return out
  end
  -- Each point: the buffers once they show `want` (a line holding it) and what they drew is what
  -- the server's flow/graph says now (asked again until both agree: the run goes on meanwhile).
  local function point(name, want, timeline_has)
    local server
    H.wait(name, function()
      if timeline_has and not timeline_has(lines(view.timeline)) then return false end
      local shown = false
      for _, line in ipairs(lines(view.graph)) do
        if line:find(want, 1, true) then shown = true end
      end
      if not shown then return false end
      server = client:request_sync("flow/graph", { runId = run_id }, 10000).result
      return vim.deep_equal(statuses(server), statuses(view.last_graph))
    end, 120000)
    table.insert(out.points, { name = name, graph = lines(view.graph), timeline = lines(view.timeline), server = server })
  end

  point("launch", "● core")
  point("mid-run", "● parser")
  -- The parser's first merge turns the epic gate red: it goes back to its coder (merge revision 1).
  H.wait("the red merge's revision", function() return H.note("merge revision 1") end, 120000)
  point("red merge revised", "● parser", function(tl)
    for _, line in ipairs(tl) do
      if line:find("merging %d+:%d+, coding") or line:find("queued %d+:%d+, coding") then return true end
    end
  end)
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

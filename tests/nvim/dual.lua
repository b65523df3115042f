-- Neovim's half of the VS Code + Neovim journey on one daemon (editors/vscode/test/e2e/dual.ts):
-- the plugin's `flowd serve` joins the repository's daemon that VS Code's already started, and
-- shows the run VS Code launched, which waits for its merge's approval.
--   PHASE=watch:   shows the run asking, says so (OUT_JSON .. ".attached"), waits for GO (VS Code's
--                  window is reloaded meanwhile), then asks flow/status on the same client.
--   PHASE=approve: a restarted Neovim shows the same run asking, approves it (:FlowApprove) and
--                  sees the run end.
vim.opt.rtp:append(os.getenv("PLUGIN_DIR"))
package.path = os.getenv("HARNESS_DIR") .. "/?.lua;" .. package.path
local H = require("harness")
local out = H.out

--- The approval waiting in this client's state: { runId, lane, status of that lane }.
local function asking(client)
  for _, w in ipairs(require("flowd.approve").ready(require("flowd").waiting())) do
    if w.client == client.id then
      local lane = require("flowd").lane_of(client.id, w.params.runId, w.params.lane)
      if lane and lane.status == "ready" then
        return { runId = w.params.runId, lane = w.params.lane, status = lane.status }
      end
    end
  end
end

H.run(function()
  local repo, phase = os.getenv("REPO"), os.getenv("PHASE")
  local flowd = require("flowd")
  flowd.setup({ cmd = vim.json.decode(os.getenv("FLOWD_CMD")), pause_on_merge = true })
  vim.cmd.edit(vim.fn.fnameescape(repo .. "/README.md"))
  local client = H.wait("the client to initialize", function()
    local c = vim.lsp.get_clients({ name = "flowd", bufnr = 0 })[1]
    return c and c.initialized and c
  end, 60000)
  out.seen = H.wait("the run asking for approval", function() return asking(client) end, 60000)

  if phase == "watch" then
    vim.fn.writefile({ vim.json.encode(out.seen) }, os.getenv("OUT_JSON") .. ".attached")
    local go = os.getenv("OUT_JSON") .. ".go"
    H.wait("the go-ahead", function() return vim.uv.fs_stat(go) ~= nil end, 600000)
    -- Still the same client, still answering: a request on it after the other editor's reload.
    out.same_client = not client:is_stopped() and vim.lsp.get_client_by_id(client.id) ~= nil
    local answered
    client:request("flow/status", {}, function(err, res) answered = { err = err, res = res } end, 0)
    local res = H.wait("flow/status", function() return answered end, 60000)
    out.status_runs = {}
    for _, run in ipairs((res.res or {}).runs or {}) do
      table.insert(out.status_runs, { runId = run.runId, status = run.status })
    end
    out.still = asking(client)
    return
  end

  local mark = #out.notes
  vim.cmd("FlowApprove")
  out.approved = H.wait("the approval's reply", function() return H.note("merges next", mark) end, 60000).msg
  out.done = H.wait("the run to finish", function() return H.note("epic login done", mark) end, 120000).msg
  local lane = flowd.lane_of(client.id, out.seen.runId, out.seen.lane)
  out.lane_after = lane and lane.status
end)

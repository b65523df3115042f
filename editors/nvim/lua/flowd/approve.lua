-- Approve before merge in Neovim (docs/editors.md, docs/answers.md: `merge`). With
-- `pause_on_merge = true` in setup (off by default), :FlowLaunch adds `merge` to `pauseOn`: each
-- finished story waits `ready`. :FlowReview opens its diff against the epic in a scratch buffer
-- (`ga` approves, `gr` asks for changes there); :FlowApprove answers `approve` (`flow.answer`);
-- :FlowRequestChanges sends free text to its coder as a revision task, and :FlowRevise on a line
-- of its worktree's files sends a comment, which sends it back too. Either way it asks again.
local A = {}
local P = require("flowd.protocol")

A.APPROVE = "approve"

--- What :FlowLaunch passes as `pauseOn`: `pause_on`, plus `merge` when `pause_on_merge` is on, once.
function A.pause_on(config)
  local out = {}
  for _, reason in ipairs(config.pause_on or {}) do
    if not vim.tbl_contains(out, reason) then table.insert(out, reason) end
  end
  if config.pause_on_merge and not vim.tbl_contains(out, "merge") then table.insert(out, "merge") end
  return out
end

--- Whether an open `flow/attention` asks to approve a story's merge.
function A.is_approval(p)
  return p.reason == "paused" and p.lane ~= nil and p.lane ~= vim.NIL and vim.tbl_contains(p.actions or {}, A.APPROVE)
end

--- The waits (flowd.waiting()'s entries) that are approvals.
function A.ready(waits)
  return vim.tbl_filter(function(w) return A.is_approval(w.params) end, waits)
end

--- `story text…` when the first word names a waiting story, else (nil, the whole text).
function A.split(arg, waits)
  local first, rest = (arg or ""):match("^%s*(%S+)%s*(.-)%s*$")
  for _, w in ipairs(waits) do
    if first and w.params.lane == first then return first, rest end
  end
  return nil, vim.trim(arg or "")
end

--- Calls `fn(params)` with the approval to act on: the named one, the only one, or a pick.
local function pick(flowd, story, fn)
  local waits = A.ready(flowd.waiting())
  if story then waits = vim.tbl_filter(function(w) return w.params.lane == story end, waits) end
  if #waits == 0 then
    return flowd.say(story and ("story %s is not waiting for approval"):format(story) or "no story is waiting for approval")
  end
  if #waits == 1 then return fn(waits[1].params) end
  vim.ui.select(waits, {
    prompt = "flowd: which story?",
    format_item = function(w) return ("%s (run %s)"):format(w.params.lane, w.params.runId) end,
  }, function(choice) if choice then fn(choice.params) end end)
end

local function answer(flowd, p, text)
  flowd.execute(P.commands.answer, { runId = p.runId, story = p.lane, answer = text }, function(res)
    flowd.say(res.message)
  end)
end

--- :FlowApprove [story]
function A.approve(flowd, arg)
  local story = A.split(arg, A.ready(flowd.waiting()))
  pick(flowd, story, function(p) answer(flowd, p, A.APPROVE) end)
end

--- :FlowRequestChanges [story] [text]: without text, vim.ui.input asks for it.
function A.request_changes(flowd, arg)
  local story, text = A.split(arg, A.ready(flowd.waiting()))
  pick(flowd, story, function(p)
    local function send(words)
      words = words and vim.trim(words) or ""
      if words ~= "" then answer(flowd, p, words) end
    end
    if text ~= "" then return send(text) end
    vim.ui.input({ prompt = ("flowd: changes for story %s: "):format(p.lane) }, send)
  end)
end

--- The lines of `git diff` of the story's `branch` against where it forked from `epic_branch`,
--- run in your checkout `root`: never git in the story's worktree, whose git dir the lane wrote
--- (a config there could run a command as you; docs/sandbox.md "What it does not stop").
function A.diff_lines(root, epic_branch, branch)
  local out = vim.system({ "git", "-C", root, "diff", "--stat", "--patch", epic_branch .. "..." .. branch },
    { text = true }):wait()
  if out.code ~= 0 then return nil, vim.trim(out.stderr or "") end
  return vim.split(out.stdout, "\n", { trimempty = true })
end

--- :FlowReview [story]: the story's diff in a scratch buffer (filetype diff) named
--- flowd://review/<runId>/<story>; `ga` approves, `gr` asks for changes.
function A.review(flowd, arg)
  local story = A.split(arg, A.ready(flowd.waiting()))
  pick(flowd, story, function(p)
    local client = flowd.client()
    local run = client and flowd.run_of(client.id, p.runId)
    local lane = client and flowd.lane_of(client.id, p.runId, p.lane)
    local worktree = require("flowd.revise").worktree_of(lane)
    local epic_branch, branch = run and run.epicBranch, lane and lane.branch
    if not (worktree and epic_branch and branch) then
      return flowd.say("the run of story " .. p.lane .. " is not known yet", vim.log.levels.WARN)
    end
    local lines, err = A.diff_lines(client.root_dir, epic_branch, branch)
    if not lines then return flowd.say(("no diff for story %s: %s"):format(p.lane, err), vim.log.levels.ERROR) end
    local name = ("flowd://review/%s/%s"):format(p.runId, p.lane)
    local buf = vim.fn.bufnr(name)
    if buf == -1 then
      buf = vim.api.nvim_create_buf(true, true)
      vim.api.nvim_buf_set_name(buf, name)
    end
    vim.bo[buf].modifiable = true
    vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
    vim.bo[buf].modifiable, vim.bo[buf].filetype, vim.bo[buf].bufhidden = false, "diff", "hide"
    vim.b[buf].flowd_review = { runId = p.runId, story = p.lane, worktree = worktree }
    local opts = { buffer = buf, nowait = true }
    vim.keymap.set("n", "ga", function() A.approve(flowd, p.lane) end, vim.tbl_extend("force", opts, { desc = "flowd: approve" }))
    vim.keymap.set("n", "gr", function() A.request_changes(flowd, p.lane) end,
      vim.tbl_extend("force", opts, { desc = "flowd: request changes" }))
    vim.api.nvim_set_current_buf(buf)
    flowd.say(("story %s against %s: ga approves, gr asks for changes, :FlowRevise on a line of its worktree's files comments"):format(p.lane, epic_branch))
  end)
end

return A

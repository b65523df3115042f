-- :FlowRevise [text]: a review comment on the current line becomes a revision task for a story of
-- a live run (`flow.addRevision`, docs/editors.md). In a story worktree the comment goes to that
-- story; in the main checkout, to a live story owning the file, chosen with vim.ui.select.
local R = {}
local P = require("flowd.protocol")

-- Lane statuses (P.lane_statuses) of a story that may still take a revision: not done, failed or
-- skipped. The runner says why when one it cannot take arrives (a merge already begun).
local TAKES = { planned = true, active = true, waiting = true, ready = true, queued = true, merging = true }
-- Run statuses (P.run_statuses) of a run alive to take one.
local LIVE = { running = true, paused = true }

local function within(dir, file)
  return dir ~= nil and file:sub(1, #dir + 1) == dir .. "/"
end

--- The lane's worktree as the server sent it (`flow/lane`'s `worktree`), or nil.
function R.worktree_of(lane)
  local worktree = lane and lane.worktree
  return type(worktree) == "string" and vim.fs.normalize(worktree) or nil
end

--- Stories of live runs a comment on `file` may go to: the one whose worktree holds it, or (in the
--- main checkout) the one owning it by `owner` (flow/perimeter's answer). Returns those that may
--- still take a revision, and those that cannot (merged, failed), so the run can say why.
function R.candidates(status, file, owner)
  local taking, others = {}, {}
  for _, run in ipairs(status.runs or {}) do
    if LIVE[run.status] then
      for _, lane in ipairs(run.lanes or {}) do
        local entry = { runId = run.runId, story = lane.lane, status = lane.status }
        local list = TAKES[lane.status] and taking or others
        if within(R.worktree_of(lane), file) then return { entry }, {}, true end
        if owner and owner.story == lane.lane and (owner.runId == nil or owner.runId == run.runId) then
          table.insert(list, entry)
        end
      end
    end
  end
  return taking, others, false
end

--- :FlowRevise; `flowd` is the plugin module (its client, notify and execute).
function R.revise(flowd, arg)
  local client = flowd.client()
  if not client then return end
  local name = vim.api.nvim_buf_get_name(0)
  if name == "" or name:match("^%a+://") then
    return flowd.say("open a file of the story's change, then :FlowRevise on its line", vim.log.levels.ERROR)
  end
  local file = vim.fs.normalize(vim.fn.fnamemodify(name, ":p"))
  local line = vim.api.nvim_win_get_cursor(0)[1]
  local root = client.root_dir
  local uri = vim.uri_from_fname(file)

  local function send(target)
    local function post(text)
      if not text or vim.trim(text) == "" then return end
      local args = { runId = target.runId, story = target.story, uri = uri, line = line, text = vim.trim(text) }
      flowd.execute(P.commands.addRevision, args, function(res) flowd.say(res.message) end)
    end
    if arg and arg ~= "" then return post(arg) end
    vim.ui.input({ prompt = ("flowd revision for %s, line %d: "):format(target.story, line) }, post)
  end

  local function choose(list, others)
    -- Only stories that cannot take it (merged, failed): the run says why, in one sentence.
    if #list == 0 and others and #others > 0 then return send(others[1]) end
    if #list == 0 then
      return flowd.say(("no story of a live run can take a revision of %s"):format(vim.fn.fnamemodify(file, ":~:.")),
        vim.log.levels.WARN)
    end
    vim.ui.select(list, {
      prompt = "flowd: story to revise",
      format_item = function(c) return ("%s (%s, run %s)"):format(c.story, c.status, c.runId) end,
    }, function(choice) if choice then send(choice) end end)
  end

  client:request(P.requests.status, vim.empty_dict(), function(err, status)
    if err or not status then return flowd.say(err and err.message or "no status", vim.log.levels.ERROR) end
    local list, _, own = R.candidates(status, file, nil)
    if own then return send(list[1]) end
    if not within(root, file) then return choose({}) end
    client:request(P.requests.perimeter, { uri = uri }, function(perr, owner)
      if perr then return flowd.say(perr.message, vim.log.levels.ERROR) end
      choose(R.candidates(status, file, owner and owner.owner))
    end)
  end)
end

return R

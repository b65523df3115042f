-- Helpers for driving headless Neovim from pytest: wait for conditions, record what the user
-- would have seen (vim.notify, echoes), and write it all as JSON for the test to assert on.
local H = { out = { notes = {}, echoes = {}, steps = {}, errors = {} } }

local real_echo = vim.api.nvim_echo
vim.notify = function(msg, level) table.insert(H.out.notes, { msg = msg, level = level or vim.log.levels.INFO }) end
vim.api.nvim_echo = function(chunks, history, opts)
  local text = {}
  for _, chunk in ipairs(chunks) do table.insert(text, chunk[1]) end
  table.insert(H.out.echoes, table.concat(text))
  return real_echo(chunks, history, opts)
end

function H.finish(code)
  vim.fn.writefile({ vim.json.encode(H.out) }, os.getenv("OUT_JSON"))
  for _, client in ipairs(vim.lsp.get_clients()) do client:stop() end
  vim.wait(5000, function() return #vim.lsp.get_clients() == 0 end, 20)
  vim.cmd((code == 0) and "qa!" or ("cquit " .. code))
end

--- Wait until `fn()` is truthy; on timeout record `what` and end the session.
function H.wait(what, fn, ms)
  local value
  local ok = vim.wait(ms or 30000, function()
    value = fn()
    return value
  end, 20)
  if not ok then error({ timeout = "timed out waiting for " .. what }) end
  table.insert(H.out.steps, what)
  return value
end

--- The first recorded notification containing `text` (a plain substring), after index `from`.
function H.note(text, from)
  for i = (from or 0) + 1, #H.out.notes do
    if H.out.notes[i].msg:find(text, 1, true) then return H.out.notes[i], i end
  end
end

function H.run(steps)
  local ok, err = xpcall(steps, function(e)
    return type(e) == "table" and e.timeout or debug.traceback(tostring(e))
  end)
  if not ok then
    table.insert(H.out.errors, err)
    return H.finish(4)
  end
  H.finish(0)
end

return H

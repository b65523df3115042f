-- The :FlowGraph buffer: read-only, no wrapping, <CR> opens a story (set by flowd.graph), `q` closes.
vim.opt_local.wrap = false
vim.opt_local.number = false
vim.opt_local.cursorline = true
vim.keymap.set("n", "q", "<cmd>close<cr>", { buffer = true, silent = true, desc = "close the flowd graph" })

-- The :FlowGraph timeline buffer: read-only, no wrapping, `q` closes.
vim.opt_local.wrap = false
vim.opt_local.number = false
vim.keymap.set("n", "q", "<cmd>close<cr>", { buffer = true, silent = true, desc = "close the flowd timeline" })

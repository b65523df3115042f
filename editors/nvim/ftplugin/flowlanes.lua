-- The :FlowLanes scratch buffer: read-only, no wrapping, `q` closes its window.
vim.opt_local.wrap = false
vim.opt_local.number = false
vim.opt_local.cursorline = true
vim.keymap.set("n", "q", "<cmd>close<cr>", { buffer = true, silent = true, desc = "close the flowd lanes" })

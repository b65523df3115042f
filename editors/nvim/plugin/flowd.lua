-- flowd: nothing starts until require("flowd").setup() is called (docs/editors.md).
if vim.g.loaded_flowd then return end
vim.g.loaded_flowd = true

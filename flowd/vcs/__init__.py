"""Git: branches, worktrees, merges, diffs; `.worktreeinclude`."""

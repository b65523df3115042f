"""flowd: run a team of LLM coding agents on a repository, from the editor, over LSP."""

__version__ = "0.1.0"

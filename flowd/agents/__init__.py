"""Agents: the executor interface and its kinds (acp, script, cli, openai)."""

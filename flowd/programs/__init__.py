"""The agent programs flowd knows by name, and where each keeps its own state: one table that
the agents, the sandbox and detection all read (docs/roster.md, docs/sandbox.md)."""

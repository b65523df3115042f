"""The repository's shared daemon as its clients see it: where it lives, how to reach it, how to
start it, and `flowd serve`'s forwarder (docs/editors.md, "One daemon per repository").

Stdlib only, and below `flowd.control`, so the CLI's commands can ask the daemon; the daemon
itself (`flowd/server/daemon.py`) runs the language server and stands above.
"""

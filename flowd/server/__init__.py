"""`flowd serve`: the language server (docs/protocol.md).

Thin LSP glue (`setup.py`) over plain state holders: runs followed through their traces
(`runs.py`), notification pacing (`notify.py`), diagnostics (`diagnostics.py`) and file
watches (`watch.py`). Nothing here writes to stdout except the protocol itself.
"""

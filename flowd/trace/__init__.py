"""The trace: events, the writer and readers, the fold into a run view, checkpoints."""

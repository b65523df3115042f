"""What a run says happened: the event union a trace is made of, and the status words of stories
and runs (docs/trace.md). Pure data, below the engine's rules."""

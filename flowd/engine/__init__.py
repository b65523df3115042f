"""The epic engine: scheduler, story pipeline, task loop, gates, merge queue, report."""

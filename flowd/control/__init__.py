"""Commands over runs: run control, status, answers, review comments, progress."""

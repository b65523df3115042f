"""The engine's rules, with no I/O: what to launch, how a story's failure ends it, how a story
resumes, when the budget stops new work (docs/architecture.md: the engine core).

Each module is one concept. The shell (`engine/runner.py`, `engine/story.py`) gathers facts (git,
the run's fold), hands them to these functions or to the `Scheduler` machine as events, and carries
out the instructions it gets back: launching story tasks, emitting trace events, cancelling. The
rules are tested with tables and no git, no processes (tests/engine/test_core_*.py).
"""

"""Errors a user sees: one sentence, a file or field named, an exit code from docs/running.md."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_HALTED = 3
EXIT_CANCELLED = 130


class FlowdError(Exception):
    """An error meant for the user: printed as one line on stderr, never as a traceback."""

    exit_code: int = EXIT_BAD_INPUT

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if exit_code is not None:
            self.exit_code = exit_code

    def __str__(self) -> str:
        return self.message


class InputError(FlowdError):
    """Bad input: a plan, roster, config, parameter or repository state the user must fix."""


class NoExecutor(FlowdError):
    """No executor of the roster can ever take a role in this run (docs/roster.md): the run halts."""

    exit_code = EXIT_HALTED

    def __init__(self, role: str, message: str) -> None:
        super().__init__(message)
        self.role = role


class FileProblems(InputError):
    """Every problem found in one file, reported together."""

    def __init__(self, path: str, problems: list[str]) -> None:
        self.path = path
        self.problems = problems
        if len(problems) == 1:
            message = f"{path}: {problems[0]}"
        else:
            message = f"{path} has {len(problems)} problems: " + "; ".join(problems)
        super().__init__(message)

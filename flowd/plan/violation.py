"""A problem found in a plan file, with where it is: for the CLI, `flowd run` and the editor alike."""

from __future__ import annotations

from pydantic import Field

from flowd.base.wire import WireModel
from flowd.plan.jsonpos import Span


class Violation(WireModel):
    """One plan problem. Positions are 0-based (line, and column in characters of that line), as
    the language server wants them; `flowd plan validate` prints them 1-based for people."""

    message: str
    code: str = Field(description="`plan.*`: the diagnostic code the language server shows.")
    story: str | None = None
    field: str | None = Field(default=None, description="The story field, by its wire name.")
    item: int | None = Field(default=None, description="The index in that field's list, when one.")
    line: int | None = None
    column: int | None = None
    end_line: int | None = None
    end_column: int | None = None

    def at(self, span: Span | None) -> Violation:
        """This violation placed at `span` in the plan file (as it is when the place is unknown)."""
        if span is None:
            return self
        return self.model_copy(
            update={
                "line": span.line,
                "column": span.column,
                "end_line": span.end_line,
                "end_column": span.end_column,
            }
        )

    def located(self) -> str:
        """`LINE:COL: message` (1-based), or the bare message when there is no position."""
        if self.line is None:
            return self.message
        return f"{self.line + 1}:{(self.column or 0) + 1}: {self.message}"

"""The base of every file and wire model: camelCase on the wire, snake_case in Python; and the one
wording of their validation errors, for files, wire params, the planner's drafts and plans alike."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.alias_generators import to_camel


class WireModel(BaseModel):
    """Lenient on read (unknown keys ignored), camelCase on write.

    Validators are built on a model's first use, not when its module is imported: a command (or
    `flowd serve` answering `initialize`) pays only for the models it touches."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", defer_build=True
    )

    def wire(self) -> dict[str, object]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class StrictWireModel(WireModel):
    """For files the user writes: an unknown key is a typo worth reporting."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", defer_build=True
    )


UNKNOWN_KEY = "unknown key (check the spelling)"
# pydantic's union branch names in a location: they carry nothing for the reader.
_BRANCHES = frozenset({"int", "float", "str", "bool", "list", "dict", "literal", "function-after"})


@dataclass(frozen=True)
class Problem:
    """One pydantic error worded for people: pydantic's location (to place it in a file), that
    location as text (`prefix.field[2].sub`) and what is wrong."""

    loc: tuple[int | str, ...]
    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}" if self.where else self.message


def validation_problems(
    error: ValidationError, prefix: str = "", *, unknown: str = UNKNOWN_KEY
) -> list[Problem]:
    """Each pydantic error as a `Problem` (`unknown` says what to do about a field no model has)."""
    problems: list[Problem] = []
    for item in error.errors(include_url=False):
        message = item["msg"]
        if item["type"] == "extra_forbidden":
            message = unknown
        elif item["type"] == "missing":
            message = "is required"
        elif message.startswith("Value error, "):
            message = message.removeprefix("Value error, ")
        loc = tuple(item["loc"])
        problems.append(Problem(loc, _location(prefix, loc), message))
    return problems


def describe_validation_error(
    error: ValidationError, prefix: str = "", *, unknown: str = UNKNOWN_KEY
) -> list[str]:
    """Pydantic errors as short `field: problem` sentences."""
    return [str(problem) for problem in validation_problems(error, prefix, unknown=unknown)]


def _location(prefix: str, loc: tuple[int | str, ...]) -> str:
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part not in _BRANCHES:
            out += f".{part}" if out else str(part)
    return out

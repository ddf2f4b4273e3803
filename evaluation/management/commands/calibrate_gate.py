"""`manage.py calibrate_gate`: the relevance gate's thresholds refitted on the tenant's gate
question sets (evaluation/calibration.py), and with `--hold` proposed as a change the
regression gate checks before it serves. Exit codes: 0 measured (and held, with `--hold`, when
a better pair was found), 2 nothing could be calibrated."""

import json
from typing import Any

from django.core.management.base import CommandError, CommandParser

from audit.selectors import confirmed_questions
from evaluation.calibration import (
    PRECISION,
    PRECISION_RANGE,
    Calibration,
    CalibrationError,
    calibrate,
    calibration_hold,
    guarded_rules,
)
from evaluation.gate import covering_rules
from evaluation.management.configs import config_named
from evaluation.runs import RunUnavailable
from retrieval.management.store import StoreCommand
from retrieval.ragconfig.models import RagConfig

PROPOSED_BY = "calibrate_gate"


class Command(StoreCommand):
    help = ("Refit the thresholds of the relevance gate a config's lookups are judged by (the "
            "DISTANCE gate's reference_threshold and precise_threshold, or the MODEL gate's) on "
            "the tenant's gate question sets, by their real lookups: print what serves and "
            "what answers the sets best. --hold proposes the better pair as a change, which the "
            "regression gate checks before it serves. Exit 0: measured; 2: nothing could be "
            "calibrated.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="the tenant's slug")
        parser.add_argument("--dataset", help="a dataset's own config (default: the tenant "
                                              "default)")
        parser.add_argument("--precision", type=float, default=PRECISION,
                            help="the share of PRECISE answers that must be right (default "
                                 "%(default)s)")
        parser.add_argument("--gate-sets-only", action="store_true", dest="gate_sets_only",
                            help="leave out the questions whose evidence agents confirmed "
                                 "(read only where the tenant keeps its callers' questions)")
        parser.add_argument("--hold", action="store_true",
                            help="propose the better thresholds as a change through the gate")
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def handle(self, *args: Any, **options: Any) -> None:
        low, high = PRECISION_RANGE
        if not low <= options["precision"] <= high:
            raise CommandError(f"--precision lies between {low:g} and {high:g}", returncode=2)
        config = config_named(options["tenant"], options["dataset"])
        try:
            rules = guarded_rules(config) if options["hold"] else covering_rules(config)
        except CalibrationError as exc:
            raise CommandError(str(exc), returncode=2) from exc
        confirmed = [] if options["gate_sets_only"] else confirmed_questions(
            tenant=config.tenant, config_id=config.pk)
        try:
            calibration = calibrate(
                config=config, rules=rules, confirmed=confirmed, precision=options["precision"],
                progress=lambda done, total: self.stderr.write(
                    f"\r{done} of at most {total} lookups", ending="") if done % 50 == 0 else None)
        except (CalibrationError, RunUnavailable) as exc:
            raise CommandError(str(exc), returncode=2) from exc
        self.stderr.write("")
        held, refused = None, ""
        if options["hold"]:
            try:
                held = calibration_hold(config=config, calibration=calibration, by=PROPOSED_BY)
            except CalibrationError as exc:
                refused = f"nothing proposed: {exc}"
        if options["json"]:
            self.stdout.write(json.dumps({
                "config": config.scope_label, "version": config.version,
                "gate": calibration.gate, "fields": calibration.fields,
                "questions": {"on_topic": calibration.on_topic,
                              "off_topic": calibration.off_topic,
                              "confirmed": calibration.confirmed},
                "changed": calibration.changed, "values": calibration.values,
                "serving": calibration.serving.as_dict(),
                "chosen": calibration.chosen.as_dict(),
                "tried": [s.as_dict() for s in calibration.tried],
                "held": held.pk if held else None, "refused": refused}, indent=2))
        else:
            self._table(config, calibration)
            if held is not None:
                self.stdout.write(f"held as change {held.pk} of {config.scope_label}: the "
                                  f"regression gate checks it (job {held.job_id}) before it "
                                  "serves")
            elif options["hold"] and not refused:
                self.stdout.write("nothing proposed: the serving thresholds stay")
        if refused:
            raise CommandError(refused, returncode=2)

    def _table(self, config: RagConfig, calibration: Calibration) -> None:
        reference, precise = calibration.fields
        self.stdout.write(f"{config.scope_label}, version {config.version}: the "
                          f"{calibration.gate} gate, {calibration.on_topic} on-topic and "
                          f"{calibration.off_topic} off-topic questions, "
                          f"{calibration.confirmed} of them from evidence agents confirmed")
        self.stdout.write(f"  {reference:>26} {precise:>18} {'correct':>8} {'first':>6} "
                          f"{'off-EMPTY':>10} {'on-EMPTY':>9} {'PRECISE right':>14}")
        for score in sorted(calibration.tried, key=lambda s: (s.reference, s.precise)):
            mark = ("  <- serves" if score == calibration.serving else
                    "  <- chosen" if score == calibration.chosen else "")
            right = f"{score.precise_right}/{score.precise_answers}"
            self.stdout.write(f"  {score.reference:>26g} {score.precise:>18g} "
                              f"{score.correct:>8} {score.right_first:>6} "
                              f"{score.off_topic_empty:>10} {score.on_topic_empty:>9} "
                              f"{right:>14}{mark}")
        self.stdout.write(calibration.summary())

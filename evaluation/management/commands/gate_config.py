"""`manage.py gate_config`: the regression gate of a config change, for CI. Exit codes: 0 the
change passes, 1 a regression beyond a tolerance, 2 nothing could be checked."""

import json
from typing import Any

from django.core.management.base import CommandError, CommandParser

from evaluation.display import runs_compared
from evaluation.gate import SetVerdict, covering_rules, gate_measure
from evaluation.management.configs import config_named
from evaluation.management.overrides import parsed_overrides
from evaluation.models import GATE_METRICS
from evaluation.runs import RunUnavailable
from retrieval.management.store import StoreCommand
from retrieval.ragconfig.config import RagConfigConverter, RagConfigError
from retrieval.ragconfig.models import RagConfig
from retrieval.ragconfig.selectors import checked_settings

DIFF_ROWS = 200


def _unchecked(message: str) -> CommandError:
    return CommandError(message, returncode=2)


class Command(StoreCommand):
    help = ("Run the tenant's gate question sets against a change of a config (--set "
            "FIELD=VALUE over the config as it serves, or --config-version N of its history), as a "
            "change saved in the admin would be checked; print each set's figures and the "
            "queries that changed. Exit 0: it passes; 1: a metric dropped beyond its "
            "tolerance; 2: nothing could be checked. Nothing is saved but the evaluation runs.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="the tenant's slug")
        parser.add_argument("--dataset", help="a dataset's own config (default: the tenant "
                                              "default)")
        parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                            help="a setting of the change (repeatable)")
        parser.add_argument("--config-version", type=int, dest="config_version",
                            help="a version of the config's history "
                                                        "as the change (a rollback to it)")
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def handle(self, *args: Any, **options: Any) -> None:
        config = config_named(options["tenant"], options["dataset"])
        candidate = self._candidate(config, options["set"], options["config_version"])
        rules = covering_rules(config)
        if not rules:
            raise _unchecked(f"no gate question set covers {config.scope_label}: name one "
                             "under Evaluation › Question sets")
        try:
            verdicts = gate_measure(config=config, candidate=candidate, rules=rules,
                                    candidate_label=f"{config.scope_label}, gate_config",
                                    created_by="gate_config")
        except RunUnavailable as exc:
            raise _unchecked(f"a lookup answered UNAVAILABLE: {exc}") from exc
        if options["json"]:
            self.stdout.write(json.dumps(self._json(config, verdicts), ensure_ascii=False,
                                         indent=2))
        else:
            for verdict in verdicts:
                self.stdout.write("\n".join(self._lines(config, verdict)))
        failed = [v.rule.name for v in verdicts if not v.passed]
        if failed:
            raise CommandError(f"regression on {', '.join(failed)}", returncode=1)
        self.stdout.write(f"passed: {config.scope_label} may take the change")

    @staticmethod
    def _candidate(config: RagConfig, items: list[str], version: int | None) -> dict[str, Any]:
        if bool(items) == (version is not None):
            raise _unchecked("name the change: --set FIELD=VALUE (repeatable) or "
                             "--config-version N")
        try:
            if version is not None:
                change = config.changes.filter(version=version).first()
                if change is None:
                    raise _unchecked(f"{config.scope_label} has no version {version}")
                values: dict[str, object] = change.settings()
            else:
                values = parsed_overrides(items, base=config.setting_values())
            return RagConfigConverter.to_dict(checked_settings(
                tenant=config.tenant, values=values, base=config.to_settings()))
        except (RagConfigError, CommandError) as exc:
            raise _unchecked(str(exc)) from exc

    @staticmethod
    def _lines(config: RagConfig, verdict: SetVerdict) -> list[str]:
        lines = [f"gate set {verdict.rule.name} ({len(verdict.rule.questions)} "
                 f"questions): {'passed' if verdict.passed else 'REGRESSION'}",
                 f"  {'metric':<16} {'v' + str(config.version):>8} {'change':>8} {'drop':>8} "
                 f"{'tolerance':>10}"]
        for metric, drop in verdict.drops.items():
            mark = "  <- beyond" if metric in verdict.failed else ""
            lines.append(f"  {GATE_METRICS[metric][0]:<16} "
                         f"{verdict.baseline.metrics[metric]:>8.3f} "
                         f"{verdict.candidate.metrics[metric]:>8.3f} {drop:>8.3f} "
                         f"{verdict.tolerances[metric]:>10.3f}{mark}")
        compared = runs_compared(verdict.baseline, verdict.candidate, changed_only=True,
                                 limit=DIFF_ROWS)
        lines.append("  queries that changed: " + (", ".join(
            f"{change} {n}" for change, n in compared.counts.items() if n and change != "same")
            or "none"))
        for shown in compared.shown:
            before, after = shown.sides
            lines.append(f"    {shown.pair.change:<10} {shown.pair.query_id}: "
                         f"{_got(before)} -> {_got(after)}")
        if compared.more:
            lines.append(f"    and {compared.more} more (evaluation run "
                         f"{verdict.candidate.pk})")
        return lines

    @staticmethod
    def _json(config: RagConfig, verdicts: list[SetVerdict]) -> dict[str, Any]:
        sets = []
        for verdict in verdicts:
            compared = runs_compared(verdict.baseline, verdict.candidate, changed_only=True,
                                     limit=DIFF_ROWS)
            sets.append({
                "name": verdict.rule.name, "passed": verdict.passed,
                "baseline": verdict.baseline.metrics, "candidate": verdict.candidate.metrics,
                "drops": verdict.drops, "tolerances": verdict.tolerances,
                "failed": verdict.failed,
                "runs": {"baseline": verdict.baseline.pk, "candidate": verdict.candidate.pk},
                "changed": [{"id": s.pair.query_id, "change": s.pair.change,
                             "baseline": _got(s.a), "candidate": _got(s.b)}
                            for s in compared.shown]})
        return {"config": config.scope_label, "version": config.version,
                "passed": all(v.passed for v in verdicts), "sets": sets}


def _got(result: Any) -> str:
    if result is None:
        return "not asked"
    return ", ".join(result.ranking[:3]) or result.status

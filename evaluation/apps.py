from django.apps import AppConfig


class EvaluationConfig(AppConfig):
    name = "evaluation"
    verbose_name = "Evaluation"

    def ready(self) -> None:
        # Config changes ask evaluation's gate (retrieval/ragconfig/gate.py): retrieval, on the
        # floor below, holds a change without importing what judges it.
        from evaluation.gate import EvaluationGate
        from retrieval.ragconfig.gate import gate_register

        gate_register(EvaluationGate())

from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "audit"
    verbose_name = "Audit"

    def ready(self) -> None:
        # The document page is the datasets app's, a floor below: the audit adds its panel.
        from audit.document_panel import cited_panel
        from datasets.admin.panels import document_panel_register

        document_panel_register(cited_panel)

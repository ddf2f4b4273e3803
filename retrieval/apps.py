from django.apps import AppConfig


class RetrievalConfig(AppConfig):
    name = "retrieval"
    verbose_name = "Retrieval"

    def ready(self) -> None:
        import logging

        import jieba

        jieba.setLogLevel(logging.WARNING)  # jieba installs its own DEBUG handler

        from retrieval import checks  # noqa: F401  (registers the deploy checks)

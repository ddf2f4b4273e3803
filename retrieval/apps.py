from django.apps import AppConfig


class RetrievalConfig(AppConfig):
    name = "retrieval"
    verbose_name = "Retrieval"

    def ready(self) -> None:
        import logging

        import jieba

        jieba.setLogLevel(logging.WARNING)  # jieba installs its own DEBUG handler

        from datasets.tenancy.slug_secrets import slug_use_register
        from retrieval.index import checks  # noqa: F401  (registers the deploy checks)
        from retrieval.ragconfig.selectors import configs_naming_a_key_variable

        slug_use_register(configs_naming_a_key_variable)  # a rename must not move their key

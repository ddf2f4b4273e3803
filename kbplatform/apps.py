from django.apps import AppConfig


class KbPlatformConfig(AppConfig):
    name = "kbplatform"
    verbose_name = "kbplatform"

    def ready(self) -> None:
        from kbplatform import checks  # noqa: F401  (registers the system checks)

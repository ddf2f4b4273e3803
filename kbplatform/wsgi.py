"""The WSGI application: Django, and the WSGI apps of KB_WSGI_MOUNTS beside it by path prefix
(the MCP server's streamable HTTP transport at /mcp)."""

import os
import threading
from collections.abc import Callable, Iterable
from typing import Any, cast

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kbplatform.settings")
django_application = get_wsgi_application()

from django.conf import settings  # noqa: E402 (configured above)
from django.utils.module_loading import import_string  # noqa: E402

from kbplatform.tasks import recover_periodically  # noqa: E402

mounts = [(prefix, import_string(app)()) for prefix, app in settings.KB_WSGI_MOUNTS.items()]
for warm in settings.KB_WSGI_WARM:
    threading.Thread(target=import_string(warm), name="kb-warm", daemon=True).start()

if settings.KB_RECOVERY_IN_PROCESS:  # no worker recovers for this process's tasks: it does
    recover_periodically(threading.Event())


def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    path = environ.get("PATH_INFO", "")
    for prefix, app in mounts:
        if path == prefix or path.startswith(prefix + "/"):
            return cast(Iterable[bytes], app(environ, start_response))
    return django_application(environ, start_response)

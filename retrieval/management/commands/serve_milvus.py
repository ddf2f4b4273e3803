import signal
import sys
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from kbplatform.processes import HOST, MilvusEngineServer, ServiceError, lite3_folder
from retrieval.index.milvus.connection import is_local


class Command(BaseCommand):
    help = ("Serve the Milvus Lite file (var/milvus.db, or the path in MILVUS_URI) with Milvus "
            "2.5's engine on 127.0.0.1:PORT until Ctrl-C, published: every process of this "
            "machine started meanwhile without MILVUS_URI (web, worker, commands) connects to "
            "it, as a file opens in one process only. The demo does this itself.")
    # E005 (a file with separate workers) is what this command is the answer to.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=19530, help="default 19530")

    def handle(self, *args: Any, **options: Any) -> None:
        uri = settings.MILVUS_URI
        if not is_local(uri):
            raise CommandError(f"Milvus is served already: MILVUS_URI is {uri}")
        data = Path(uri).resolve()
        if data.is_dir():
            raise CommandError(lite3_folder(uri))
        log = settings.VAR_DIR / "log" / "milvus.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        server = MilvusEngineServer(f"http://{HOST}:{options['port']}", data, log)
        try:
            server.start()
        except ServiceError as exc:
            raise CommandError(str(exc)) from exc
        # SIGTERM (a service manager's stop) ends it like Ctrl-C: the publication is removed.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        try:
            server.publish()
            self.stdout.write(f"serving {data} at {server.uri} (log: {log}); Ctrl-C stops it")
            while server.process is not None and server.process.poll() is None:
                time.sleep(1)
            raise CommandError(f"milvus exited; its log: {log}\n{server.tail()}")
        except KeyboardInterrupt:
            pass
        finally:
            server.stop()

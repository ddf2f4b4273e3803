import os
from typing import Any

import anyio
from django.core.management.base import BaseCommand, CommandError, CommandParser


class Command(BaseCommand):
    help = ("Serve the agent tools over MCP on stdio (for Claude Desktop and any MCP client): "
            "every call uses the API key in the environment variable --api-key-env.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--api-key-env", default="KB_API_KEY",
                            help="the environment variable holding the API key "
                                 "(default KB_API_KEY)")
        from retrieval.tools.registry import PROFILES

        parser.add_argument("--profile", choices=[name or "default" for name in PROFILES],
                            default="default",
                            help="the tools served: default, every agent tool; research, "
                                 "search and fetch as deep-research clients call them")

    def handle(self, *args: Any, **options: Any) -> None:
        from mcp.server.stdio import stdio_server

        from retrieval.tools.mcp_server import build_server

        name = options["api_key_env"]
        key = os.environ.get(name, "").strip()
        if not key:
            raise CommandError(f"set {name} to an API key (python manage.py create_api_key)")
        profile = "" if options["profile"] == "default" else options["profile"]
        server = build_server(stdio_key=key, profile=profile)

        async def serve() -> None:
            # stdout is the protocol's: everything else this process says goes to stderr.
            async with stdio_server() as (read, write):
                await server.run(read, write, server.create_initialization_options())

        anyio.run(serve)

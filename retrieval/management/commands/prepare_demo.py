import os
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from datasets.documents.services import tenant_get_or_create
from datasets.models import ApiKey
from datasets.tenancy.keys import api_key_create, api_key_resolve
from retrieval.ragconfig.services import rag_config_ensure_default


class Command(BaseCommand):
    help = ("The demo's accounts (kbplatform/demo.py): the admin user with the given password, "
            "a tool key of the tenant kept in a file, the tenant's default RAG config. "
            "Idempotent: what exists and works is kept.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--admin-password-env", required=True, metavar="NAME",
                            help="the environment variable holding the admin's password")
        parser.add_argument("--key-file", required=True, type=Path,
                            help="where the tool key is kept (created with mode 600)")

    def handle(self, *args: Any, **options: Any) -> None:
        password = os.environ.get(options["admin_password_env"], "")
        if not password:
            raise CommandError(f"${options['admin_password_env']} is empty")
        tenant = tenant_get_or_create(slug=options["tenant"])
        admin, _ = get_user_model().objects.get_or_create(
            username="admin", defaults={"email": "admin@localhost"})
        admin.is_staff = admin.is_superuser = admin.is_active = True
        admin.set_password(password)  # the password the demo prints is the one that works
        admin.save()

        path: Path = options["key_file"]
        kept = path.read_text().strip() if path.is_file() else ""
        key = api_key_resolve(kept) if kept else None
        if key is None or key.tenant_id != tenant.pk:  # new, or a database created since
            _, plaintext = api_key_create(tenant=tenant, role=ApiKey.Role.TOOL, name="demo")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch(mode=0o600)
            path.write_text(plaintext + "\n")
        rag_config_ensure_default(tenant=tenant, changed_by="demo")  # what serves, visible
        self.stdout.write(f"admin user, tool key and RAG config of {tenant.slug} ready")

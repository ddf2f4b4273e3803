#!/usr/bin/env python
"""The seed's entry point: python scripts/rebuild_hybrid_knowledge.py --confirm REBUILD."""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kbplatform.settings")

if __name__ == "__main__":
    import django
    from django.core.management import call_command
    from django.core.management.base import CommandError

    django.setup()
    try:
        call_command("rebuild_hybrid_knowledge", *sys.argv[1:])
    except CommandError as exc:
        sys.stderr.write(f"error: {exc}\n")
        sys.exit(1)

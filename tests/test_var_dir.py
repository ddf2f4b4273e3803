"""No test writes into the checkout: the run's var folder and everything the settings keep
under it are outside it (tests/var_dir.py), on both runtimes, KB_VAR_DIR set or not."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from django.db import connection

from tests.conftest import BOTH_RUNTIMES, ROOT


@BOTH_RUNTIMES
def test_what_the_tests_write_is_kept_outside_the_checkout(runtime: str, settings: Any) -> None:
    kept = [Path(os.environ["KB_VAR_DIR"]), settings.VAR_DIR, settings.STATIC_ROOT,
            settings.KB_EVAL_SUITES_DIR]
    location = settings.STORAGES["default"]["OPTIONS"].get("location")
    if location:  # the original files, on a folder storage
        kept.append(Path(location))
    if not settings.MILVUS_URI.startswith("http"):
        kept.append(Path(settings.MILVUS_URI))
    if connection.vendor == "sqlite":
        kept.append(Path(connection.settings_dict["TEST"]["NAME"]))
    from hypothesis.configuration import storage_directory

    kept.append(Path(storage_directory().path))
    for path in kept:
        assert not path.resolve().is_relative_to(ROOT), path

"""The suite's KB_VAR_DIR: a temporary folder of the run unless the run names one, so that no
test writes into the checkout (the embedded database, original files, source caches, secrets,
the processes a test starts). A plugin (`-p tests.var_dir` in pyproject.toml), not a conftest:
pytest-django reads the settings before any conftest is imported."""

from __future__ import annotations

import os
import shutil
import tempfile

if not os.environ.get("KB_VAR_DIR"):
    os.environ["KB_VAR_DIR"] = _made = tempfile.mkdtemp(prefix="kb-tests-var-")

    def pytest_unconfigure() -> None:
        shutil.rmtree(_made, ignore_errors=True)

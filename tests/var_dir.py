"""The suite's KB_VAR_DIR: a temporary folder of the run unless the run names one, so that no
test writes into the checkout (the embedded database, original files, source caches, secrets,
the processes a test starts); Hypothesis's example database too. A plugin (`-p tests.var_dir`
in pyproject.toml), not a conftest: pytest-django reads the settings before any conftest is
imported."""

from __future__ import annotations

import os
import shutil
import tempfile

from hypothesis.configuration import set_hypothesis_home_dir

_made: list[str] = []
if not os.environ.get("KB_VAR_DIR"):
    os.environ["KB_VAR_DIR"] = tempfile.mkdtemp(prefix="kb-tests-var-")
    _made.append(os.environ["KB_VAR_DIR"])
# Hypothesis keeps its examples in ./.hypothesis, the checkout: a folder of the run instead.
_made.append(tempfile.mkdtemp(prefix="kb-tests-hypothesis-"))
set_hypothesis_home_dir(_made[-1])


def pytest_unconfigure() -> None:
    for folder in _made:
        shutil.rmtree(folder, ignore_errors=True)

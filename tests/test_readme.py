"""The README's commands as the scripts run them."""

from __future__ import annotations

import re

from tests.conftest import ROOT


def test_the_readme_names_every_package_the_test_command_installs() -> None:
    """It left out the tesseract packages scripts/test.sh installs for the OCR tests."""
    script = (ROOT / "scripts" / "test.sh").read_text()
    [line] = re.findall(r"^bash scripts/system-packages\.sh (.+)$", script, re.MULTILINE)
    readme = " ".join((ROOT / "README.md").read_text().split())
    [named] = re.findall(r"installs the Debian packages it needs \(`([^`]+)`\)", readme)
    assert named.split() == line.split()

"""The floors of docs/architecture.md: every module imports only from its own floor or below.

Apps: kbplatform → datasets → audit → retrieval → evaluation. Inside retrieval: the base
(types, text, fusion, chat, untrusted) → ragconfig → index → lookup → answers → admin → tools;
its wiring (models, apps, tasks) and its management commands sit on top of it. An import inside
a function counts like one at the top of the module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
APPS = ("kbplatform", "datasets", "audit", "retrieval", "evaluation")
RETRIEVAL = {  # a package or module of retrieval → its floor inside the app
    "types": 0, "analysis": 0, "lexical": 0, "fusion": 0, "chat": 0, "untrusted": 0,
    "ragconfig": 1, "models": 2, "index": 2, "lookup": 3, "answers": 4, "admin": 5, "tools": 6,
    "management": 7, "tasks": 7, "apps": 7, "migrations": 7, "__init__": 7,
}


# datasets/: its packages by concept (each with its tests in tests/datasets/<package>/) and
# its wiring (management's tests in tests/datasets/management/).
DATASETS = {"tenancy", "documents", "ingestion", "sources", "jobs", "api", "admin"}
DATASETS_WIRING = {"models", "apps", "tasks", "management", "migrations", "__init__"}


def floor(module: str) -> tuple[int, int] | None:
    """(app floor, floor inside the app) of a dotted module of the project, else None."""
    parts = module.split(".")
    if parts[0] not in APPS:
        return None
    app = APPS.index(parts[0])
    if parts[0] != "retrieval":
        return app, 0
    return app, RETRIEVAL[parts[1] if len(parts) > 1 else "__init__"]


def module_of(path: Path) -> str:
    relative = path.relative_to(ROOT).with_suffix("")
    parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
    return ".".join(parts)


def imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from retrieval.index import milvus` imports retrieval.index.milvus
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def importer_files() -> list[Path]:
    return sorted(path for app in APPS for path in (ROOT / app).rglob("*.py"))


def test_every_package_of_retrieval_has_a_floor() -> None:
    names = {path.stem if path.is_file() else path.name
             for path in (ROOT / "retrieval").iterdir()
             if path.suffix == ".py" or (path / "__init__.py").exists()}
    assert names <= set(RETRIEVAL), names - set(RETRIEVAL)


def test_datasets_holds_packages_by_concept_with_their_tests_mirrored() -> None:
    names = {path.stem if path.is_file() else path.name
             for path in (ROOT / "datasets").iterdir()
             if path.suffix == ".py" or (path / "__init__.py").exists()}
    assert names == DATASETS | DATASETS_WIRING, names ^ (DATASETS | DATASETS_WIRING)
    tests = ROOT / "tests" / "datasets"
    assert all((tests / package / "__init__.py").exists()
               and any((tests / package).glob("test_*.py")) for package in DATASETS)
    stray = [path.name for path in tests.glob("test_*.py")]
    assert not stray, f"tests of a package belong in its folder: {stray}"


@pytest.mark.parametrize("path", importer_files(), ids=lambda path: module_of(path))
def test_no_import_runs_against_the_floors(path: Path) -> None:
    importer = module_of(path)
    own = floor(importer)
    assert own is not None
    upward = []
    for line, name in imports(path):
        target = floor(name)
        if target is None or name.split(".")[:2] == importer.split(".")[:2]:
            continue  # a library, or the importer's own package
        if target > own:
            upward.append(f"line {line}: {name}")
    assert not upward, f"{importer} imports above its floor: {upward}"


@pytest.mark.parametrize(("importer", "imported"), [
    ("retrieval.index.sync", "retrieval.lookup.service"),
    ("retrieval.lookup.service", "retrieval.answers.agentic"),
    ("retrieval.analysis", "retrieval.ragconfig.config"),
    ("datasets.documents.services", "retrieval.tasks"),
    ("retrieval.tools.views", "evaluation.runs"),
])
def test_the_check_sees_an_upward_import(importer: str, imported: str) -> None:
    assert floor(imported) > floor(importer)  # type: ignore[operator]

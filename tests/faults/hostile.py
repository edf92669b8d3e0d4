"""Hostile inputs for the fault-injection tests: damaged images, odd file names, link loops, pickles.

Every maker writes one file and returns its path; the bytes are deterministic (seeded).
"""

from __future__ import annotations

import io
import os
import pickle
import struct
import zlib
from pathlib import Path

import numpy as np
from PIL import Image

LATIN1_NAME = b"caf\xe9.jpg"  # a Latin-1 byte: not valid UTF-8, so Python sees a surrogate escape


def smooth_rgb(height: int = 48, width: int = 64, seed: int = 0) -> np.ndarray:
    """A smooth colour image (compresses like a photo, so JPEG scans are long enough to corrupt)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    phase = rng.uniform(0, 6.28, 3)
    channels = [127 + 120 * np.sin(x / (5 + 3 * k) + y / (7 + 2 * k) + phase[k]) for k in range(3)]
    return np.stack(channels, axis=2).astype(np.uint8)


def good_jpeg(path: Path, height: int = 48, width: int = 64, seed: int = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(smooth_rgb(height, width, seed)).save(path, quality=90)
    return path


def good_png(path: Path, height: int = 48, width: int = 64, seed: int = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(smooth_rgb(height, width, seed)).save(path, format="PNG")  # PNG whatever the suffix
    return path


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def bomb_png(path: Path, side: int = 30000) -> Path:
    """A ~100-byte PNG whose header declares ``side`` x ``side`` pixels (a decompression bomb: a real
    one would inflate to ``side``^2 bytes; the header is what every reader must refuse)."""
    ihdr = struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0)  # 8-bit grayscale
    rows = zlib.compress(b"\x00" * (side + 1) * 4)  # a few valid rows; the rest would follow
    data = b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", rows) + _chunk(b"IEND", b"")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def truncated_jpeg(path: Path) -> Path:
    data = good_jpeg(path).read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def mid_corrupt_jpeg(path: Path, seed: int = 3) -> Path:
    """Valid header and end marker, random bytes over the middle of the image data (what a bad disk
    sector or a broken copy leaves)."""
    data = bytearray(good_jpeg(path, 96, 128).read_bytes())
    start = data.index(b"\xff\xda") + 20
    middle = (start + len(data) - 2) // 2
    garbage = np.random.default_rng(seed).integers(0, 256, 400, dtype=np.uint8).tobytes()
    data[middle - 200 : middle + 200] = garbage
    assert data[:2] == b"\xff\xd8" and data[-2:] == b"\xff\xd9"
    path.write_bytes(bytes(data))
    return path


def entropy_damaged_jpeg(path: Path, seed: int = 5, zeros: bool = False) -> Path:
    """Every marker intact, 120 bytes in the middle of the image data replaced by random bytes without
    an ``FF`` (or by zeros): no structure check sees it, libjpeg only warns and decodes smeared blocks."""
    data = bytearray(good_jpeg(path, 96, 128).read_bytes())
    start = data.index(b"\xff\xda") + 20
    middle = (start + len(data) - 2) // 2
    garbage = np.random.default_rng(seed).integers(0, 255, 120, dtype=np.uint8).tobytes()  # never FF
    data[middle - 60 : middle + 60] = bytes(120) if zeros else garbage
    path.write_bytes(bytes(data))
    return path


def zeroed_jpeg(path: Path) -> Path:
    return entropy_damaged_jpeg(path, zeros=True)


def bad_crc_png(path: Path) -> Path:
    """A PNG whose pixels decode fine but whose IDAT CRC is wrong (Pillow draws it without a word)."""
    data = bytearray(good_png(path).read_bytes())
    idat = data.index(b"IDAT")
    length = struct.unpack(">I", data[idat - 4 : idat])[0]
    crc_at = idat + 4 + length
    data[crc_at] ^= 0xFF
    path.write_bytes(bytes(data))
    return path


def inflate_damaged_png(path: Path) -> Path:
    """A PNG whose compressed image data is damaged under valid CRCs (the CRC recomputed, as a tool that
    rewrites chunks does): every structure check passes; only inflating the data finds it."""
    data = bytearray(good_png(path, 96, 128).read_bytes())
    idat = data.index(b"IDAT")
    length = struct.unpack(">I", data[idat - 4 : idat])[0]
    body = bytearray(data[idat + 4 : idat + 4 + length])
    for k in range(10, 40):
        body[k] ^= 0x55
    data[idat + 4 : idat + 4 + length] = body
    data[idat + 4 + length : idat + 8 + length] = struct.pack(">I", zlib.crc32(b"IDAT" + bytes(body)))
    path.write_bytes(bytes(data))
    return path


def _truncated(path: Path, fmt: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(smooth_rgb(96, 128)).save(path, format=fmt)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def truncated_bmp(path: Path) -> Path:
    return _truncated(path, "BMP")


def truncated_tiff(path: Path) -> Path:
    return _truncated(path, "TIFF")


def truncated_webp(path: Path) -> Path:
    return _truncated(path, "WEBP")


def zero_byte(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    return path


def text_as_jpeg(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("this is a text file with a .jpg name\n")
    return path


# name -> (maker, words one of which the reason must contain)
HOSTILE_IMAGES = {
    "bomb.png": (bomb_png, ("decompression bomb",)),
    "truncated.jpg": (truncated_jpeg, ("truncated",)),
    "midcorrupt.jpg": (mid_corrupt_jpeg, ("corrupt",)),
    "entropy.jpg": (entropy_damaged_jpeg, ("corrupt JPEG: the image data does not decode cleanly",)),
    "zeroed.jpg": (zeroed_jpeg, ("corrupt JPEG: the image data does not decode cleanly",)),
    "badcrc.png": (bad_crc_png, ("CRC",)),
    "inflate.png": (inflate_damaged_png, ("unreadable image",)),
    "truncated.bmp": (truncated_bmp, ("truncated",)),
    "truncated.tif": (truncated_tiff, ("truncated",)),
    "truncated.webp": (truncated_webp, ("not a readable image",)),
    "zero.jpg": (zero_byte, ("zero-byte",)),
    "text.jpg": (text_as_jpeg, ("not a readable image",)),
}


# the ones the scan's header check passes: damage inside the image data (a baseline JPEG's one scan is not
# walked by the scan; a PNG's compressed data under valid CRCs), found by the first decode of a run
DECODE_STAGE = frozenset({"midcorrupt.jpg", "entropy.jpg", "zeroed.jpg", "inflate.png"})


def write_hostile_images(folder: Path) -> dict[str, tuple[str, ...]]:
    """Every hostile image into ``folder``; returns {file name: words its reason must contain}."""
    for name, (maker, _) in HOSTILE_IMAGES.items():
        maker(folder / name)
    return {name: words for name, (_, words) in HOSTILE_IMAGES.items()}


def odd_name(folder: Path, raw: bytes) -> Path:
    """``folder / raw`` where ``raw`` may hold any bytes (``os.fsdecode`` gives the surrogate-escaped
    str Python uses for it)."""
    return Path(folder) / os.fsdecode(raw)


def link_loop(root: Path) -> Path:
    """``root/a/b/up -> ..`` and ``root/a/self -> ../a``: folder links that lead back up forever."""
    (root / "a" / "b").mkdir(parents=True, exist_ok=True)
    os.symlink("..", root / "a" / "b" / "up")
    os.symlink("../a", root / "a" / "self")
    return root


def file_link_loops(root: Path) -> list[str]:
    """Links among ``root``'s images that are not images of their own: ``self.jpg -> self.jpg``, a pair
    ``ping.jpg <-> pong.jpg``, ``alias.jpg`` -> a real image, ``gone.jpg`` -> nothing, and a folder
    linking to itself (``again -> .``). Returns their names (what the walk must name and not count)."""
    root.mkdir(parents=True, exist_ok=True)
    real = sorted(p.name for p in root.iterdir() if p.suffix == ".jpg")
    os.symlink("self.jpg", root / "self.jpg")
    os.symlink("pong.jpg", root / "ping.jpg")
    os.symlink("ping.jpg", root / "pong.jpg")
    os.symlink(real[0], root / "alias.jpg")
    os.symlink("missing.jpg", root / "gone.jpg")
    os.symlink(".", root / "again")
    return ["self.jpg", "ping.jpg", "pong.jpg", "alias.jpg", "gone.jpg", "again"]


class Planted:
    """A pickle payload that creates ``marker`` when unpickled (what a planted cache file would do)."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def planted_pickle(path: Path, marker: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps({"entries": Planted(marker)}))
    return path


def planted_checkpoint(path: Path, marker: Path) -> Path:
    """A ``.pt`` written by ``torch.save`` whose unpickling would create ``marker``."""
    import torch

    buffer = io.BytesIO()
    torch.save({"model": Planted(marker)}, buffer)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(buffer.getvalue())
    return path


def make_split(root: Path, count: int = 4, seed: int = 0) -> list[Path]:
    """``root/images/*.jpg`` with one box each in ``root/labels``, and ``root/m.names`` (2 classes)."""
    from turboyolo.formats.labels import write_yolo_labels

    root.mkdir(parents=True, exist_ok=True)
    (root / "m.names").write_text("apple\nbanana\n")
    paths = []
    for i in range(count):
        path = good_jpeg(root / "images" / f"img{i}.jpg", 48, 64, seed + i)
        write_yolo_labels(root / "labels" / f"img{i}.txt", np.array([[i % 2, 0.5, 0.5, 0.2 + 0.1 * i, 0.3]]))
        paths.append(path)
    return paths


# ----------------------------------------------------------------------------------------- damaged JPEGs

def _jpeg_bytes(rgb: np.ndarray, **options) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(rgb).save(buffer, "JPEG", **options)
    return buffer.getvalue()


def _photo(height: int, width: int, seed: int) -> np.ndarray:
    """Smooth colour with noise: AC coefficients in every component and band (long scans to damage)."""
    rng = np.random.default_rng(seed)
    noisy = smooth_rgb(height, width, seed).astype(np.int16) + rng.integers(-20, 21, (height, width, 3))
    return np.clip(noisy, 0, 255).astype(np.uint8)


# jpegtran scan scripts: DC alone per component, AC split by band, successive approximation of DC and AC
_SCAN_SCRIPTS = (
    "0 1 2: 0 0 0 1; 0: 1 5 0 2; 2: 1 63 0 1; 1: 1 63 0 1; 0: 6 63 0 2; 0: 1 63 2 1; 0 1 2: 0 0 1 0; "
    "1: 1 63 1 0; 2: 1 63 1 0; 0: 1 63 1 0;",
    "0: 0 0 0 0; 1: 0 0 0 0; 2: 0 0 0 0; 0: 1 9 0 0; 0: 10 63 0 0; 1: 1 63 0 0; 2: 1 63 0 0;",
)


def jpeg_sources(folder: Path, seed: int = 0, size: tuple[int, int] = (96, 136)) -> dict[str, bytes]:
    """Good JPEGs of every structure the damage below applies to: baseline (with and without restart
    markers), progressive from Pillow (4:2:0, 4:4:4, grey), and progressive from ``jpegtran -scans`` with
    custom scan scripts and restart intervals when jpegtran is installed (libjpeg-turbo-progs)."""
    import shutil
    import subprocess

    rgb = _photo(*size, seed)
    sources = {
        "baseline": _jpeg_bytes(rgb, quality=90),
        "restarts": _jpeg_bytes(rgb, quality=90, restart_marker_blocks=3),
        "progressive": _jpeg_bytes(rgb, quality=90, progressive=True),
        "progressive444": _jpeg_bytes(rgb, quality=90, progressive=True, subsampling=0),
        "progressivegrey": _jpeg_bytes(np.ascontiguousarray(rgb[..., 1]), quality=90, progressive=True),
    }
    if shutil.which("jpegtran"):
        folder.mkdir(parents=True, exist_ok=True)
        source, scans = folder / "jpegtran-source.jpg", folder / "scans.txt"
        source.write_bytes(sources["baseline"])
        for k, script in enumerate(_SCAN_SCRIPTS):
            scans.write_text(script)
            for restart in ([], ["-restart", "2B"]):
                name = f"jpegtran{k}{'r' if restart else ''}"
                sources[name] = subprocess.run(["jpegtran", "-scans", str(scans), *restart, str(source)],
                                               capture_output=True, check=True).stdout
        source.unlink()
        scans.unlink()
    return sources


def _spans(data: bytes) -> list[tuple[int, int, int]]:
    from turboyolo.formats.jpeg import segments

    return list(segments(data))


def _damages(data: bytes, rng) -> dict[str, bytes]:
    """Each kind of damage once on ``data`` (a good JPEG): what a broken copy, a bad sector, a buggy
    writer or an attacker leaves. Keys name the damage."""
    spans = _spans(data)
    scans = [(s, e) for m, s, e in spans if m == 0xDA]
    tables = [(s, e) for m, s, e in spans if m == 0xC4]
    frame = next(s for m, s, _ in spans if m in (0xC0, 0xC1, 0xC2))
    qtable = next(s for m, s, _ in spans if m == 0xDB)
    out = {}
    last = scans[-1]

    def put(name: str, position: int, new: bytes) -> None:
        out[name] = data[:position] + new + data[position + len(new):]

    body = lambda span: span[0] + 4  # noqa: E731 - where a segment's contents start
    count = lambda span: data[span[0] + 4]  # noqa: E731 - a scan's component count
    for k, span in enumerate(scans[:4]):
        header_end = body(span) + 1 + 2 * count(span) + 3
        middle = (header_end + span[1]) // 2
        size = max(1, min(60, (span[1] - header_end) // 3))
        put(f"garbage-scan{k}", middle, rng.integers(0, 256, size, dtype=np.uint8).tobytes())
        put(f"noff-scan{k}", middle, rng.integers(0, 255, size, dtype=np.uint8).tobytes())
        put(f"zeros-scan{k}", middle, bytes(size))
        params = body(span) + 1 + 2 * count(span)
        ss, se, approx = data[params], data[params + 1], data[params + 2]
        put(f"sos-se-scan{k}", params + 1, bytes([(se + 7) % 64 if se else 5]))
        put(f"sos-ss-scan{k}", params, bytes([ss + 1 if ss < 63 else 0]))
        put(f"sos-approx-scan{k}", params + 2, bytes([(approx + 0x11) & 0xFF]))
        put(f"sos-al-scan{k}", params + 2, bytes([(approx & 0xF0) | 14]))
        put(f"sos-tables-scan{k}", body(span) + 2, bytes([0x23]))  # tables DC 2 / AC 3: never defined
        put(f"sos-component-scan{k}", body(span) + 1, bytes([0x7F]))  # an id not in the frame
        put(f"sos-length-scan{k}", span[0] + 2, (int.from_bytes(data[span[0] + 2:span[0] + 4], "big") + 2)
            .to_bytes(2, "big"))
        out[f"dropped-scan{k}"] = data[:span[0]] + data[span[1]:]
    for k, span in enumerate(tables[:3]):
        put(f"dht-index-table{k}", body(span), bytes([data[body(span)] | 0x06]))
        put(f"dht-counts-table{k}", body(span) + 1, bytes([3]))  # three 1-bit codes: no prefix code
        put(f"dht-length-table{k}", span[0] + 2, (int.from_bytes(data[span[0] + 2:span[0] + 4], "big") - 3)
            .to_bytes(2, "big"))
        out[f"dropped-table{k}"] = data[:span[0]] + data[span[1]:]
    put("sof-sampling", frame + 11, bytes([0x35]))  # 3 x 5: out of range
    put("sof-fractional", frame + 11, bytes([0x33]))
    put("sof-components", frame + 9, bytes([2]))
    put("sof-precision", frame + 4, bytes([12]))
    put("sof-zero-width", frame + 7, bytes(2))
    put("sof-quant-table", frame + 12, bytes([3]))  # a quantisation table never defined
    put("dqt-index", qtable + 4, bytes([0x05]))
    put("dqt-length", qtable + 2, (int.from_bytes(data[qtable + 2:qtable + 4], "big") + 1).to_bytes(2, "big"))
    if len(scans) > 1:
        a, b = scans[-2], scans[-1]
        out["swapped-scans"] = data[:a[0]] + data[b[0]:b[1]] + data[a[0]:a[1]] + data[b[1]:]
    for fraction in (0.3, 0.7, 0.97):
        out[f"truncated{int(fraction * 100)}"] = data[:int(len(data) * fraction)]
    out["truncated-before-eoi"] = data[:-2]
    out["no-eoi-trailer"] = data[:-2] + b"\x00" * 64
    out["trailer-after-eoi"] = data + b"camera maker's trailer"  # allowed: not damage
    out["second-scan-after-eoi"] = data + data[last[0]:last[1]]  # after the end marker: never read
    return out


def damaged_jpegs(folder: Path, seed: int = 0, size: tuple[int, int] = (96, 136),
                  sources: tuple[str, ...] | None = None) -> dict[str, Path]:
    """Every damage of :func:`_damages` on every source of :func:`jpeg_sources` (``sources``: only those;
    a few hundred files for all), ``size`` (h, w) pixels, written to ``folder``; returns {file name:
    path}. Some damage leaves a file every decoder reads (a trailer after the end marker, a dropped scan no
    refinement follows): the tests judge each file by the strict whole decode, not by its name."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    for source, data in jpeg_sources(folder / ".sources", seed, size).items():
        if sources is not None and source not in sources:
            continue
        for damage, damaged in _damages(data, rng).items():
            path = folder / f"{source}-{damage}.jpg"
            path.write_bytes(damaged)
            written[path.name] = path
    if (folder / ".sources").exists():
        (folder / ".sources").rmdir()
    return written

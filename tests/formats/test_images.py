"""JPEG/PNG structure checks: every kind of good file passes, each kind of damage is named."""

import io
import struct

import numpy as np
import pytest
from PIL import Image

from faults.hostile import bad_crc_png, bomb_png, mid_corrupt_jpeg, smooth_rgb, truncated_jpeg
from turboyolo.formats.images import declared_size, jpeg_problem, png_problem, sniff


def _jpeg(image: Image.Image, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", **options)
    return buffer.getvalue()


@pytest.mark.parametrize("options", [
    {}, {"progressive": True}, {"restart_marker_blocks": 2}, {"restart_marker_rows": 1},
    {"subsampling": 0, "quality": 100}, {"optimize": True},
])
@pytest.mark.parametrize("mode", ["RGB", "L", "CMYK"])
def test_good_jpegs_pass(options, mode):
    image = Image.fromarray(smooth_rgb(96, 128)).convert(mode)
    data = _jpeg(image, **options)
    assert jpeg_problem(data) is None
    assert jpeg_problem(data + b"trailer after the end marker (camera makers add these)") is None
    assert declared_size(data, sniff(data)) == (128, 96)


def test_good_jpeg_with_exif_and_thumbnail_passes():
    image = Image.fromarray(smooth_rgb(64, 64))
    exif = image.getexif()
    exif[0x0112] = 6
    data = _jpeg(image, exif=exif)
    assert jpeg_problem(data) is None


def test_jpeg_damage_is_named(tmp_path):
    assert "truncated" in jpeg_problem(truncated_jpeg(tmp_path / "t.jpg").read_bytes())
    assert "corrupt JPEG" in jpeg_problem(mid_corrupt_jpeg(tmp_path / "m.jpg").read_bytes())
    assert "no start-of-image" in jpeg_problem(b"GIF89a....")
    good = _jpeg(Image.fromarray(smooth_rgb(96, 128)), restart_marker_blocks=1)
    first = good.index(b"\xff\xd0")
    swapped = good[:first] + b"\xff\xd3" + good[first + 2:]  # a restart marker out of sequence
    assert "restart marker out of sequence" in jpeg_problem(swapped)
    no_frame = good[:2] + good[good.index(b"\xff\xda"):]
    assert "before any frame header" in jpeg_problem(no_frame)


def test_random_garbage_in_the_scan_is_caught_at_least_as_often_as_pillow_does():
    data = _jpeg(Image.fromarray(smooth_rgb(192, 256)), quality=90)
    rng = np.random.default_rng(0)
    ours = pillow = 0
    for _ in range(60):
        start = int(rng.integers(len(data) // 3, 2 * len(data) // 3))
        damaged = data[:start] + rng.integers(0, 256, 600, dtype=np.uint8).tobytes() + data[start + 600:]
        ours += jpeg_problem(damaged) is not None
        try:
            Image.open(io.BytesIO(damaged)).load()
        except OSError:
            pillow += 1
    assert ours >= pillow and ours >= 50


def test_png_checks(tmp_path):
    buffer = io.BytesIO()
    Image.fromarray(smooth_rgb()).save(buffer, "PNG")
    good = buffer.getvalue()
    assert png_problem(good) == (None, False)
    assert declared_size(good, "PNG") == (64, 48)
    assert "CRC mismatch in chunk IDAT" in png_problem(bad_crc_png(tmp_path / "c.png").read_bytes())[0]
    assert "truncated PNG" in png_problem(good[: len(good) // 2])[0]
    assert "bad signature" in png_problem(b"\x89PNX" + good[4:])[0]
    assert declared_size(bomb_png(tmp_path / "b.png").read_bytes(), "PNG") == (30000, 30000)
    # an eXIf chunk after the image data: the decoder must read orientation after load()
    iend = good.rindex(b"IEND") - 4
    exif = b"MM\x00*\x00\x00\x00\x08\x00\x00"
    late = good[:iend] + struct.pack(">I", len(exif)) + b"eXIf" + exif + struct.pack(
        ">I", __import__("zlib").crc32(b"eXIf" + exif)) + good[iend:]
    assert png_problem(late) == (None, True)

"""JPEG/PNG structure checks: every kind of good file passes, each kind of damage is named."""

import io
import shutil
import struct
import subprocess
from pathlib import Path

import cv2
import numpy as np
import pytest
import simplejpeg
from PIL import Image

from faults.hostile import bad_crc_png, bomb_png, mid_corrupt_jpeg, smooth_rgb, truncated_jpeg
from turboyolo.formats.images import declared_size, eighth_scale_jpeg, jpeg_problem, png_problem, sniff


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


def _photo_like(height: int, width: int, seed: int) -> np.ndarray:
    """Smooth colour with edges and noise: AC coefficients at every frequency, in every component."""
    rng = np.random.default_rng(seed)
    image = smooth_rgb(height, width, seed).astype(np.int16)
    image[rng.integers(0, height, 20)] = rng.integers(0, 256, 3)  # hard edges
    image += rng.integers(-25, 26, image.shape, dtype=np.int16)
    return np.clip(image, 0, 255).astype(np.uint8)


def _progressive_variants():
    """Progressive JPEGs as Pillow and OpenCV write them: sizes off the block and MCU grid, 4:4:4 / 4:2:2 /
    4:2:0 / 4:1:1 / 4:4:0, grey, restart intervals, optimised tables, from 2 to over 32767 blocks of
    luma (one end-of-band run does not reach)."""
    sizes = [(16, 16), (61, 93), (240, 320), (333, 517), (1460, 1500)]
    for k, (height, width) in enumerate(sizes):
        rgb = _photo_like(height, width, k)
        for subsampling in (0, 1, 2):
            yield f"pillow {height}x{width} sub {subsampling}", _jpeg(
                Image.fromarray(rgb), progressive=True, subsampling=subsampling, quality=60 + 8 * k)
        yield f"pillow {height}x{width} grey optimised", _jpeg(
            Image.fromarray(rgb).convert("L"), progressive=True, optimize=True)
        for factor in ("IMWRITE_JPEG_SAMPLING_FACTOR_411", "IMWRITE_JPEG_SAMPLING_FACTOR_440"):
            ok, encoded = cv2.imencode(".jpg", rgb[..., ::-1], [
                cv2.IMWRITE_JPEG_PROGRESSIVE, 1, cv2.IMWRITE_JPEG_RST_INTERVAL, 3 + k,
                cv2.IMWRITE_JPEG_SAMPLING_FACTOR, getattr(cv2, factor), cv2.IMWRITE_JPEG_QUALITY, 90])
            assert ok
            yield f"opencv {height}x{width} {factor[-3:]} restarts", encoded.tobytes()


def _eighth(data: bytes) -> np.ndarray:
    height, width = simplejpeg.decode_jpeg_header(data)[:2]
    return simplejpeg.decode_jpeg(data, "RGB", min_height=-(-height // 8), min_width=-(-width // 8))


def test_eighth_scale_stream_decodes_to_the_same_pixels():
    for name, data in _progressive_variants():
        short = eighth_scale_jpeg(data)
        assert short is not None and len(short) < len(data), name
        assert jpeg_problem(short) is None, name
        assert np.array_equal(_eighth(short), _eighth(data)), name
        pillow = [Image.open(io.BytesIO(d)) for d in (data, short)]
        for image in pillow:
            image.draft(image.mode, (image.size[0] // 8, image.size[1] // 8))
        assert np.array_equal(np.asarray(pillow[0]), np.asarray(pillow[1])), name


def test_eighth_scale_stream_only_where_the_decodes_are_equal():
    rgb = _photo_like(240, 320, 0)
    assert eighth_scale_jpeg(_jpeg(Image.fromarray(rgb))) is None  # baseline: one scan holds everything
    data = _jpeg(Image.fromarray(rgb), progressive=True)
    from turboyolo.formats.images import _segments

    last_luma_ac = [(start, end) for marker, start, end in _segments(data)
                    if marker == 0xDA and data[start + 5] == 1 and data[start + 7] > 0][-1]
    incomplete = data[:last_luma_ac[0]] + data[last_luma_ac[1]:]  # the luma's last refinement missing
    assert jpeg_problem(incomplete) is None and eighth_scale_jpeg(incomplete) is None


def test_eighth_scale_stream_with_fill_bytes_and_odd_headers():
    from turboyolo.formats.images import _segments

    data = _jpeg(Image.fromarray(_photo_like(61, 259, 7)), progressive=True, subsampling=2)
    for marker in (0xC2, 0xC4, 0xDA):  # fill bytes (FF) before a frame, a table, a scan: legal, and read past
        at = next(start for m, start, _ in _segments(data) if m == marker)
        filled = data[:at] + b"\xff\xff" + data[at:]
        short = eighth_scale_jpeg(filled)
        assert short is not None and np.array_equal(_eighth(short), _eighth(data)), hex(marker)
    # the same id on two components: libjpeg refuses the scans, so no shorter stream may hide it
    sof = next(start for m, start, _ in _segments(data) if m == 0xC2)
    twice = bytearray(data)
    twice[sof + 10 + 3] = twice[sof + 10]
    assert eighth_scale_jpeg(bytes(twice)) is None


# Progressive scan scripts beyond what Pillow and OpenCV write (jpegtran -scans): every component's DC in
# a scan of its own, luma AC split by band, successive approximation of DC and AC, chroma before luma.
_SCAN_SCRIPTS = (
    "0: 0 0 0 0; 1: 0 0 0 0; 2: 0 0 0 0; 0: 1 63 0 0; 1: 1 63 0 0; 2: 1 63 0 0;",
    "0 1 2: 0 0 0 2; 0: 1 5 0 2; 2: 1 63 0 0; 1: 1 63 0 0; 0: 6 20 0 2; 0: 21 63 0 2; 0 1 2: 0 0 2 1; "
    "0: 1 63 2 1; 0 1 2: 0 0 1 0; 0: 1 63 1 0;",
    "0 1 2: 0 0 0 0; 0: 1 1 0 0; 0: 2 2 0 0; 1: 1 63 0 0; 0: 3 63 0 0; 2: 1 63 0 0;",
)


@pytest.mark.skipif(shutil.which("jpegtran") is None, reason="jpegtran not installed (libjpeg-turbo-progs)")
def test_eighth_scale_stream_with_custom_scan_scripts(tmp_path):
    for k, (height, width, subsampling) in enumerate([(240, 320, 2), (97, 203, 1), (130, 70, 0)]):
        source = tmp_path / f"{k}.jpg"
        source.write_bytes(_jpeg(Image.fromarray(_photo_like(height, width, k)), subsampling=subsampling))
        for s, script in enumerate(_SCAN_SCRIPTS):
            scans = tmp_path / "scans.txt"
            scans.write_text(script)
            for restart in ([], ["-restart", "2"], ["-restart", "1B"]):
                data = subprocess.run(["jpegtran", "-scans", str(scans), *restart, str(source)],
                                      capture_output=True, check=True).stdout
                short = eighth_scale_jpeg(data)
                assert short is not None and len(short) < len(data), (k, s, restart)
                assert np.array_equal(_eighth(short), _eighth(data)), (k, s, restart)
        arithmetic = subprocess.run(["jpegtran", "-arithmetic", "-progressive", str(source)],
                                    capture_output=True, check=True).stdout
        assert eighth_scale_jpeg(arithmetic) is None  # only Huffman-coded files are rewritten


@pytest.mark.skipif(not list(Path("/usr/share/backgrounds").glob("*.jpg")),
                    reason="no photos in /usr/share/backgrounds (Debian's lomiri-wallpapers packages)")
def test_eighth_scale_stream_on_camera_photos():
    progressive = 0
    for path in sorted(Path("/usr/share/backgrounds").glob("*.jpg")):
        data = path.read_bytes()
        short = eighth_scale_jpeg(data)
        if short is not None:
            progressive += 1
            assert np.array_equal(_eighth(short), _eighth(data)), path.name
    assert progressive

"""Decode: reduced-size JPEG, every mode to RGB uint8, EXIF orientation, errors name the file."""

from pathlib import Path

import cv2
import numpy as np
import pytest
import simplejpeg
from PIL import Image

from turboyolo.data.decode import decode_image, load_image, probe_image
from turboyolo.errors import DataError


def _gradient(h, w):
    y, x = np.mgrid[0:h, 0:w]
    return np.stack([x * 255 // w, y * 255 // h, (x + y) * 255 // (h + w)], axis=2).astype(np.uint8)


def test_reduced_jpeg_matches_full_decode_then_resize(tmp_path):
    image = _gradient(600, 800)
    Image.fromarray(image).save(tmp_path / "a.jpg", quality=95)
    small, orig_hw = decode_image(tmp_path / "a.jpg", 100)
    assert small.shape == (75, 100, 3) and orig_hw == (600, 800) and small.dtype == np.uint8
    reference = cv2.resize(load_image(tmp_path / "a.jpg"), (100, 75), interpolation=cv2.INTER_AREA)
    assert np.abs(small.astype(int) - reference.astype(int)).mean() < 2.0
    assert load_image(tmp_path / "a.jpg").shape == (600, 800, 3)
    assert load_image(tmp_path / "a.jpg", 1000).shape == (750, 1000, 3)  # enlarged (linear)


@pytest.mark.parametrize("mode", ["L", "RGBA", "P", "CMYK", "I;16", "LA", "1"])
def test_modes_become_rgb(tmp_path, mode):
    base = Image.fromarray(_gradient(30, 40))
    if mode == "I;16":
        img = Image.fromarray(np.asarray(base.convert("L")).astype(np.uint16) * 257)
        path = tmp_path / "x.png"
    else:
        img = base.convert(mode)
        path = tmp_path / ("x.jpg" if mode == "CMYK" else "x.png")
    img.save(path)
    out = load_image(path)
    assert out.shape == (30, 40, 3) and out.dtype == np.uint8 and out.flags.c_contiguous
    if mode == "I;16":  # 16-bit scaled down, not clipped
        np.testing.assert_allclose(out[..., 0], np.asarray(base.convert("L")), atol=1)
    if mode == "CMYK":
        assert np.abs(out.astype(int) - _gradient(30, 40).astype(int)).mean() < 12


def test_exif_orientation(tmp_path):
    image = np.zeros((20, 40, 3), np.uint8)
    image[:, :10] = 255  # white on the left
    pil = Image.fromarray(image)
    exif = pil.getexif()
    exif[0x0112] = 6  # viewer rotates 90 degrees clockwise
    pil.save(tmp_path / "r.jpg", exif=exif, quality=95)
    out, orig_hw = decode_image(tmp_path / "r.jpg")
    assert out.shape == (40, 20, 3) and orig_hw == (40, 20)
    assert out[:10, :, 0].mean() > 200 and out[30:, :, 0].mean() < 50  # white now on top
    assert probe_image(tmp_path / "r.jpg")[:2] == (40, 20)
    small, orig = decode_image(tmp_path / "r.jpg", 20)
    assert small.shape == (20, 10, 3) and orig == (40, 20)


def test_bad_files_raise_naming_the_file(tmp_path):
    (tmp_path / "zero.jpg").write_bytes(b"")
    (tmp_path / "text.jpg").write_text("not an image")
    Image.fromarray(_gradient(200, 200)).save(tmp_path / "full.jpg")
    data = (tmp_path / "full.jpg").read_bytes()
    (tmp_path / "cut.jpg").write_bytes(data[: len(data) // 2])
    for name in ("zero.jpg", "text.jpg", "cut.jpg", "missing.jpg"):
        with pytest.raises(DataError, match=name):
            load_image(tmp_path / name)
        with pytest.raises(DataError, match=name):
            probe_image(tmp_path / name)


@pytest.mark.parametrize("suffix", [".bmp", ".tif", ".webp", ".png"])
def test_other_formats(tmp_path, suffix):
    image = _gradient(48, 64)
    Image.fromarray(image).save(tmp_path / f"x{suffix}", **({"lossless": True} if suffix == ".webp" else {}))
    out, orig_hw = decode_image(tmp_path / f"x{suffix}")
    assert orig_hw == (48, 64)
    np.testing.assert_array_equal(out, image)
    assert decode_image(tmp_path / f"x{suffix}", 32)[0].shape == (24, 32, 3)


def test_palette_with_transparency(tmp_path):
    img = Image.fromarray(_gradient(20, 20)).convert("P")
    img.info["transparency"] = 0
    img.save(tmp_path / "p.png", transparency=0)
    out = load_image(tmp_path / "p.png")
    assert out.shape == (20, 20, 3) and out.dtype == np.uint8


def test_scan_check_and_decode_refuse_the_same_files(tmp_path):
    """One check in two stages: what the scan's probe refuses (headers, structure), every decode refuses
    with the same reason; what only decoding the image data shows, the probe passes and every decode
    refuses."""
    from faults.hostile import DECODE_STAGE, write_hostile_images

    expected = write_hostile_images(tmp_path)
    for name, words in expected.items():
        with pytest.raises(DataError) as decoded:
            decode_image(tmp_path / name, 64)
        assert name in str(decoded.value) and any(w in str(decoded.value) for w in words), str(decoded.value)
        if name in DECODE_STAGE:
            probe_image(tmp_path / name)
            continue
        with pytest.raises(DataError) as probed:
            probe_image(tmp_path / name)
        assert str(probed.value) == str(decoded.value)


def test_save_image_takes_any_file_name(tmp_path):
    import os

    from faults.hostile import LATIN1_NAME
    from turboyolo.data.decode import save_image

    path = tmp_path / os.fsdecode(LATIN1_NAME)  # cv2.imwrite would crash the process (signal 11)
    save_image(path, _gradient(20, 30)[:, :, ::-1])
    assert os.path.exists(os.fsencode(tmp_path) + b"/" + LATIN1_NAME)
    assert load_image(path).shape == (20, 30, 3)
    with pytest.raises(DataError, match="cannot encode"):
        save_image(tmp_path / "x.unknownformat", _gradient(4, 4))


def _pillow_decode(path, target=None):
    """What decode_image gave before the strict JPEG path: Pillow alone (its draft for ``target``)."""
    import turboyolo.data.decode as decode

    original = decode._strict_jpeg
    decode._strict_jpeg = lambda *args, **kwargs: None
    try:
        return decode_image(path, target)
    finally:
        decode._strict_jpeg = original


def _jpeg_variants(folder):
    from faults.hostile import smooth_rgb

    rgb = np.ascontiguousarray(np.tile(smooth_rgb(120, 160), (2, 2, 1)))
    image = Image.fromarray(rgb)
    image.save(folder / "baseline.jpg", quality=90)
    image.save(folder / "progressive.jpg", quality=85, progressive=True)
    image.save(folder / "s444.jpg", quality=95, subsampling=0)
    image.convert("L").save(folder / "gray.jpg")
    image.convert("CMYK").save(folder / "cmyk.jpg")
    image.crop((0, 0, 11, 7)).save(folder / "tiny.jpg")
    exif = image.getexif()
    exif[0x0112] = 6
    image.save(folder / "rotated.jpg", exif=exif)
    darknet = sorted(Path("/usr/share/darknet/data").glob("*.jpg"))  # real photos, where installed
    return sorted(folder.glob("*.jpg")) + darknet


def test_strict_jpeg_decode_gives_pillows_pixels(tmp_path):
    for path in _jpeg_variants(tmp_path):
        probe_image(path)  # valid photos are never refused
        for target in (None, 1000, 416, 100, 9):
            strict, size = decode_image(path, target)
            reference, reference_size = _pillow_decode(path, target)
            assert size == reference_size and np.array_equal(strict, reference), (path.name, target)


@pytest.mark.parametrize("maker", ["entropy_damaged_jpeg", "zeroed_jpeg"])
def test_damaged_jpeg_image_data_passes_the_scan_and_is_refused_by_every_decode(tmp_path, maker):
    import faults.hostile as hostile

    path = getattr(hostile, maker)(tmp_path / "damaged.jpg")
    _pillow_decode(path)  # Pillow decodes it without a word: markers and structure are intact
    assert probe_image(path)[:2] == (96, 128)  # the scan reads headers and structure only
    for check in (decode_image, lambda p: decode_image(p, 32), lambda p: decode_image(p, 12)):
        with pytest.raises(DataError, match="damaged.jpg: corrupt JPEG: the image data does not decode "
                                            "cleanly .libjpeg: Corrupt JPEG data"):
            check(path)


def test_a_stray_byte_before_the_end_marker_is_harmless(tmp_path):
    from faults.hostile import good_jpeg

    data = good_jpeg(tmp_path / "ok.jpg").read_bytes()
    (tmp_path / "stray.jpg").write_bytes(data[:-2] + b"\x00" + data[-2:])  # some encoders write one
    probe_image(tmp_path / "stray.jpg")
    assert np.array_equal(decode_image(tmp_path / "stray.jpg")[0], decode_image(tmp_path / "ok.jpg")[0])


def test_a_reduced_decode_leaves_out_only_what_its_scale_never_reads(tmp_path, monkeypatch):
    """At 1/8 scale a progressive JPEG's luma AC scans are not decoded (formats.images.eighth_scale_jpeg)
    once the file's whole decode passed (``verified``): the same pixels as Pillow's. A file not verified
    is decoded whole at every scale, so damage in those scans is refused; the scan's check reads the
    headers of those scans only."""
    import turboyolo.data.decode as decode
    from faults.hostile import smooth_rgb
    from turboyolo.formats.images import _segments, eighth_scale_jpeg

    rng = np.random.default_rng(3)
    rgb = np.clip(smooth_rgb(480, 640).astype(int) + rng.integers(-30, 31, (480, 640, 3)), 0, 255)
    Image.fromarray(rgb.astype(np.uint8)).save(tmp_path / "p.jpg", quality=90, progressive=True)
    data = (tmp_path / "p.jpg").read_bytes()
    real, lengths = decode.simplejpeg.decode_jpeg, []
    monkeypatch.setattr(decode.simplejpeg, "decode_jpeg",
                        lambda stream, *args, **kw: lengths.append(len(stream)) or real(stream, *args, **kw))
    for target in (60, 80, 41):  # 1/8 scale
        for verified in (False, True):
            lengths.clear()
            pixels, size = decode_image(tmp_path / "p.jpg", target, verified=verified)
            assert lengths == [len(eighth_scale_jpeg(data)) if verified else len(data)]
            reference = _pillow_decode(tmp_path / "p.jpg", target)[0]
            assert size == (480, 640) and np.array_equal(pixels, reference)
    assert len(eighth_scale_jpeg(data)) < len(data) / 2
    lengths.clear()
    decode_image(tmp_path / "p.jpg", 100, verified=True)  # 1/4 scale: the whole file
    assert lengths == [len(data)]

    start, end = max(((s, e) for marker, s, e in _segments(data) if marker == 0xDA and data[s + 5] == 1
                      and data[s + 7] > 0), key=lambda span: span[1] - span[0])  # the largest luma AC scan
    middle = (start + end) // 2
    garbage = rng.integers(0, 255, 200, dtype=np.uint8).tobytes()  # no FF: the structure walk passes it
    (tmp_path / "d.jpg").write_bytes(data[:middle] + garbage + data[middle + 200:])
    probe_image(tmp_path / "d.jpg")
    for check in (decode_image, lambda p: decode_image(p, 100), lambda p: decode_image(p, 60)):
        with pytest.raises(DataError, match="d.jpg: corrupt JPEG"):
            check(tmp_path / "d.jpg")


def test_harmless_warnings_are_read_past_and_damage_after_them_is_not(tmp_path):
    """A damaged ICC profile, a JFIF version 2 and an unknown Adobe colour transform make libjpeg warn:
    the strict decode reads past them (the same pixels as without them), and still refuses damaged image
    data in the same file."""
    from faults.hostile import entropy_damaged_jpeg, good_jpeg

    data = good_jpeg(tmp_path / "ok.jpg", 96, 128).read_bytes()
    reference = decode_image(tmp_path / "ok.jpg")[0]
    jfif = data.index(b"JFIF\x00")
    icc = b"ICC_PROFILE\x00" + bytes([3, 2]) + bytes(20)  # chunk 3 of 2: libjpeg's "bad ICC marker"
    app2 = b"\xff\xe2" + (len(icc) + 2).to_bytes(2, "big") + icc
    adobe = b"Adobe" + bytes([0, 100, 0, 0, 0, 0, 7])  # transform 7: unknown
    app14 = b"\xff\xee" + (len(adobe) + 2).to_bytes(2, "big") + adobe
    app0_end = jfif - 4 + int.from_bytes(data[jfif - 2:jfif], "big") + 2
    variants = {
        "icc.jpg": data[:2] + app2 + data[2:],
        "jfif2.jpg": data[:jfif + 5] + b"\x02" + data[jfif + 6:],
        "adobe.jpg": data[:2] + app14 + data[app0_end:],  # no JFIF segment: libjpeg reads the transform
    }
    for name, variant in variants.items():
        with pytest.raises(ValueError, match="ICC|JFIF|Adobe"):  # libjpeg warns (simplejpeg raises)
            simplejpeg.decode_jpeg(variant)
        (tmp_path / name).write_bytes(variant)
        probe_image(tmp_path / name)
        assert np.array_equal(decode_image(tmp_path / name)[0], reference), name
        assert np.array_equal(decode_image(tmp_path / name, 16)[0], decode_image(tmp_path / "ok.jpg", 16)[0])
    damaged = entropy_damaged_jpeg(tmp_path / "damaged.jpg").read_bytes()
    at = damaged.index(b"JFIF\x00")
    (tmp_path / "both.jpg").write_bytes(damaged[:at + 5] + b"\x02" + damaged[at + 6:])
    with pytest.raises(DataError, match="both.jpg: corrupt JPEG: the image data does not decode cleanly"):
        decode_image(tmp_path / "both.jpg")

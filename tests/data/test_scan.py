"""The scan on a corpus of bad files: each one reported with the right reason; loader still full."""

import os

import numpy as np
from PIL import Image

from synth import make_image_folder as make_dataset
from turboyolo.data.augment import AugmentParams
from turboyolo.data.pipeline import build_loader
from turboyolo.data.scan import scan_dataset


def _write_corpus(root):
    make_dataset(root, count=6)
    images, labels = root / "images", root / "labels"
    good = Image.open(images / "img000.jpg").convert("RGB")
    data = (images / "img000.jpg").read_bytes()
    (images / "truncated.jpg").write_bytes(data[: len(data) // 2])
    (images / "zero.jpg").write_bytes(b"")
    (images / "text.jpg").write_text("hello")
    good.convert("CMYK").save(images / "cmyk.jpg")
    Image.fromarray(np.arange(64 * 48, dtype=np.uint16).reshape(48, 64) * 20).save(images / "gray16.png")
    good.convert("RGBA").save(images / "rgba.png")
    exif = good.getexif()
    exif[0x0112] = 8
    good.save(images / "rotated.jpg", exif=exif)
    bad_labels = {
        "classrange": "7 0.5 0.5 0.1 0.1\n",
        "nan": "0 nan 0.5 0.1 0.1\n",
        "commas": "0,0.5,0.5,0.1,0.1\n",
        "fourcols": "0 0.5 0.5 0.1\n",
        "negsize": "0 0.5 0.5 -0.1 0.1\n",
        "duplicates": "1 0.5 0.5 0.1 0.1\n1 0.5 0.5 0.1 0.1\n0 0.2 0.2 0.1 0.1\n",
        "clipped": "0 0.996 0.5 0.02 0.1\n",
        "faroutside": "0 0.9 0.5 0.4 0.1\n",
    }
    for stem, text in bad_labels.items():
        good.save(images / f"{stem}.jpg")
        (labels / f"{stem}.txt").write_text(text)
    good.save(images / "nolabel.jpg")
    for stem in ("cmyk", "gray16", "rgba", "rotated"):
        (labels / f"{stem}.txt").write_text("0 0.5 0.5 0.2 0.2\n")


def test_bad_corpus_reasons(tmp_path, isolated_cache):
    _write_corpus(tmp_path)
    result = scan_dataset(tmp_path / "images", "train", report_path=tmp_path / "report.txt")
    excluded = {p.split("/")[-1]: r for p, r in result.excluded}
    fixed = {p.split("/")[-1]: r for p, r in result.fixed}
    assert set(excluded) == {"truncated.jpg", "zero.jpg", "text.jpg", "classrange.jpg", "nan.jpg",
                             "commas.jpg", "fourcols.jpg", "negsize.jpg", "faroutside.jpg"}
    assert "truncated" in excluded["truncated.jpg"].lower()
    assert "zero-byte" in excluded["zero.jpg"]
    assert "not a readable image" in excluded["text.jpg"]
    assert "out of range" in excluded["classrange.jpg"]
    assert "NaN" in excluded["nan.jpg"]
    assert "comma" in excluded["commas.jpg"]
    assert "4 columns" in excluded["fourcols.jpg"]
    assert "<= 0" in excluded["negsize.jpg"]
    assert "outside" in excluded["faroutside.jpg"]
    assert set(fixed) == {"duplicates.jpg", "clipped.jpg"}
    assert "duplicate" in fixed["duplicates.jpg"] and "clipped" in fixed["clipped.jpg"]
    by_name = {s.image.name: s for s in result.samples}
    assert len(by_name["duplicates.jpg"].labels) == 2
    good_hw = by_name["img000.jpg"].hw
    assert by_name["rotated.jpg"].hw == good_hw[::-1] and good_hw[0] != good_hw[1]
    assert len(by_name["nolabel.jpg"].labels) == 0
    assert {"cmyk.jpg", "gray16.png", "rgba.png", "rotated.jpg"} <= set(by_name)
    assert result.found == 6 + 3 + 4 + 8 + 1 + 0 and len(result.samples) == result.found - 9
    assert result.background == 1
    line = result.summary()
    assert f"{result.found} images found" in line and "9 excluded" in line and "2 fixed" in line
    report = (tmp_path / "report.txt").read_text()
    for name in list(excluded) + list(fixed):
        assert name in report

    again = scan_dataset(tmp_path / "images", "train")
    assert again.cached == again.found and again.summary().split(" (")[0] == line.split(" (")[0]
    (tmp_path / "labels" / "nolabel.txt").write_text("0 0.5 0.5 0.5 0.5\n")
    third = scan_dataset(tmp_path / "images", "train")
    assert third.cached == third.found - 1 and third.background == 0


def test_loader_survives_files_breaking_after_scan(tmp_path, isolated_cache):
    _write_corpus(tmp_path)
    result = scan_dataset(tmp_path / "images", "train")
    broken = [s.image for s in result.samples[:3]]
    for path in broken:
        path.write_bytes(b"")  # breaks after the scan
    loader = build_loader(result.samples, img_size=64, batch_size=4, augment=AugmentParams.from_net(),
                          workers=0, shuffle=True, seed=1)
    sizes = [len(metas) for _, _, metas in loader]
    full, rest = divmod(len(result.samples), 4)
    assert sizes == [4] * full + ([rest] if rest else [])
    assert loader.replaced_count == 3
    assert {p for p, _ in loader.replaced} == {str(p) for p in broken}
    assert "zero-byte" in loader.replaced[0][1] or "unreadable" in loader.replaced[0][1]
    assert loader.replaced_summary() is not None


def test_scan_cache_is_plain_arrays_and_a_planted_pickle_runs_nothing(tmp_path, isolated_cache):
    import io
    import zipfile

    from faults.hostile import Planted, planted_pickle
    from turboyolo.data.scan import _cache_file

    make_dataset(tmp_path, count=3)
    (tmp_path / "labels" / "img002.txt").unlink()  # a background image: no label file
    data = tmp_path / "images"
    first = scan_dataset(data, "train")
    cache = _cache_file(data, "train")
    with np.load(cache, allow_pickle=False) as stored:  # plain arrays, no object one
        assert int(stored["box_offsets"][-1]) == len(stored["boxes"]) == first.num_boxes
        assert stored["stats"].shape == (3, 4) and stored["stats"][2, 2] == -1
    again = scan_dataset(data, "train")
    assert again.cached == 3 and again.summary() == first.summary() + " (3 from cache)"
    for a, b in zip(first.samples, again.samples, strict=True):
        assert a.image == b.image and a.hw == b.hw and np.array_equal(a.labels, b.labels)
        assert a.labels.dtype == b.labels.dtype == np.float32 and b.labels.shape[1:] == (5,)

    marker = tmp_path / "marker"
    planted_pickle(cache, marker)  # a pickle where the arrays were
    planted_pickle(cache.with_suffix(".pkl"), marker)  # and where the old pickle cache lived
    planted_pickle(cache.with_suffix(".json"), marker)  # and the JSON cache (SCAN_VERSION 2-4)
    third = scan_dataset(data, "train")
    assert not marker.exists() and third.cached == 0 and len(third.samples) == 3

    buffer = io.BytesIO()  # an .npz whose member is an object array: a pickle inside a .npy
    np.save(buffer, np.array([Planted(marker)], dtype=object), allow_pickle=True)
    scan_dataset(data, "train")
    with zipfile.ZipFile(cache) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    members["boxes.npy"] = buffer.getvalue()
    with zipfile.ZipFile(cache, "w") as archive:
        for name, raw in members.items():
            archive.writestr(name, raw)
    assert scan_dataset(data, "train").cached == 0 and not marker.exists()

    good = cache.read_bytes()
    cache.write_bytes(good[: len(good) // 2])  # truncated
    assert scan_dataset(data, "train").cached == 0
    with np.load(cache, allow_pickle=False) as stored:
        arrays = {name: stored[name] for name in stored.files}
    arrays["box_offsets"] = arrays["box_offsets"][::-1].copy()  # columns that disagree
    np.savez(cache.with_name("x.npz"), **arrays)
    cache.with_name("x.npz").replace(cache)
    assert scan_dataset(data, "train").cached == 0  # not trusted: checked again


def test_a_cache_with_a_wrong_field_is_checked_again(tmp_path, isolated_cache):
    import json

    from turboyolo.data.scan import _cache_file

    make_dataset(tmp_path, count=3)
    data = tmp_path / "images"
    scan_dataset(data, "train")
    cache = _cache_file(data, "train")
    with np.load(cache, allow_pickle=False) as stored:
        arrays = {name: stored[name] for name in stored.files}
    fields = json.loads(arrays["fields"].tobytes())
    fields["status"][1] = "maybe"
    arrays["fields"] = np.frombuffer(json.dumps(fields).encode(), np.uint8)
    np.savez(cache.with_name("x.npz"), **arrays)
    cache.with_name("x.npz").replace(cache)
    assert scan_dataset(data, "train").cached == 0  # a file not as the scan writes it: not trusted
    assert scan_dataset(data, "train").cached == 3  # rewritten by that scan


def test_write_scan_report_and_console_text(tmp_path, isolated_cache):
    import os

    from faults.hostile import DECODE_STAGE, LATIN1_NAME, write_hostile_images
    from turboyolo.data.scan import REPORT_NAME, write_scan_report

    make_dataset(tmp_path, count=2)
    expected = write_hostile_images(tmp_path / "images")
    (tmp_path / "images" / os.fsdecode(LATIN1_NAME)).write_bytes(b"")  # a bad file with a Latin-1 name
    train = scan_dataset(tmp_path / "images", "train")
    val = scan_dataset(tmp_path / "images", "val")
    assert len(train.excluded) == len(expected) - len(DECODE_STAGE) + 1
    # damage under an intact structure passes the scan; the first decode (an epoch here) refuses it
    assert DECODE_STAGE <= {s.image.name for s in train.samples}
    loader = build_loader(train.samples, img_size=64, batch_size=2, augment=AugmentParams.from_net(),
                          workers=0, shuffle=True, seed=1)
    drawn = {meta.path.name for _, _, metas in loader for meta in metas}
    assert drawn and not drawn & DECODE_STAGE
    gone = [("/data/gone.jpg", "removed")] * 2  # one file, listed once
    path = write_scan_report(tmp_path / "run", [train, val], load_failures=[*loader.replaced, *gone])
    assert path == tmp_path / "run" / REPORT_NAME
    report = path.read_text(encoding="utf-8")
    for name, words in expected.items():
        line = next(line for line in report.splitlines() if name in line)
        assert any(word in line for word in words), line
        assert line.count(name) == 1, line  # one path per line, never "P: P: reason"
    assert "caf\\xe9.jpg: zero-byte" in report  # named, with the odd byte escaped
    assert report.count("scan train:") == 1 and report.count("scan val:") == 1
    assert f"failed to load after the scan ({len(DECODE_STAGE) + 1}):" in report
    assert "/data/gone.jpg: removed" in report
    console = train.console_text(limit=3, report=path)
    lines = console.splitlines()
    assert lines[0] == train.summary() and len(lines) == 5 and str(path) in lines[-1]
    assert f"and {len(train.excluded) + len(train.fixed) + len(train.warnings) - 3} more, see" in lines[-1]
    console.encode("utf-8")  # printable whatever the file names hold


def test_list_file_with_latin1_name_keeps_the_image(tmp_path, isolated_cache):
    import os

    from faults.hostile import LATIN1_NAME, good_jpeg

    make_dataset(tmp_path, count=2)
    good_jpeg(tmp_path / "images" / os.fsdecode(LATIN1_NAME))
    (tmp_path / "train.txt").write_bytes(b"images/img000.jpg\nimages/" + LATIN1_NAME + b"\n")
    (tmp_path / "d.data").write_text("train = train.txt\nvalid = train.txt\nnames = k.names\n")
    result = scan_dataset(tmp_path / "d.data", "train")
    assert not result.excluded and len(result.samples) == 2
    assert result.samples[1].image.name == os.fsdecode(LATIN1_NAME)
    result.report_text().encode("utf-8")


def test_a_long_list_is_checked_in_processes_with_the_same_result(tmp_path, isolated_cache, monkeypatch):
    """The checks hold the GIL: a long list goes to a process per CPU (here any list of 4 or more); every
    entry is the one threads in this process give, in the list's order."""
    import turboyolo.data.scan as scan
    from faults.hostile import write_hostile_images

    make_dataset(tmp_path, count=12)
    write_hostile_images(tmp_path / "images")
    threads = scan_dataset(tmp_path / "images", "train", use_cache=False)
    real = scan._check_one

    def check_and_say_where(image, num_classes):
        entry = real(image, num_classes)
        entry.pid = os.getpid()  # travels back with the entry
        return entry

    monkeypatch.setattr(scan, "usable_cpus", lambda: 2)
    monkeypatch.setattr(scan, "PROCESS_MIN", 4)
    monkeypatch.setattr(scan, "_check_one", check_and_say_where)  # the forked processes inherit it
    images = sorted((tmp_path / "images").iterdir())
    pids = {entry.pid for entry in scan._check_all(images, None, None)}
    assert os.getpid() not in pids and len(pids) >= 1
    processes = scan_dataset(tmp_path / "images", "train", use_cache=False)
    assert processes.excluded == threads.excluded and processes.warnings == threads.warnings
    for a, b in zip(threads.samples, processes.samples, strict=True):
        assert a.image == b.image and a.hw == b.hw and np.array_equal(a.labels, b.labels)
    monkeypatch.setattr(scan, "PROCESS_MIN", 10**9)
    assert {entry.pid for entry in scan._check_all(images, None, None)} == {os.getpid()}


def test_the_scan_leaves_the_garbage_collector_as_it_found_it(tmp_path, isolated_cache):
    import gc

    from turboyolo.data.scan import collector_paused

    make_dataset(tmp_path, count=3)
    for enabled in (True, False):
        (gc.enable if enabled else gc.disable)()
        try:
            scan_dataset(tmp_path / "images", "train")  # cold, then from the cache
            assert gc.isenabled() is enabled
            try:
                with collector_paused():
                    assert not gc.isenabled()
                    raise KeyError("x")
            except KeyError:
                pass
            assert gc.isenabled() is enabled
        finally:
            gc.enable()


def test_the_label_rules_worked_out_per_folder_are_the_per_image_ones(tmp_path, monkeypatch):
    """The scan's LabelRules: the label file and the other tools' disagreement warning of each image, as
    label_path_for and label_path_disagreement give them (layouts of all three rules, "images" in a file
    name, a nested images folder, relative paths)."""
    from pathlib import Path

    from turboyolo.formats.datasets import LabelRules, label_path_disagreement, label_path_for

    images = ["images/train/a.jpg", "images/train/b.c.jpeg", "images/train/.hidden", "images/train/noext",
              "train_images/x.jpg", "flat/y.png", "myimages/z.jpg", "d/imagesfoo.jpg",
              "images/sub/images/q.jpg", "a.images.b/images/w.jpg"]
    labels = ["labels/train/a.txt", "train_labels/x.txt", "mylabels/z.txt", "flat/y.txt",
              "labels/sub/images/q.txt", "images/sub/labels/q.txt", "a.labels.b/images/w.txt",
              "d/labelsfoo.txt"]
    for name in images + labels:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    rules = LabelRules()
    warned = 0
    for image in [tmp_path / name for name in images] + [Path(name) for name in images]:
        chosen = label_path_for(image)
        expected = (chosen, label_path_disagreement(image, chosen))
        assert rules(image) == expected, image
        warned += expected[1] is not None
    assert warned >= 4

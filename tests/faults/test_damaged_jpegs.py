"""Damaged JPEGs in variety (baseline and progressive, from Pillow and from ``jpegtran -scans``; truncated,
garbage in a scan, broken Huffman, quantisation, frame and scan headers, invalid progressive parameters,
bogus marker lengths, dropped and swapped scans) against the rule: no file that the strict whole decode
refuses is ever trained on, and each is named.

The scan checks headers and structure up to the first scan and the end-of-image marker (it refuses what
libjpeg would refuse before decoding, and never a file the decoder reads); the first decode of a run walks
the rest of the structure (a progressive file's later scans), decodes everything and refuses the rest, in
the same words; the 1/8 shortcut only after that; ``detect`` and ``detect --fast-decode`` agree on every
file."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from faults.hostile import damaged_jpegs, good_jpeg
from turboyolo.data.decode import decode_image, probe_image
from turboyolo.errors import DataError


def _refusal(check) -> str | None:
    try:
        check()
    except DataError as err:
        return str(err)
    return None


def _set_with_labels(folder: Path, damaged: dict[str, Path], good: int = 6) -> set[str]:
    """``folder/images`` + ``labels``: the damaged files and ``good`` good JPEGs, one box each; returns
    the names whose strict whole decode refuses them."""
    from turboyolo.formats.labels import write_yolo_labels

    (folder / "labels").mkdir(parents=True, exist_ok=True)
    images = folder / "images"
    images.mkdir(parents=True, exist_ok=True)
    for path in damaged.values():
        path.rename(images / path.name)
    for i in range(good):
        good_jpeg(images / f"good{i}.jpg", 96, 136, seed=i)
    for path in images.glob("*.jpg"):
        write_yolo_labels(folder / "labels" / f"{path.stem}.txt", np.array([[0, 0.5, 0.5, 0.3, 0.3]]))
    return {p.name for p in images.glob("*.jpg") if _refusal(lambda p=p: decode_image(p))}


def _bytes_left_out(message: str | None) -> str | None:
    return None if message is None else re.sub(r"at byte \d+", "at byte N", message)


@pytest.mark.slow
def test_the_scan_and_every_decode_agree_with_the_strict_whole_decode(tmp_path):
    files = damaged_jpegs(tmp_path)
    at_scan = at_decode = 0
    reasons, later = [], []
    for name, path in files.items():
        whole = _refusal(lambda path=path: decode_image(path))
        probed = _refusal(lambda path=path: probe_image(path))
        if probed:  # the header check refuses only what the decoder refuses, with the same words (a
            # truncated progressive file: the scan names where its first scan starts, the decode where
            # its last one does)
            assert _bytes_left_out(whole) == _bytes_left_out(probed), name
            at_scan += 1
            reasons.append(probed)
        elif whole:
            at_decode += 1
            later.append(whole)
        for target in (68, 34, 17):  # 1/2, 1/4 and 1/8 scale: the same verdict as the whole file
            assert (_refusal(lambda path=path, t=target: decode_image(path, t)) is None) == (whole is None), \
                (name, target)
        if whole is None:  # once verified whole, the 1/8 shortcut gives the same pixels
            assert np.array_equal(decode_image(path, 17, verified=True)[0], decode_image(path, 17)[0]), name
    assert at_scan > 200 and at_decode > 200, (at_scan, at_decode)  # 248 and 300 with seed 0
    found = "\n".join(reasons)
    for words in ("invalid progressive parameters", "bogus marker length of the scan header",
                  "bogus Huffman table definition", "inconsistent progression sequence",
                  "quantisation table 3 used by the scan", "invalid scan parameters for a sequential JPEG",
                  "sampling factors", "truncated JPEG"):
        assert words in found, words
    # the structure after a progressive file's first scan (its later scans' headers and tables, stray
    # markers in their data) is the first decode's, which walks it before it decodes, in the same words
    found = "\n".join(later)
    for words in ("Huffman table AC 3 used by the scan", "invalid progressive parameters",
                  "inconsistent progression sequence", "bogus Huffman table definition",
                  "restart marker out of sequence", "Corrupt JPEG data"):
        assert words in found, words


@pytest.mark.slow
@pytest.mark.parametrize("augment_on", ["cpu", "device"])
def test_a_refused_file_is_never_drawn_and_every_one_is_named(tmp_path, isolated_cache, augment_on):
    """Two worker processes, mosaics, two epochs: the files the scan passes but the first decode refuses
    are replaced wherever drawn (main sample or partner), the main process learns their verdicts, the
    second epoch's 1/8 decodes touch only verified files."""
    from turboyolo.data.augment import AugmentParams
    from turboyolo.data.loader import REFUSED, VERIFIED
    from turboyolo.data.pipeline import build_loader
    from turboyolo.data.scan import scan_dataset, write_scan_report

    damaged = damaged_jpegs(tmp_path / "made", sources=("progressive", "jpegtran0", "baseline"))
    # good files outnumber the damaged ones the scan passes (85: a progressive file's later scans are the
    # first decode's), so no slot draws MAX_REPLACEMENTS refused files in a row
    refused = _set_with_labels(tmp_path / "set", damaged, good=100)
    scan = scan_dataset(tmp_path / "set" / "images", "train", ["thing"])
    excluded = {Path(p).name for p, _ in scan.excluded}
    assert excluded <= refused and refused - excluded, "both stages must be tried"
    samples = scan.samples
    loader = build_loader(samples, img_size=32, batch_size=4, augment=AugmentParams.from_net(mosaic=1.0),
                          workers=2, shuffle=True, seed=3, augment_on=augment_on)
    drawn = set()
    for epoch in (0, 1):
        loader.set_epoch(epoch)
        for _, _, metas in loader:
            drawn |= {Path(path).name for path in metas.paths}
    decoded = {samples[i].image.name for i in loader.decoded}  # every image whose pixels were used
    assert drawn and decoded and not (drawn | decoded) & refused
    verdicts = loader.dataset.verdicts.tolist()  # written by the workers, read here
    named = {verdict: {s.image.name for s, v in zip(samples, verdicts, strict=True) if v == verdict}
             for verdict in (REFUSED, VERIFIED)}
    assert named[REFUSED] == refused - excluded and named[VERIFIED] == decoded
    report = write_scan_report(tmp_path / "run", [scan], loader.replaced).read_text(encoding="utf-8")
    for name in refused:  # each refused file named once, with one path on its line
        lines = [line for line in report.splitlines() if name in line]
        assert len(lines) == 1 and lines[0].count(name) == 1, (name, lines)


@pytest.mark.slow
@pytest.mark.parametrize("cache", ["none", "ram"])
def test_train_names_every_refused_file_and_trains_on_none(tmp_path, isolated_cache, cache):
    """``turboyolo train`` over a set with damaged files: the console and scan_report.txt name each file
    the strict decode refuses, at the scan or at the first decode (the prepared cache's build with
    ``--cache ram``), with one path per message."""
    from synth import micro_cfg
    from turboyolo.cli import main

    damaged = damaged_jpegs(tmp_path / "made", sources=("progressive",))
    picked = {name: path for name, path in damaged.items()
              if re.search(r"-(sos-tables|sos-al|dht-length|truncated70|garbage|noff|zeros)-?", name)}
    refused = _set_with_labels(tmp_path / "set", picked, good=8)
    (tmp_path / "set" / "t.names").write_text("thing\n")
    data = tmp_path / "set" / "images"
    cfg = micro_cfg(tmp_path / "micro.cfg", batch=4)
    code = main(["train", "--cfg", str(cfg), "--data", str(data), "--workers", "2", "--epochs", "1",
                 "--project", str(tmp_path / "runs"), "--evaluation-interval", "0", "--checkpoint-interval",
                 "0", "--cache", cache])
    assert code == 0
    report = (tmp_path / "runs" / "exp" / "scan_report.txt").read_text(encoding="utf-8")
    train_part = report.split("scan val:")[0] + report.split("failed to load after the scan")[1]
    for name in refused:
        lines = [line for line in train_part.splitlines() if name in line]
        assert lines and all(line.count(name) == 1 for line in lines), (name, lines)
    assert not re.search(r"(\S+\.jpg): \1", report)  # never "P: P: reason"


@pytest.mark.slow
def test_detect_and_fast_decode_agree_on_every_file(tmp_path, cli, tiny_model):
    """Large enough for a 1/8 decode at the model's 64 px: ``--fast-decode`` never returns pixels for a
    file the whole decode refuses (its damaged AC scans are decoded too), and refuses nothing more."""
    cfg, weights, names, _ = tiny_model
    made = damaged_jpegs(tmp_path / "made", size=(392, 544), sources=("progressive", "jpegtran0"))
    (tmp_path / "set").mkdir()
    damaged = {name: path.rename(tmp_path / "set" / name) for name, path in made.items()
               if re.search(r"-(garbage|noff|zeros|dropped|sos|dht)", name)}
    assert len(damaged) > 40
    outcomes = {}
    for mode in ("plain", "fast"):  # a high threshold: no box to draw, the decodes are what is tried
        run = cli("detect", tmp_path / "set", "--cfg", cfg, "--weights", weights, "--names", names,
                  "--project", tmp_path / "runs", "--name", mode, "--conf-thres", "0.999",
                  *(["--fast-decode"] if mode == "fast" else []))
        run.assert_clean(0)
        skipped = (tmp_path / "runs" / mode / "skipped.txt").read_text(encoding="utf-8")
        outcomes[mode] = {name for name in damaged if name in skipped}
    assert outcomes["plain"] == outcomes["fast"]
    refused = {name for name, path in damaged.items() if _refusal(lambda path=path: decode_image(path))}
    assert outcomes["plain"] == refused and 0 < len(refused) < len(damaged)

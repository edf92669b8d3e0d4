"""Text files from Windows editors: a UTF-8 byte-order mark (Notepad's "UTF-8 with BOM") or UTF-16
("Unicode") in label files, names, list files, ``.data`` files and cfgs is read as the text it encodes.

Before, the mark stayed at the start of the first line: the image of such a label file was excluded
("line 1: not a number"), the first class was named '\\ufeffapple', the first image of a list file was
"not found", and the ``.data`` file's first key and the cfg's ``[net]`` were not recognised."""

from __future__ import annotations

import numpy as np

from faults.hostile import make_split


def _write(path, text: str, encoding: str = "utf-8-sig") -> None:
    path.write_bytes(text.encode(encoding))  # utf-8-sig and utf-16 write their byte-order mark


def _windows_set(root):
    images = make_split(root, count=4)
    _write(root / "labels" / "img0.txt", "0 0.5 0.5 0.2 0.3\r\n")
    _write(root / "labels" / "img1.txt", "1 0.5 0.5 0.3 0.3\r\n", "utf-16")
    _write(root / "m.names", "apple\r\nbanana\r\n")
    _write(root / "train.txt", "".join(f"{p}\r\n" for p in images))
    _write(root / "m.data", f"classes = 2\ntrain = {root / 'train.txt'}\nvalid = {root / 'train.txt'}\n"
                            f"names = {root / 'm.names'}\n")
    return root / "m.data"


def test_byte_order_marks_are_read_as_text(tmp_path):
    from synth import read_labels
    from turboyolo.data.scan import scan_dataset
    from turboyolo.formats.datasets import list_images, load_data_config

    data = _windows_set(tmp_path / "set")
    config = load_data_config(data)
    assert config.names == ["apple", "banana"]
    assert [p.name for p in list_images(config.train[0])] == [f"img{i}.jpg" for i in range(4)]
    assert np.allclose(read_labels(tmp_path / "set" / "labels" / "img1.txt"), [[1, 0.5, 0.5, 0.3, 0.3]])
    scan = scan_dataset(data, "train")
    assert (len(scan.excluded), len(scan.fixed), len(scan.samples)) == (0, 0, 4)


def test_train_takes_a_data_set_and_cfg_written_with_byte_order_marks(tmp_path, cli):
    from synth import micro_cfg

    data = _windows_set(tmp_path / "set")
    cfg = micro_cfg(tmp_path / "m.cfg", batch=2, num_classes=2)
    _write(cfg, cfg.read_text().replace("\n", "\r\n"))
    run = cli("train", "--cfg", cfg, "--data", data, "--workers", 0, "--project", tmp_path / "runs",
              "--max-batches", 1, "--evaluation-interval", 0)
    run.assert_clean(0)
    assert "4 images found, 4 labelled (4 boxes), 0 background, 0 excluded" in run.output, run.output

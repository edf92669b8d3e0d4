"""The data commands end to end on tiny data: convert, prepare, bench data."""

import json

from synth import make_image_folder as make_dataset
from turboyolo.cli import FlagParser
from turboyolo.commands import bench, convert, prepare


def _run(module, argv):
    parser = FlagParser()
    module.add_arguments(parser)
    return module.run(parser.parse_args(argv))


def test_convert_coco_command(tmp_path, capsys):
    doc = {"images": [{"id": 1, "file_name": "a.jpg", "width": 10, "height": 10}],
           "categories": [{"id": 1, "name": "x"}],
           "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [0, 0, 5, 5]}]}
    (tmp_path / "c.json").write_text(json.dumps(doc))
    assert _run(convert, [str(tmp_path / "c.json"), "--out", str(tmp_path / "o")]) == 0
    assert (tmp_path / "o" / "a.txt").read_text().startswith("0 0.25")
    assert "1 label files" in capsys.readouterr().out


def test_prepare_and_bench(tmp_path, isolated_cache, capsys):
    make_dataset(tmp_path, count=8)
    assert _run(prepare, ["--data", str(tmp_path / "images"), "--img_size", "64", "--split", "train",
                          "--out", str(tmp_path / "prep")]) == 0
    assert (tmp_path / "prep" / "train" / "index.json").is_file()
    # 8 images, batch 4: the warm-up batch + 12 measured images = 2 whole epochs per row
    assert _run(bench, ["data", "--data", str(tmp_path / "images"), "--img-size", "64", "--images", "12",
                        "--batch-size", "4", "--cache-dir", str(tmp_path / "prep" / "train")]) == 0
    out = capsys.readouterr().out
    rows = [line.strip() for line in out.splitlines() if "img/s per core" in line]
    # train's default first (mosaic on, original files), then the faster settings, each named
    assert rows[0].startswith("cold: train's default: --cache none, --augment-on cpu, mosaic 1")
    for row in ("cold: --cache none, mosaic 0", "warm: --cache ram|disk (prepared cache), mosaic 1",
                "warm: --cache ram|disk, mosaic 0", "warm: --cache ram|disk --augment-on device"):
        assert any(line.startswith(row) for line in rows), row
    decodes = {line.split(":")[0] + line.split(":")[1][:20]: float(line.split()[-4]) for line in rows}
    assert all(d == 1.0 for name, d in decodes.items() if name.startswith("cold"))  # once per epoch
    assert all(d == 0 for name, d in decodes.items() if name.startswith("warm"))
    assert "hand-off" in out
    assert "valid" in out  # the prepared cache was reused

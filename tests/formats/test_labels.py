"""YOLO label parsing rules and the VOC / COCO importers."""

import json

import numpy as np
import pytest

from synth import read_labels
from turboyolo.errors import DataError
from turboyolo.formats.convert import convert_coco, convert_labels, convert_voc
from turboyolo.formats.labels import parse_yolo_labels, write_yolo_labels


def test_roundtrip(tmp_path):
    rows = np.array([[0, 0.5, 0.5, 0.2, 0.3], [3, 0.1, 0.2, 0.05, 0.1]], np.float32)
    write_yolo_labels(tmp_path / "a" / "x.txt", rows)
    np.testing.assert_allclose(read_labels(tmp_path / "a" / "x.txt"), rows, atol=1e-6)
    write_yolo_labels(tmp_path / "c.txt", np.hstack([rows, [[0.9], [0.25]]]), with_conf=True)
    assert (tmp_path / "c.txt").read_text().splitlines()[1].endswith(" 0.250000")


def test_empty_lines_are_background():
    check = parse_yolo_labels("\n\n")
    assert check.error is None and check.rows.shape == (0, 5)


@pytest.mark.parametrize("text, fragment", [
    ("0 0.5 0.5 0.1", "4 columns"),
    ("0 0.5 0.5 0.1 0.1 0.3", "6 columns"),
    ("0,0.5,0.5,0.1,0.1", "comma"),
    ("0 nan 0.5 0.1 0.1", "NaN"),
    ("0 0.5 inf 0.1 0.1", "NaN or inf"),
    ("5 0.5 0.5 0.1 0.1", "out of range"),
    ("-1 0.5 0.5 0.1 0.1", "out of range"),
    ("1.5 0.5 0.5 0.1 0.1", "out of range"),
    ("0 0.5 0.5 -0.1 0.1", "<= 0"),
    ("0 0.5 0.5 0.1 0", "<= 0"),
    ("0 0.99 0.5 0.1 0.1", "outside"),
    ("0 abc 0.5 0.1 0.1", "not a number"),
])
def test_excluding_rules(text, fragment):
    check = parse_yolo_labels(text, num_classes=3)
    assert check.error is not None and fragment in check.error
    assert check.rows.shape == (0, 5)


def test_clip_and_duplicates_are_fixed():
    check = parse_yolo_labels("0 0.5 0.5 0.2 0.2\n0 0.5 0.5 0.2 0.2\n1 0.004 0.5 0.02 0.2\n", num_classes=2)
    assert check.error is None
    assert len(check.rows) == 2
    assert any("duplicate" in f for f in check.fixes)
    assert any("clipped" in f for f in check.fixes)
    x1 = check.rows[1, 1] - check.rows[1, 3] / 2
    assert x1 == pytest.approx(0.0, abs=1e-6)


VOC_XML = """<annotation><filename>img1.jpg</filename><size><width>200</width><height>100</height></size>
    <object><name>Dead</name><bndbox><xmin>10</xmin><ymin>20</ymin><xmax>50</xmax><ymax>60</ymax></bndbox></object>
    <object><name>car</name><bndbox><xmin>0</xmin><ymin>0</ymin><xmax>300</xmax><ymax>100</ymax></bndbox></object>
    </annotation>"""


def test_convert_voc(tmp_path):
    (tmp_path / "a.xml").write_text(VOC_XML)
    report = convert_voc([tmp_path / "a.xml"], tmp_path / "out", names=["tree"], mapping={"Dead": "tree"})
    rows = read_labels(tmp_path / "out" / "img1.txt")
    np.testing.assert_allclose(rows, [[0, 0.15, 0.4, 0.2, 0.4]], atol=1e-6)
    assert report.skipped and "car" in report.skipped[0][0]
    assert (tmp_path / "out" / "classes.names").read_text() == "tree\n"


def test_convert_labels_picks_the_importer(tmp_path):
    (tmp_path / "voc").mkdir()
    (tmp_path / "voc" / "a.xml").write_text(VOC_XML)
    (tmp_path / "tree.names").write_text("tree\n")
    report = convert_labels(tmp_path / "voc", tmp_path / "out", names_file=tmp_path / "tree.names",
                            mapping={"Dead": "tree"})
    assert report.written == 1 and report.names == ["tree"] and len(report.skipped) == 1
    with pytest.raises(DataError, match="not found"):
        convert_labels(tmp_path / "missing", tmp_path / "out")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no .xml files"):
        convert_labels(tmp_path / "empty", tmp_path / "out")
    with pytest.raises(DataError, match="not a COCO"):
        convert_labels(tmp_path / "voc" / "a.xml", tmp_path / "out", format="coco")


def test_convert_coco(tmp_path):
    doc = {
        "images": [{"id": 1, "file_name": "x/a.jpg", "width": 100, "height": 50},
                   {"id": 2, "file_name": "b.png", "width": 10, "height": 10}],
        "categories": [{"id": 7, "name": "dog"}, {"id": 3, "name": "cat"}],
        "annotations": [{"id": 1, "image_id": 1, "category_id": 7, "bbox": [10, 5, 20, 10]},
                        {"id": 2, "image_id": 1, "category_id": 3, "bbox": [0, 0, 0, 10]},
                        {"id": 3, "image_id": 1, "category_id": 3, "bbox": [0, 0, 5, 5], "iscrowd": 1}],
    }
    (tmp_path / "c.json").write_text(json.dumps(doc))
    report = convert_coco(tmp_path / "c.json", tmp_path / "out")
    assert report.names == ["cat", "dog"]
    rows = read_labels(tmp_path / "out" / "x" / "a.txt")  # the image's relative path is kept
    np.testing.assert_allclose(rows, [[1, 0.2, 0.2, 0.2, 0.2]], atol=1e-6)
    assert (tmp_path / "out" / "b.txt").read_text() == ""
    assert len(report.skipped) == 2
    (tmp_path / "bom.json").write_bytes(json.dumps(doc).encode("utf-8-sig"))  # as Windows tools save it
    assert convert_coco(tmp_path / "bom.json", tmp_path / "out2").names == ["cat", "dog"]


def test_every_bad_line_is_named_with_its_reason():
    text = ("0 0.5 0.5 0.2 0.2\n7 0.5 0.5 0.1 0.1\n\n0 nan 0.5 0.1 0.1\n0 0.5 0.5 0 0.1\n0 1.5 0.5 0.1 0.1\n"
            "0 0.5 x 0.1 0.1\n0 0.5 0.5 1.004 0.2\n")
    check = parse_yolo_labels(text, num_classes=2)
    assert check.bad_lines == 5 and check.rows.shape == (0, 5)
    for fragment in ("5 bad lines", "line 2: class id 7 out of range (names has 2)",
                     "line 4: NaN or inf", "line 5: width/height <= 0", "line 6: box extends 0.550 outside",
                     "line 7: not a number"):
        assert fragment in check.error, fragment
    assert "line 1" not in check.error and "line 8" not in check.error  # good, and clippable
    fixed = parse_yolo_labels("0 0.5 0.5 0.2 0.2\n0 0.5 0.5 1.004 0.2\n0 0.5 0.5 0.2 0.2\n", num_classes=2)
    assert fixed.fixes == ["line 2: box clipped to the image (up to 0.0020 outside)",
                           "line 3: duplicate box removed"]


def test_a_box_far_outside_is_named_in_a_short_number():
    check = parse_yolo_labels("0 0.5 0.5 1e308 0.3\n0 0.5 0.5 4001 0.3\n")
    assert "line 1: box extends 5e+307 outside" in check.error
    assert "line 2: box extends 2e+03 outside" in check.error and len(check.error) < 200


def _line_by_line(text, num_classes, monkeypatch):
    """parse_yolo_labels without its shortcut for plain, clean files."""
    from turboyolo.formats import labels

    with monkeypatch.context() as patched:
        patched.setattr(labels, "_clean_rows", lambda *_: None)
        return labels.parse_yolo_labels(text, num_classes)


def test_a_clean_file_reads_as_the_line_by_line_check_reads_it(monkeypatch):
    """The shortcut for plain files without a fix or a bad line gives what the line-by-line check gives,
    on texts good and bad in every way the check knows (and any other text takes the check)."""
    import random

    from turboyolo.formats import labels

    rng = random.Random(0)
    odd = ["0.5", "1", "0", "1.000001", "-0.000001", "nan", "inf", "1e999", ".5", "1_0", "e", "0x1", "0.25"]
    shortcut = 0
    for _ in range(1500):
        lines = []
        for _ in range(rng.randint(0, 10)):
            if rng.random() < 0.6:
                values = [f"{rng.uniform(0.2, 0.8):.6f}" for _ in range(2)]
                values += [f"{rng.uniform(0.01, 0.39):.6f}" for _ in range(2)]
            else:
                values = [rng.choice(odd) for _ in range(4)]
            parts = [rng.choice(["0", "3", "79", "80", "1.0", "1.5", "-1", "2e0"]), *values]
            parts = parts[:4] if rng.random() < 0.05 else parts + ["0.1"] if rng.random() < 0.05 else parts
            line = rng.choice([" ", "\t", "  ", ","]).join(parts)
            lines.append("  " + line + " " if rng.random() < 0.1 else line)
            if rng.random() < 0.1:
                lines.append(rng.choice(["", "  ", "\t", lines[-1]]))  # blank, or the line again
        text = rng.choice(["\n", "\r\n", "\r"]).join(lines) + rng.choice(["\n", "", "\r\n", "\n\n"])
        for num_classes in (None, 80):
            fast, slow = parse_yolo_labels(text, num_classes), _line_by_line(text, num_classes, monkeypatch)
            shortcut += labels._clean_rows(text, num_classes) is not None
            assert (fast.error, fast.fixes, fast.bad_lines) == (slow.error, slow.fixes, slow.bad_lines), text
            assert fast.rows.dtype == slow.rows.dtype and np.array_equal(fast.rows, slow.rows), text
    assert 100 < shortcut < 2500  # both ways were taken

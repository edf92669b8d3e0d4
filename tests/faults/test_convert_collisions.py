"""``turboyolo convert`` cannot mix images (issue 31, round three): label files keyed by the image's
relative path, duplicate ids and name collisions refused with their names, boxes outside the image
clipped or dropped with a count, malformed entries named by index, no NaN written, existing files
replaced only with --overwrite, and the --names input never written over."""

from __future__ import annotations

import json
import math

VOC = """<annotation><filename>{name}</filename><size><width>200</width><height>100</height></size>{objects}
</annotation>"""
BOX = ("<object><name>{cls}</name><bndbox><xmin>{x1}</xmin><ymin>{y1}</ymin><xmax>{x2}</xmax>"
       "<ymax>{y2}</ymax></bndbox></object>")


def _coco(path, images, annotations, categories=({"id": 1, "name": "dog"},)):
    doc = {"images": images, "annotations": annotations, "categories": list(categories)}
    path.write_text(json.dumps(doc))
    return path


def _image(image_id, name, width=100, height=50):
    return {"id": image_id, "file_name": name, "width": width, "height": height}


def _ann(ann_id, image_id, bbox):
    return {"id": ann_id, "image_id": image_id, "category_id": 1, "bbox": bbox}


def _numbers(folder):
    values = []
    for path in folder.rglob("*.txt"):
        values += [float(v) for v in path.read_text().split()]
    return values


def test_two_images_of_one_name_in_two_folders_keep_apart(tmp_path, cli):
    doc = _coco(tmp_path / "c.json", [_image(1, "train/0001.jpg"), _image(2, "val/0001.jpg")],
                [_ann(1, 1, [10, 5, 20, 10]), _ann(2, 2, [50, 20, 10, 10])])
    run = cli("convert", doc, "--out", "labels")
    run.assert_clean(0)
    train, val = (tmp_path / "labels" / split / "0001.txt" for split in ("train", "val"))
    assert train.read_text().startswith("0 0.200000 0.200000") and val.read_text().startswith("0 0.550000")
    assert not (tmp_path / "labels" / "0001.txt").exists()


def test_duplicate_image_ids_and_shared_label_files_are_refused_with_their_names(tmp_path, cli):
    doc = _coco(tmp_path / "dup.json", [_image(7, "a.jpg"), _image(7, "b.jpg")], [_ann(1, 7, [1, 1, 5, 5])])
    run = cli("convert", doc, "--out", "out1")
    run.assert_clean(1)
    assert "images[0] (a.jpg) and images[1] (b.jpg) share the id 7" in run.output
    assert not (tmp_path / "out1").exists()  # nothing half-written
    doc = _coco(tmp_path / "same.json", [_image(1, "x/a.jpg"), _image(2, "x/a.png")], [])
    run = cli("convert", doc, "--out", "out2")
    run.assert_clean(1)
    assert "x/a.jpg (id 1) and x/a.png (id 2) would both be written to out2/x/a.txt" in run.output
    assert not (tmp_path / "out2").exists()
    voc = tmp_path / "voc"
    voc.mkdir()
    for xml in ("one.xml", "two.xml"):  # two annotation files naming one image
        (voc / xml).write_text(VOC.format(name="img.jpg", objects=""))
    run = cli("convert", voc, "--out", "out3")
    run.assert_clean(1)
    assert "one.xml and" in run.output and "two.xml would both be written to out3/img.txt" in run.output


def test_boxes_outside_are_clipped_or_dropped_with_a_count_and_malformed_entries_named(tmp_path, cli):
    images = [_image(1, "a.jpg"), _image(2, "b.jpg", width=0), {"id": 3, "width": 10, "height": 10},
              _image(4, "../c.jpg")]
    annotations = [_ann(1, 1, [90, 40, 20, 20]),  # partly outside: clipped
                   _ann(2, 1, [200, 5, 20, 10]),  # wholly outside: dropped
                   _ann(3, 1, [1, "NaN", 20, 10]), _ann(4, 1, [1, 2, 3]), _ann(5, 1, [1, float("inf"), 2, 2]),
                   _ann(6, 99, [1, 1, 2, 2]), "not an annotation"]
    doc = _coco(tmp_path / "c.json", images, annotations)
    run = cli("convert", doc, "--out", "out")
    run.assert_clean(0)
    assert "1 boxes clipped to their image, 1 wholly outside it dropped" in run.output
    for named in ("images[1]: width x height 0 x 50 is not a positive size", "images[2]: no file_name",
                  "annotations[2] (id 3): bbox value is 'NaN'", "annotations[3] (id 4): bbox [1, 2, 3]",
                  "annotations[4] (id 5): bbox value is inf", "annotations[5] (id 6): image_id 99",
                  "annotations[6]: not an object", "image 4 (../c.jpg)"):
        assert named in run.output, named
    assert (tmp_path / "out" / "a.txt").read_text() == "0 0.950000 0.900000 0.100000 0.200000\n"
    values = _numbers(tmp_path / "out")
    assert values and all(math.isfinite(v) and 0 <= v <= 1 for v in values)
    (tmp_path / "voc").mkdir()
    boxes = BOX.format(cls="tree", x1=150, y1=20, x2=300, y2=60) + BOX.format(cls="tree", x1=250, y1=0,
                                                                               x2=300, y2=50)
    (tmp_path / "voc" / "a.xml").write_text(VOC.format(name="a.jpg", objects=boxes))
    (tmp_path / "voc" / "b.xml").write_text(VOC.format(name="b.jpg", objects=BOX.format(
        cls="tree", x1="nan", y1=1, x2=5, y2=5)))
    run = cli("convert", tmp_path / "voc", "--out", "vout")
    run.assert_clean(0)
    assert "1 boxes clipped to their image, 1 wholly outside it dropped" in run.output
    assert "b.xml: object 0 <xmin> is 'nan', not a finite number" in run.output
    assert all(math.isfinite(v) for v in _numbers(tmp_path / "vout"))


def test_existing_label_files_are_replaced_only_with_overwrite(tmp_path, cli):
    labels = tmp_path / "labels"
    labels.mkdir()
    (labels / "a.txt").write_text("0 0.5 0.5 0.2 0.2\n")  # a human label file
    (labels / "classes.names").write_text("mine\n")
    doc = _coco(tmp_path / "c.json", [_image(1, "a.jpg")], [_ann(1, 1, [10, 5, 20, 10])])
    run = cli("convert", doc, "--out", labels)
    run.assert_clean(1)
    assert "2 file(s) this would write exist already" in run.output and "--overwrite" in run.output
    assert (labels / "a.txt").read_text() == "0 0.5 0.5 0.2 0.2\n"
    assert (labels / "classes.names").read_text() == "mine\n"
    (labels / "old.txt").write_text("0 0.5 0.5 0.1 0.1\n")  # from an earlier conversion
    run = cli("convert", doc, "--out", labels, "--overwrite")
    run.assert_clean(0)
    assert (labels / "classes.names").read_text() == "dog\n"
    assert "1 other .txt file(s)" in run.output and "old.txt" in run.output  # named, not mixed silently


def test_the_names_file_given_is_never_written_over(tmp_path, cli):
    (tmp_path / "voc").mkdir()
    (tmp_path / "voc" / "a.xml").write_text(VOC.format(name="a.jpg", objects=BOX.format(
        cls="tree", x1=1, y1=1, x2=9, y2=9)))
    out = tmp_path / "out"
    out.mkdir()
    (out / "classes.names").write_text("# my classes\ntree\n")
    run = cli("convert", tmp_path / "voc", "--out", out, "--names", out / "classes.names", "--overwrite")
    run.assert_clean(1)
    assert "is the same file as the input --names" in run.output
    assert (out / "classes.names").read_text() == "# my classes\ntree\n" and not (out / "a.txt").exists()

"""The ``trees`` sample data set, built from the ``deepforest==2.1.0`` wheel's annotated photos.

Sources (``deepforest/data/`` in the wheel, MIT licensed; NEON aerial imagery): four photos with
Pascal VOC boxes drawn by people, 951 in all. One file labels them Alive/Dead, the others Tree; all
become the single class ``tree``.

Tiling: a ``TILE`` x ``TILE`` grid from (0, 0) with stride ``TILE``; edge tiles are padded with black
(not shifted), so no two tiles overlap; strips narrower than ``MIN_STRIP`` px are skipped. Boxes are
clipped to their tile and kept when at least ``MIN_KEEP`` of their area is inside (so a crown cut by a
tile edge may count in both tiles).

Split by source area, so validation tiles never overlap training tiles: validation = the right-most
tile column of both YELL photos plus the whole SOAP_061 photo (another site); everything else trains.
Output is a pure function of the wheel: same bytes on every build.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from turboyolo import assets
from turboyolo.data.decode import save_image
from turboyolo.errors import AssetError, DataError
from turboyolo.formats.convert import read_voc_xml
from turboyolo.formats.datasets import write_darknet_data
from turboyolo.formats.labels import write_names, write_yolo_labels

TILE = 416
MIN_STRIP = 32
MIN_KEEP = 0.4
DATA_PREFIX = "deepforest/data/"
MARKER = ".turboyolo-trees-v1"


@dataclass(frozen=True)
class TreeSource:
    stem: str
    val_rule: str  # "all": whole photo is validation; "last_column": its right-most tile column; "none"


SOURCES = (
    TreeSource("OSBS_029", "none"),
    TreeSource("SOAP_061", "all"),
    TreeSource("2019_YELL_2_541000_4977000_image_crop", "last_column"),
    TreeSource("2019_YELL_2_528000_4978000_image_crop2", "last_column"),
)

README = """trees: a small tree-crown detection data set for turboyolo (built by `turboyolo fetch trees`).

Source: the annotated sample photos shipped in the deepforest 2.1.0 wheel (PyPI `deepforest`,
deepforest/data/: OSBS_029, SOAP_061, 2019_YELL_2_541000_4977000_image_crop,
2019_YELL_2_528000_4978000_image_crop2), MIT License, Weecology / DeepForest authors; imagery from the
National Ecological Observatory Network (NEON). Alive/Dead/Tree labels were merged into one class.
Tiled to {tile} px; validation = right-most tile column of both YELL photos + SOAP_061.
"""


def _tile_origins(length: int) -> list[int]:
    return [start for start in range(0, length, TILE) if length - start >= MIN_STRIP]


def _tile_boxes(boxes: np.ndarray, x0: int, y0: int) -> np.ndarray:
    """Pixel boxes [N, 4] -> YOLO rows for the tile at (x0, y0); drops boxes mostly outside."""
    if len(boxes) == 0:
        return np.zeros((0, 5), np.float32)
    x1 = np.clip(boxes[:, 0] - x0, 0, TILE)
    y1 = np.clip(boxes[:, 1] - y0, 0, TILE)
    x2 = np.clip(boxes[:, 2] - x0, 0, TILE)
    y2 = np.clip(boxes[:, 3] - y0, 0, TILE)
    area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    inside = (x2 - x1) * (y2 - y1)
    keep = (x2 > x1) & (y2 > y1) & (inside >= MIN_KEEP * area)
    rows = np.stack([np.zeros(len(boxes)), (x1 + x2) / 2 / TILE, (y1 + y2) / 2 / TILE,
                     (x2 - x1) / TILE, (y2 - y1) / TILE], axis=1)[keep]
    return rows.astype(np.float32)


def _build(archive: Path, out: Path) -> None:
    splits: dict[str, list[str]] = {"train": [], "val": []}
    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(archive) as zf:
        for source in SOURCES:
            try:
                xml_path = Path(zf.extract(DATA_PREFIX + source.stem + ".xml", tmp))
                image_bytes = zf.read(DATA_PREFIX + source.stem + ".png")
            except KeyError as err:
                raise AssetError(f"{archive}: missing {err}; the pinned deepforest wheel is damaged"
                                 ) from None
            annotation = read_voc_xml(xml_path)
            image = cv2.imdecode(np.frombuffer(image_bytes, np.uint8), cv2.IMREAD_COLOR)
            if image is None:
                raise AssetError(f"{archive}: {source.stem}.png does not decode")
            height, width = image.shape[:2]
            xs, ys = _tile_origins(width), _tile_origins(height)
            for row, y0 in enumerate(ys):
                for col, x0 in enumerate(xs):
                    split = "val" if source.val_rule == "all" or (
                        source.val_rule == "last_column" and col == len(xs) - 1) else "train"
                    tile = np.zeros((TILE, TILE, 3), np.uint8)
                    crop = image[y0:y0 + TILE, x0:x0 + TILE]
                    tile[:crop.shape[0], :crop.shape[1]] = crop
                    name = f"{source.stem}_r{row}_c{col}"
                    image_path = out / "images" / split / f"{name}.png"
                    image_path.parent.mkdir(parents=True, exist_ok=True)
                    try:
                        save_image(image_path, tile)  # not cv2.imwrite: --dest may be any bytes
                    except DataError as err:
                        raise AssetError(f"{err}; check free disk space") from None
                    write_yolo_labels(out / "labels" / split / f"{name}.txt",
                                      _tile_boxes(annotation.boxes, x0, y0))
                    splits[split].append(f"images/{split}/{name}.png")
    for split, list_name in (("train", "train.txt"), ("val", "valid.txt")):
        (out / list_name).write_text("".join(f"{p}\n" for p in sorted(splits[split])), encoding="utf-8")
    write_names(out / "trees.names", ["tree"])
    (out / "README.txt").write_text(README.format(tile=TILE), encoding="utf-8")


def _write_configs(out: Path) -> None:
    # Written after the final rename: they carry absolute paths (Darknet and PyTorch-YOLOv3 read list
    # entries relative to the working directory, so absolute paths work with every tool).
    write_darknet_data(out / "trees.data", 1, out / "train.txt", out / "valid.txt", out / "trees.names",
                       backup="backup/")
    (out / "data.yaml").write_text(
        f"path: {out}\ntrain: images/train\nval: images/val\nnames:\n  0: tree\n", encoding="utf-8")
    for list_name in ("train.txt", "valid.txt"):
        lines = (out / list_name).read_text(encoding="utf-8").splitlines()
        (out / list_name).write_text("".join(f"{out / line}\n" for line in lines), encoding="utf-8")


def build_trees(dest_dir: Path, archive: Path | None = None) -> Path:
    """Build the trees data set into ``dest_dir`` (reused when already complete) and return it.

    Args:
        dest_dir: the folder to create; it then holds ``trees.data``, ``data.yaml``, ``trees.names``,
            ``images/{train,val}``, ``labels/{train,val}``, ``train.txt``, ``valid.txt``, ``README.txt``.
        archive: the deepforest wheel; default: the pinned, verified one from
            ``assets.pypi_distribution(assets.DEEPFOREST_WHEEL)`` (downloaded on first use).

    Raises:
        AssetError: the wheel cannot be fetched, or ``dest_dir`` is a non-empty folder of something else.
    """
    dest_dir = Path(dest_dir).absolute()
    if (dest_dir / MARKER).is_file():
        return dest_dir
    if dest_dir.exists() and any(dest_dir.iterdir()):
        raise AssetError(f"{dest_dir} exists and is not a complete trees data set; remove it or pick "
                         "another folder")
    if archive is None:

        archive = assets.pypi_distribution(assets.DEEPFOREST_WHEEL)
    dest_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest_dir.name}.", dir=dest_dir.parent))
    try:
        _build(Path(archive), tmp)
        if dest_dir.exists():
            dest_dir.rmdir()
        os.replace(tmp, dest_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _write_configs(dest_dir)
    (dest_dir / MARKER).write_text("complete\n", encoding="utf-8")
    return dest_dir

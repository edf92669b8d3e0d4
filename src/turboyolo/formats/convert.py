"""Importers: Pascal VOC XML and COCO JSON labels -> YOLO ``.txt`` files plus a ``classes.names``.

Both plan every output before writing one, so nothing is written when the input cannot be converted
safely:

- each label file keeps its image's relative path (COCO ``file_name`` ``train/0001.jpg`` ->
  ``<out>/train/0001.txt``; VOC: the XML's folder below the source folder), so ``train/0001.jpg`` and
  ``val/0001.jpg`` never become one file; two images that would still share a label file, and (COCO)
  two images with one id, are refused with their names;
- a box partly outside its image is clipped to it, one wholly outside is dropped, both counted;
- a malformed entry (no file name, size, bbox; a number that is not finite) is named by its index and
  skipped; nothing that is not a finite number is ever written;
- existing label files (and ``classes.names``) are replaced only with ``overwrite``; an output that is
  an input (``--names``) is refused (:mod:`turboyolo.rundir`'s output rule).
"""

from __future__ import annotations

import json
import math
import os
import posixpath
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from turboyolo.errors import DataError, printable
from turboyolo.formats.datasets import read_names, walk_files
from turboyolo.formats.labels import write_names, write_yolo_labels
from turboyolo.formats.text import read_text
from turboyolo.rundir import check_outputs, existing_outputs

CONVERT_FORMATS = ("auto", "voc", "coco")
NAMES_FILE = "classes.names"


@dataclass
class ImportedImage:
    """One image's boxes from a foreign format, in pixels (x1, y1, x2, y2) with class names."""

    filename: str
    width: int
    height: int
    boxes: np.ndarray  # float64 [N, 4] x1 y1 x2 y2 pixels
    classes: list[str]


@dataclass
class ConvertReport:
    """What an import wrote and what it skipped (each with its reason)."""

    written: int = 0
    boxes: int = 0
    names: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    clipped: int = 0  # boxes partly outside their image, clipped to it
    outside: int = 0  # boxes wholly outside their image (nothing left after clipping), dropped
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        text = (
            f"{self.written} label files, {self.boxes} boxes, {len(self.names)} classes, "
            f"{len(self.skipped)} skipped"
        )
        if self.clipped or self.outside:
            text += f"; {self.clipped} boxes clipped to their image, {self.outside} wholly outside it dropped"
        return text


def clip_boxes(boxes: np.ndarray, width: float, height: float) -> tuple[np.ndarray, int, int]:
    """Pixel (x1, y1, x2, y2) boxes clipped to the image: (kept boxes, how many were clipped, how many
    were dropped because nothing of them is inside)."""
    b = np.asarray(boxes, np.float64).reshape(-1, 4)
    c = b.copy()
    c[:, [0, 2]] = np.clip(c[:, [0, 2]], 0, width)
    c[:, [1, 3]] = np.clip(c[:, [1, 3]], 0, height)
    inside = (c[:, 2] > c[:, 0]) & (c[:, 3] > c[:, 1])
    changed = np.any(np.abs(c - b) > 1e-9, axis=1) & inside
    return c[inside], int(changed.sum()), int((~inside).sum())


def boxes_to_yolo(boxes: np.ndarray, class_ids, width: int, height: int) -> np.ndarray:
    """Pixel (x1, y1, x2, y2) boxes inside the image -> float32 [N, 5] YOLO rows."""
    b = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    ids = np.asarray(list(class_ids), dtype=np.float64)
    out = np.stack(
        [
            ids,
            (b[:, 0] + b[:, 2]) / 2 / width,
            (b[:, 1] + b[:, 3]) / 2 / height,
            (b[:, 2] - b[:, 0]) / width,
            (b[:, 3] - b[:, 1]) / height,
        ],
        axis=1,
    )
    return out.astype(np.float32)


def _finite(value: object, what: str) -> float:
    """``value`` as a finite float, else ValueError naming ``what``."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"{what} {value!r} is not a number") from None
    if not math.isfinite(number):
        raise ValueError(f"{what} is {value!r}, not a finite number")
    return number


def read_voc_xml(path: str | Path) -> ImportedImage:
    """Parse one Pascal VOC annotation file.

    Raises:
        DataError: the XML is malformed, lacks ``size``, or an object's ``bndbox`` is missing or holds
            something other than finite numbers (named by the object's index, from 0).
    """
    path = Path(path)
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as err:
        raise DataError(f"{path}: not valid XML ({err}); fix or remove the file") from None
    filename = (root.findtext("filename") or path.with_suffix(".jpg").name).strip()
    boxes, classes = [], []
    try:
        width = int(_finite(root.findtext("size/width") or 0, "<size><width>"))
        height = int(_finite(root.findtext("size/height") or 0, "<size><height>"))
        for index, obj in enumerate(root.iter("object")):
            bnd = obj.find("bndbox")
            if bnd is None:
                raise ValueError(f"object {index} has no <bndbox>")
            box = [
                _finite(bnd.findtext(k), f"object {index} <{k}>") for k in ("xmin", "ymin", "xmax", "ymax")
            ]
            if box[2] < box[0] or box[3] < box[1]:
                raise ValueError(f"object {index}: xmax < xmin or ymax < ymin ({box})")
            boxes.append(box)
            classes.append((obj.findtext("name") or "").strip())
    except ValueError as err:
        raise DataError(f"{path}: {err}; fix the file") from None
    return ImportedImage(filename, width, height, np.asarray(boxes, dtype=np.float64).reshape(-1, 4), classes)


def _resolve_class(name: str, names: list[str], mapping: Mapping[str, str] | None, fixed: bool) -> int | None:
    name = mapping.get(name, name) if mapping else name
    if name not in names:
        if fixed:
            return None
        names.append(name)
    return names.index(name)


Plan = dict[Path, tuple[np.ndarray, str]]  # label file -> (rows, the input it came from)


def _add(plan: Plan, dest: Path, rows: np.ndarray, source: str) -> None:
    """One label file into the plan; two inputs that would share it are refused, naming both."""
    if dest in plan:
        raise DataError(
            f"{printable(plan[dest][1])} and {printable(source)} would both be written to "
            f"{printable(dest)}: the conversion would mix two images' labels; rename one image "
            "(or keep them in two folders)"
        )
    plan[dest] = (rows, source)


def convert_voc(
    xml_files: Sequence[str | Path],
    out_dir: str | Path,
    names: list[str] | None = None,
    mapping: Mapping[str, str] | None = None,
    *,
    root: str | Path | None = None,
    overwrite: bool = False,
) -> ConvertReport:
    """Convert VOC XML files to YOLO ``.txt`` files in ``out_dir`` (named after each image).

    Args:
        xml_files: annotation files.
        out_dir: destination folder for ``<image stem>.txt`` (below each XML's folder relative to
            ``root``) and ``classes.names``.
        names: fixed class list (objects of other classes are skipped and reported); ``None`` collects
            names in order of first appearance.
        mapping: optional rename applied before the look-up (e.g. ``{"Alive": "tree"}``).
        root: the source folder (default: the XMLs' common folder).
        overwrite: replace existing label files and ``classes.names``.
    """
    out_dir = Path(out_dir)
    files = sorted(Path(p) for p in xml_files)
    base = Path(root) if root is not None else Path(os.path.commonpath([str(p.parent) for p in files]))
    report = ConvertReport(names=list(names) if names else [])
    plan: Plan = {}
    for xml_file in files:
        try:
            item = read_voc_xml(xml_file)
        except DataError as err:
            report.skipped.append((str(xml_file), str(err).removeprefix(f"{xml_file}: ")))
            continue
        if item.width <= 0 or item.height <= 0:
            report.skipped.append((str(xml_file), "no <size> width/height"))
            continue
        keep, ids = [], []
        for index, (box, cls) in enumerate(zip(item.boxes, item.classes, strict=True)):
            cid = _resolve_class(cls, report.names, mapping, names is not None)
            if cid is None:
                report.skipped.append((f"{xml_file}: object {index} ({cls})", "class not in the names list"))
                continue
            keep.append(box)
            ids.append(cid)
        boxes, clipped, outside = clip_boxes(np.asarray(keep).reshape(-1, 4), item.width, item.height)
        inside = _inside_mask(np.asarray(keep).reshape(-1, 4), item.width, item.height)
        report.clipped, report.outside = report.clipped + clipped, report.outside + outside
        rows = boxes_to_yolo(boxes, np.asarray(ids, np.float64)[inside], item.width, item.height)
        rel = xml_file.parent.relative_to(base) if xml_file.is_relative_to(base) else Path()
        _add(
            plan, out_dir / rel / (Path(item.filename.replace("\\", "/")).stem + ".txt"), rows, str(xml_file)
        )
    return _write(plan, out_dir, report, overwrite)


def _inside_mask(boxes: np.ndarray, width: float, height: float) -> np.ndarray:
    """Which boxes keep some area after clipping (the rows :func:`clip_boxes` keeps, in order)."""
    x1, x2 = np.clip(boxes[:, [0, 2]], 0, width).T
    y1, y2 = np.clip(boxes[:, [1, 3]], 0, height).T
    return (x2 > x1) & (y2 > y1)


def _write(plan: Plan, out_dir: Path, report: ConvertReport, overwrite: bool) -> ConvertReport:
    """Write the planned files (refused as a whole when any exists and not ``overwrite``), then name the
    label files already in ``out_dir`` that this conversion did not write (left as they are)."""
    names_path = out_dir / NAMES_FILE
    existing_outputs([*plan, names_path], overwrite, f"--out {printable(out_dir)}")
    for dest, (rows, _) in plan.items():
        if not np.isfinite(rows).all():  # unreachable by construction; never write a NaN
            raise DataError(f"{dest}: a computed coordinate is not finite; please report this file")
        write_yolo_labels(dest, rows)
        report.written += 1
        report.boxes += len(rows)
    if plan:  # nothing converted: no names file either
        write_names(names_path, report.names)
    others = (
        [p for p in walk_files(out_dir) if p.suffix == ".txt" and p not in plan] if out_dir.is_dir() else []
    )
    if others:
        shown = ", ".join(printable(p) for p in others[:3])
        report.notes.append(
            f"{len(others)} other .txt file(s) in {printable(out_dir)} were not written by this "
            f"conversion ({shown}{' ...' if len(others) > 3 else ''}); left as they are"
        )
    return report


def _label_rel(file_name: str) -> str | None:
    """A COCO ``file_name`` as a relative POSIX path (backslashes as folders), or ``None`` when it
    climbs out with ``..``; absolute names are handled by the caller."""
    name = posixpath.normpath(file_name.replace("\\", "/"))
    if name.startswith("../") or name == "..":
        return None
    return name


def _coco_images(
    images: object, json_path: Path, report: ConvertReport
) -> dict[int, tuple[str, float, float]]:
    """id -> (relative file name, width, height) of every well-formed image entry; malformed ones are
    skipped and named by index; two entries with one id are refused."""
    if not isinstance(images, list):
        raise DataError(f"{json_path}: `images` is not a list; not a COCO detection JSON")
    out: dict[int, tuple[str, float, float]] = {}
    first: dict[int, int] = {}
    absolute = []
    for index, img in enumerate(images):
        where = f"{json_path}: images[{index}]"
        try:
            if not isinstance(img, dict):
                raise ValueError("not an object")
            image_id = img.get("id")
            if isinstance(image_id, bool) or not isinstance(image_id, int | str) or str(image_id) == "":
                raise ValueError(f"id {image_id!r} is not an id")
            file_name = img.get("file_name")
            if not isinstance(file_name, str) or not file_name.strip():
                raise ValueError("no file_name")
            width, height = _finite(img.get("width"), "width"), _finite(img.get("height"), "height")
            if width <= 0 or height <= 0:
                raise ValueError(f"width x height {width:g} x {height:g} is not a positive size")
        except ValueError as err:
            report.skipped.append((where, str(err)))
            continue
        if image_id in out:
            raise DataError(
                f"{json_path}: images[{first[image_id]}] ({out[image_id][0]}) and images[{index}] "
                f"({file_name}) share the id {image_id!r}: their annotations cannot be told "
                "apart; give each image its own id"
            )
        first[image_id] = index
        out[image_id] = (file_name.strip(), width, height)
        if posixpath.isabs(file_name.replace("\\", "/")) or ":" in file_name[:3]:
            absolute.append(image_id)
    _relative_file_names(out, absolute)
    return out


def _relative_file_names(images: dict[int, tuple[str, float, float]], absolute: list[int]) -> None:
    """Absolute file names (a tool's full paths) become relative to the folder they share."""
    if not absolute:
        return
    paths = {i: images[i][0].replace("\\", "/") for i in absolute}
    base = posixpath.commonpath([posixpath.dirname(p) for p in paths.values()])
    for i, path in paths.items():
        images[i] = (posixpath.relpath(path, base), *images[i][1:])


def _coco_box(ann: object, images: Mapping, cat_index: Mapping) -> tuple[int, int, list[float]] | str:
    """(image id, class index, x1 y1 x2 y2) of one annotation, or why it is skipped."""
    if not isinstance(ann, dict):
        return "not an object"
    if ann.get("iscrowd"):
        return "iscrowd"
    if ann.get("image_id") not in images:
        return f"image_id {ann.get('image_id')!r} is not among the images"
    if ann.get("category_id") not in cat_index:
        return f"category_id {ann.get('category_id')!r} is not among the categories"
    bbox = ann.get("bbox")
    if not isinstance(bbox, list) or len(bbox) != 4:
        return f"bbox {bbox!r} is not [x, y, width, height]"
    try:
        x, y, w, h = (_finite(v, "bbox value") for v in bbox)
    except ValueError as err:
        return str(err)
    if w <= 0 or h <= 0:
        return "bbox with zero size"
    return ann["image_id"], cat_index[ann["category_id"]], [x, y, x + w, y + h]


def _coco_categories(data: dict, json_path: Path) -> list[dict]:
    categories = data.get("categories")
    if not isinstance(categories, list) or not all(isinstance(c, dict) and "id" in c for c in categories):
        raise DataError(
            f"{json_path}: `categories` must be a list of {{id, name}}; not a COCO detection JSON"
        )
    seen: dict[object, int] = {}
    for index, category in enumerate(categories):
        if category["id"] in seen:
            raise DataError(
                f"{json_path}: categories[{seen[category['id']]}] and categories[{index}] share the "
                f"id {category['id']!r}; give each class its own id"
            )
        seen[category["id"]] = index
    return sorted(
        categories, key=lambda c: str(c["id"]) if not isinstance(c["id"], int) else f"{c['id']:020d}"
    )


def convert_coco(json_path: str | Path, out_dir: str | Path, *, overwrite: bool = False) -> ConvertReport:
    """Convert a COCO detection JSON to YOLO ``.txt`` files (one per image, empty for no boxes), each at
    its image's relative ``file_name`` path below ``out_dir``.

    Category ids are remapped to 0..K-1 in ascending id order; ``classes.names`` lists them.
    Crowd annotations, boxes with zero size and malformed entries are skipped and reported by index.
    """
    json_path, out_dir = Path(json_path), Path(out_dir)
    try:
        data = json.loads(read_text(json_path))
    except (OSError, ValueError) as err:
        raise DataError(
            f"{json_path}: not a COCO detection JSON ({err!r}); it needs images, categories and annotations"
        ) from None
    if not isinstance(data, dict) or "images" not in data:
        raise DataError(
            f"{json_path}: not a COCO detection JSON (no `images`); it needs images, categories "
            "and annotations"
        )
    categories = _coco_categories(data, json_path)
    report = ConvertReport(names=[str(c.get("name", c["id"])) for c in categories])
    cat_index = {c["id"]: i for i, c in enumerate(categories)}
    images = _coco_images(data["images"], json_path, report)
    per_image: dict[object, list[tuple[int, list[float]]]] = {i: [] for i in images}
    annotations = data.get("annotations") or []
    for index, ann in enumerate(annotations if isinstance(annotations, list) else []):
        box = _coco_box(ann, images, cat_index)
        if isinstance(box, str):
            named = f" (id {ann.get('id')})" if isinstance(ann, dict) and "id" in ann else ""
            report.skipped.append((f"{json_path}: annotations[{index}]{named}", box))
        else:
            per_image[box[0]].append((box[1], box[2]))
    plan: Plan = {}
    for image_id, (file_name, width, height) in images.items():
        rel = _label_rel(file_name)
        if rel is None:
            report.skipped.append(
                (
                    f"{json_path}: image {image_id!r} ({file_name})",
                    "file_name climbs out of the image folder ('..'); its labels cannot be placed",
                )
            )
            continue
        items = per_image[image_id]
        given = np.asarray([b for _, b in items], np.float64).reshape(-1, 4)
        boxes, clipped, outside = clip_boxes(given, width, height)
        report.clipped, report.outside = report.clipped + clipped, report.outside + outside
        ids = np.asarray([c for c, _ in items], np.float64)[_inside_mask(given, width, height)]
        _add(
            plan,
            out_dir / Path(rel).with_suffix(".txt"),
            boxes_to_yolo(boxes, ids, width, height),
            f"{file_name} (id {image_id!r})",
        )
    return _write(plan, out_dir, report, overwrite)


def convert_labels(
    source: str | Path,
    out_dir: str | Path,
    *,
    format: str = "auto",
    names_file: str | Path | None = None,
    mapping: Mapping[str, str] | None = None,
    overwrite: bool = False,
) -> ConvertReport:
    """``turboyolo convert``: COCO JSON or Pascal VOC XML labels -> YOLO ``.txt`` files in ``out_dir``.

    Args:
        source: a COCO ``.json`` file, a VOC ``.xml`` file, or a folder of VOC ``.xml`` files (with
            its subfolders, mirrored in ``out_dir``).
        format: ``coco``, ``voc`` or ``auto`` (``.json`` = COCO, anything else VOC).
        names_file: VOC only: a ``.names`` file fixing the class list (other classes are skipped).
        mapping: VOC only: class renames applied before the look-up (e.g. ``{"Alive": "tree"}``).
        overwrite: replace label files (and ``classes.names``) that exist in ``out_dir``.
    Raises:
        DataError: ``source`` is missing, a folder without ``.xml`` files, or not a COCO JSON; two images
            would share a label file; (COCO) two images share an id.
        OutputError: existing outputs without ``overwrite``; ``classes.names`` is the ``names_file``.
    """
    source = Path(source)
    if format not in CONVERT_FORMATS:
        raise DataError(f"--format {format!r}: use one of {', '.join(CONVERT_FORMATS)}")
    if not source.exists():
        raise DataError(f"{source}: not found; pass a COCO .json, a VOC .xml or a folder of them")
    check_outputs(
        {f"--out {out_dir}: {NAMES_FILE}": Path(out_dir) / NAMES_FILE},
        {"--names": names_file, "source": source},
        overwrite=True,
    )
    if format == "auto":
        format = "coco" if source.suffix.lower() == ".json" else "voc"
    if format == "coco":
        return convert_coco(source, out_dir, overwrite=overwrite)
    files = (
        sorted(p for p in walk_files(source) if p.suffix.lower() == ".xml") if source.is_dir() else [source]
    )
    if not files:
        raise DataError(f"{source}: no .xml files; pass a folder of VOC annotations")
    names = read_names(names_file) if names_file else None
    return convert_voc(
        files, out_dir, names, mapping, root=source if source.is_dir() else source.parent, overwrite=overwrite
    )

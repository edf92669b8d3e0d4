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

import os
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from turboyolo.errors import DataError, OutputError, printable
from turboyolo.formats.coco import finite_number, read_coco
from turboyolo.formats.datasets import read_names, walk_files
from turboyolo.formats.labels import write_names, write_yolo_labels
from turboyolo.rundir import check_outputs, existing_outputs, same_file

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
        width = int(finite_number(root.findtext("size/width") or 0, "<size><width>"))
        height = int(finite_number(root.findtext("size/height") or 0, "<size><height>"))
        for index, obj in enumerate(root.iter("object")):
            bnd = obj.find("bndbox")
            if bnd is None:
                raise ValueError(f"object {index} has no <bndbox>")
            box = [
                finite_number(bnd.findtext(k), f"object {index} <{k}>")
                for k in ("xmin", "ymin", "xmax", "ymax")
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
        stem = Path(item.filename.replace("\\", "/")).stem.strip() or xml_file.stem
        _add(plan, out_dir / rel / f"{stem}.txt", rows, str(xml_file))
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
    try:
        for dest, (rows, _) in plan.items():
            if not np.isfinite(rows).all():  # unreachable by construction; never write a NaN
                raise DataError(f"{dest}: a computed coordinate is not finite; please report this file")
            write_yolo_labels(dest, rows)
            report.written += 1
            report.boxes += len(rows)
        if plan:  # nothing converted: no names file either
            write_names(names_path, report.names)
    except OSError as err:
        raise OutputError(f"--out {printable(out_dir)}: cannot write {printable(err.filename or out_dir)} "
                          f"({err.strerror or err}); choose a writable folder") from None
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


def convert_coco(json_path: str | Path, out_dir: str | Path, *, overwrite: bool = False) -> ConvertReport:
    """Convert a COCO detection JSON to YOLO ``.txt`` files (one per image, empty for no boxes), each at
    its image's relative ``file_name`` path below ``out_dir`` (:func:`turboyolo.formats.coco.read_coco`).

    Category ids are remapped to 0..K-1 in ascending id order; ``classes.names`` lists them.
    Crowd annotations, boxes with zero size and malformed entries are skipped and reported by index.
    """
    out_dir = Path(out_dir)
    coco = read_coco(json_path)
    report = ConvertReport(names=coco.names, skipped=coco.skipped)
    plan: Plan = {}
    for image in coco.images:
        boxes, clipped, outside = clip_boxes(image.boxes, image.width, image.height)
        report.clipped, report.outside = report.clipped + clipped, report.outside + outside
        ids = image.classes[_inside_mask(image.boxes, image.width, image.height)]
        _add(
            plan,
            out_dir / Path(image.rel).with_suffix(".txt"),
            boxes_to_yolo(boxes, ids, image.width, image.height),
            f"{image.file_name} (id {image.id!r})",
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
    if same_file(out_dir, source) or Path(out_dir).is_file():
        what = "the input" if same_file(out_dir, source) else "a file"
        raise OutputError(f"--out {printable(out_dir)} is {what}, not a folder; name the folder for the "
                          "label files")
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

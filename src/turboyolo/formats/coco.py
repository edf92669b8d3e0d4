"""COCO: its category ids and names (what an 80-class Darknet model's class indices mean in COCO), and
a detection JSON read into checked values (:func:`read_coco`, what ``turboyolo convert`` imports).

:func:`read_coco` keys each image by its ``file_name`` as a relative path (absolute names relative to
the folder they share; ``..`` refused), refuses two images with one id and two categories with one id,
and names every malformed entry by its index (``images[3]``, ``annotations[17] (id 42)``): a value that
is not a finite number never gets through.
"""

from __future__ import annotations

import json
import math
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np

from turboyolo.errors import DataError
from turboyolo.formats.text import read_text

# Darknet's table: the 80 class indices -> COCO's 91 category ids.
# fmt: off
COCO91_IDS = (
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16, 17, 18, 19, 20, 21,
    22, 23, 24, 25, 27, 28, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44,
    46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65,
    67, 70, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 84, 85, 86, 87, 88, 89, 90,
)
# fmt: on


def coco_names() -> list[str]:
    """The 80 COCO class names in Darknet's order."""
    return resources.files("turboyolo").joinpath("resources/coco.names").read_text().split("\n")[:80]


def finite_number(value: object, what: str) -> float:
    """``value`` (a number or a numeric string from a foreign file) as a finite float, else ValueError
    naming ``what``."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"{what} {value!r} is not a number") from None
    if not math.isfinite(number):
        raise ValueError(f"{what} is {value!r}, not a finite number")
    return number


@dataclass
class CocoImage:
    """One image of a COCO JSON with its boxes: pixels (x1, y1, x2, y2), float64 ``[N, 4]``, not yet
    clipped; ``classes`` float64 ``[N]`` indices into the names."""

    id: object
    file_name: str
    rel: str  # file_name as a relative POSIX path
    width: float
    height: float
    boxes: np.ndarray
    classes: np.ndarray


@dataclass
class CocoDetections:
    names: list[str]
    images: list[CocoImage]
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (entry, why), by index


def read_coco(json_path: str | Path) -> CocoDetections:
    """A COCO detection JSON, checked (see the module's docstring).

    Raises:
        DataError: not a COCO detection JSON; two images (or two categories) share an id.
    """
    json_path = Path(json_path)
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
    skipped: list[tuple[str, str]] = []
    cat_index = {c["id"]: i for i, c in enumerate(categories)}
    images = _coco_images(data["images"], json_path, skipped)
    per_image: dict[object, list[tuple[int, list[float]]]] = {i: [] for i in images}
    annotations = data.get("annotations") or []
    if not isinstance(annotations, list):
        raise DataError(f"{json_path}: `annotations` is not a list; not a COCO detection JSON")
    for index, ann in enumerate(annotations):
        box = _coco_box(ann, images, cat_index)
        if isinstance(box, str):
            named = f" (id {ann.get('id')})" if isinstance(ann, dict) and "id" in ann else ""
            skipped.append((f"{json_path}: annotations[{index}]{named}", box))
        else:
            per_image[box[0]].append((box[1], box[2]))
    out = []
    for image_id, (file_name, width, height) in images.items():
        rel = _label_rel(file_name)
        if rel is None:
            skipped.append(
                (
                    f"{json_path}: image {image_id!r} ({file_name})",
                    "file_name climbs out of the image folder ('..') or names no file; its labels cannot "
                    "be placed",
                )
            )
            continue
        items = per_image[image_id]
        out.append(
            CocoImage(
                image_id,
                file_name,
                rel,
                width,
                height,
                np.asarray([b for _, b in items], np.float64).reshape(-1, 4),
                np.asarray([k for k, _ in items], np.float64),
            )
        )
    return CocoDetections([str(c.get("name", c["id"])) for c in categories], out, skipped)


def _label_rel(file_name: str) -> str | None:
    """A COCO ``file_name`` as a relative POSIX path (backslashes as folders), or ``None`` when it
    climbs out with ``..`` or names no file (``.``); absolute names are handled by the caller."""
    name = posixpath.normpath(file_name.replace("\\", "/"))
    if name.startswith("../") or name in ("..", ".") or not posixpath.basename(name).strip("."):
        return None
    return name


def _coco_images(
    images: object, json_path: Path, skipped: list[tuple[str, str]]
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
            width, height = (
                finite_number(img.get("width"), "width"),
                finite_number(img.get("height"), "height"),
            )
            if width <= 0 or height <= 0:
                raise ValueError(f"width x height {width:g} x {height:g} is not a positive size")
        except ValueError as err:
            skipped.append((where, str(err)))
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
        x, y, w, h = (finite_number(v, "bbox value") for v in bbox)
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

"""Data-set descriptions: Darknet ``.data``, Ultralytics ``data.yaml``, a plain image folder.

Also the image -> label path rule. turboyolo uses Ultralytics' rule (the *last* ``images`` path
component becomes ``labels``, the extension ``.txt``); Darknet replaces the *first* ``images``
substring of the path and PyTorch-YOLOv3 the *last* ``images`` substring of the folder name.
:func:`label_path_disagreement` says when those rules would pick a different existing file.
"""

from __future__ import annotations

import errno
import functools
import glob
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path

from turboyolo.errors import ConfigError, DataError
from turboyolo.formats.text import read_text
from turboyolo.formats.yamlfile import read_yaml, typed

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp")  # what a folder is searched for
# Pillow formats it only identifies (no decoder), or that are videos here: never taken for an image
_NOT_DECODED = frozenset({"MPEG", "BUFR", "GRIB", "HDF5", "WMF"})


def is_image_name(path: str | Path) -> bool:
    """True when ``path``'s suffix is an image's: one of :data:`IMAGE_SUFFIXES` (what a folder is searched
    for), or any other a decoder of the package reads (Pillow's: ``.gif``, ``.jfif``, ``.jpe``, ``.ppm``,
    ``.tga``, ...), so a file named on the command line or matched by a glob is read as the image it is."""
    suffix = Path(path).suffix.lower()
    return suffix in IMAGE_SUFFIXES or suffix in _decoded_suffixes()


@functools.cache
def _decoded_suffixes() -> frozenset[str]:
    from PIL import Image  # its plugins load here, once, and only when a name is not a common one

    Image.init()
    return frozenset(suffix for suffix, kind in Image.registered_extensions().items()
                     if kind in Image.OPEN and kind not in _NOT_DECODED)


def _binary(text: str) -> bool:
    """True when ``text`` (a file read as text) holds bytes no text file has (NUL and other controls)."""
    return any(ch in text for ch in "\x00\x01\x02\x03\x04\x05\x06\x07\x08\x0e\x0f\x10\x11\x12"
                                     "\x13\x14\x15\x16\x17\x18\x19\x1a\x1c\x1d\x1e\x1f")


@dataclass
class DataConfig:
    """A data set: where its splits are and what its classes are called.

    Attributes:
        path: the file (or folder) it was read from.
        root: folder relative paths were resolved against (the file's folder, or ``path:`` in a yaml).
        train: sources of the training split; each is an image folder, a list file or one image.
        val: sources of the validation split (same kinds).
        names: class names (``None`` for a bare image folder without a names file).
        extra: other keys of the file (``backup``, ``eval``, ``test``, ...), raw.
    """

    path: Path
    root: Path
    train: list[Path]
    val: list[Path]
    names: list[str] | None
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def num_classes(self) -> int | None:
        return None if self.names is None else len(self.names)

    def folders(self) -> list[Path]:
        """The image folders of both splits (list files and single images left out)."""
        return [source for source in dict.fromkeys(self.train + self.val) if source.is_dir()]

    def split(self, name: str) -> list[Path]:
        """Sources of ``train`` or ``val`` (``valid``, ``test`` accepted as ``val``)."""
        if name == "train":
            return self.train
        if name in ("val", "valid", "test"):
            return self.val
        raise ConfigError(f"unknown split {name!r}; use train or val")


def resolve(path: str | Path, *bases: Path) -> Path:
    """``path`` if absolute; else the first of ``bases / path`` or ``cwd / path`` that exists.

    When none exists, the first candidate is returned so the error can name it.
    """
    p = Path(os.path.expanduser(str(path).strip()))
    if p.is_absolute():
        return p
    candidates = [base / p for base in bases] + [Path.cwd() / p]
    for cand in candidates:
        if cand.exists():
            return cand
    return candidates[0]


def read_names(path: str | Path) -> list[str]:
    """Class names from a ``.names`` file (one per line, blank lines ignored)."""
    path = Path(path)
    try:
        lines = read_text(path, errors="replace").splitlines()
    except OSError as err:
        raise ConfigError(f"{path}: cannot read the names file ({err.strerror}); check the path") from None
    names = [line.strip() for line in lines if line.strip()]
    if not names:
        raise ConfigError(f"{path}: the names file is empty; write one class name per line")
    return names


def write_darknet_data(path: str | Path, classes: int, train: Path, valid: Path, names: Path,
                       **extra: str) -> Path:
    """A Darknet ``.data`` file (``key = value`` lines, read by :func:`load_data_config`, Darknet and
    PyTorch-YOLOv3 alike; give absolute paths, which every tool reads the same); returns its path."""
    values = {"classes": classes, "train": train, "valid": valid, "names": names, **extra}
    Path(path).write_text("".join(f"{key} = {value}\n" for key, value in values.items()), encoding="utf-8")
    return Path(path)


def _parse_darknet_data(path: Path) -> DataConfig:
    values: dict[str, str] = {}
    for line_no, raw in enumerate(read_text(path, errors="surrogateescape").splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if "=" not in line:
            raise ConfigError(f"{path}:{line_no}: expected key = value, got {line!r}")
        key, value = (s.strip() for s in line.split("=", 1))
        values[key] = value
    base = path.parent
    for key in ("train", "valid"):
        if key not in values:
            raise ConfigError(f"{path}: missing `{key} = <list file>`; add it")
    for key in ("train", "valid", "names"):
        if key in values and not values[key]:  # an empty path would be the .data file's own folder
            raise ConfigError(f"{path}: `{key} =` has no value; give the {key} file")
    names = read_names(resolve(values["names"], base)) if "names" in values else None
    count = _class_count(values["classes"], f"{path}: classes = {values['classes']}") if (
        "classes" in values) else None
    if names is not None and count is not None and count != len(names):
        raise ConfigError(f"{path}: classes = {values['classes']} but the names file has {len(names)} "
                          "lines; make them agree")
    extra = {k: v for k, v in values.items() if k not in ("train", "valid", "names")}
    return DataConfig(path, base, [resolve(values["train"], base)], [resolve(values["valid"], base)],
                      names, extra)


def _yaml_sources(value: object, root: Path, path: Path, key: str) -> list[Path]:
    if value is None:
        return []
    items = value if isinstance(value, list) else [value]
    if not all(isinstance(v, str) for v in items):
        raise ConfigError(f"{path}: `{key}` must be a path or a list of paths")
    if not all(v.strip() for v in items):  # an empty path would be the whole data set folder
        raise ConfigError(f"{path}: `{key}` holds an empty path; give the {key} images folder or list file")
    return [resolve(v, root) for v in items]


def _class_count(value: object, where: str) -> int:
    """A class count (``classes`` of a .data, ``nc`` of a data.yaml): a whole number >= 1."""
    try:
        count = int(str(value).strip()) if isinstance(value, str) else typed(value, "int", "")
    except (ValueError, ConfigError):
        raise ConfigError(f"{where}: the class count must be a whole number (e.g. 2); fix it") from None
    if count < 1:
        raise ConfigError(f"{where}: the class count must be at least 1; fix it")
    return count


def _yaml_names(value: object, root: Path, path: Path) -> list[str] | None:
    """``names`` of a data.yaml: a list, a mapping ``id: name`` (ids 0..N-1) or a names file."""
    if value is None:
        return None
    if isinstance(value, str):
        return read_names(resolve(value, root, path.parent))
    if isinstance(value, dict):
        ids = {}
        for key in value:
            number = int(key) if isinstance(key, str) and key.strip().isdigit() else key
            try:
                ids[typed(number, "int", "")] = key
            except ConfigError:
                raise ConfigError(f"{path}: `names` id {key!r} is not a class index; write 0: name, "
                                  "1: name, ...") from None
        if sorted(ids) != list(range(len(ids))):
            raise ConfigError(f"{path}: `names` ids must be 0..{len(ids) - 1} without gaps")
        items = [value[ids[k]] for k in sorted(ids)]
    elif isinstance(value, list):
        items = value
    else:
        raise ConfigError(f"{path}: `names` must be a list of class names, a mapping 0: name, ... or a "
                          f"names file, not {value!r}")
    bad = [(index, item) for index, item in enumerate(items) if item is None or isinstance(item, dict | list)]
    if bad:
        raise ConfigError(f"{path}: `names` entry {bad[0][0]} is {bad[0][1]!r}, not a class name; fix it")
    return [str(item) for item in items]


def _parse_yaml(path: Path) -> DataConfig:
    doc = read_yaml(path) or {}
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: expected a mapping with path/train/val/names")
    if doc.get("path") is not None and not isinstance(doc["path"], str):
        raise ConfigError(f"{path}: `path` must be a folder, not {doc['path']!r}")
    root = Path(doc["path"]) if doc.get("path") else path.parent
    if not root.is_absolute():
        root = resolve(root, path.parent)
    names = _yaml_names(doc.get("names"), root, path)
    count = _class_count(doc["nc"], f"{path}: nc: {doc['nc']!r}") if "nc" in doc else None
    if names is not None and count is not None and count != len(names):
        raise ConfigError(f"{path}: nc = {doc['nc']} but names has {len(names)} entries; make them agree")
    if "train" not in doc:
        raise ConfigError(f"{path}: missing `train:`; add the training images folder or list file")
    val_value = doc.get("val", doc.get("valid"))
    extra = {k: v for k, v in doc.items() if k not in ("path", "train", "val", "valid", "names")}
    return DataConfig(path, root, _yaml_sources(doc["train"], root, path, "train"),
                      _yaml_sources(val_value, root, path, "val"), names, extra)


def _names_near(folder: Path) -> list[str] | None:
    for base in (folder, folder.parent):
        found = sorted(base.glob("*.names"))
        if len(found) == 1:
            return read_names(found[0])
    return None


def load_data_config(path: str | Path) -> DataConfig:
    """Read a ``.data`` file, a ``data.yaml``/``.yml`` file or describe an image folder.

    Relative paths resolve against the file's folder (for yaml: its ``path:`` key), then the working
    directory. An image folder is both splits; its names come from a single ``*.names`` file in it or
    its parent, else ``None``.

    Raises:
        ConfigError: missing file, unknown format, missing keys.
    """
    path = Path(path)
    if path.is_dir():
        return DataConfig(path, path, [path], [path], _names_near(path))
    if not path.is_file():
        raise ConfigError(f"{path}: no such data file or folder; pass a .data, data.yaml or image folder")
    suffix = path.suffix.lower()
    if suffix in (".yaml", ".yml"):
        return _parse_yaml(path)
    if suffix == ".data":
        return _parse_darknet_data(path)
    if is_image_name(path):
        return DataConfig(path, path.parent, [path], [path], _names_near(path.parent))
    if suffix == ".txt":
        return DataConfig(path, path.parent, [path], [path], _names_near(path.parent))
    raise ConfigError(f"{path}: unknown data description; use a Darknet .data, a data.yaml or a folder")


def walk_files(root: str | Path, notes: list[str] | None = None) -> Iterator[Path]:
    """Every file under ``root`` once, following folder and file links but entering each real folder once.

    ``Path.rglob`` and ``glob('**')`` follow a link back to a parent folder forever; here a folder
    already entered (same device and inode) is not entered again, so a tree with link loops ends, and a
    folder reachable through two links is listed once (through the first path in sorted order). A file
    is listed once too: a link to a file listed under its own name (or through an earlier link) is not
    listed again, and a link that loops (``a.jpg -> a.jpg``, ``a -> b -> a``) or points at nothing is
    not a file at all. A link to a folder that holds ``root`` (``images/train/up -> ..``) is never
    followed: it would list ``root``'s siblings, such as another split's images.

    Args:
        root: the folder to walk.
        notes: when given, receives one line per link not followed (a folder already listed, a file
            already listed, a loop, a missing target) and per unreadable folder (what the scan reports
            as warnings).
    """
    say = notes.append if notes is not None else (lambda line: None)
    files: list[tuple[Path, bool]] = []  # (path, whether it is a link)
    seen: set[tuple[int, int]] = set()
    stack = [Path(root)]
    top = os.path.realpath(root)
    while stack:
        folder = stack.pop()
        try:
            info = folder.stat()
        except OSError as err:
            say(f"{folder}: folder unreadable ({err.strerror or err}); its images are not listed")
            continue
        real = os.path.realpath(folder)
        if top != real and top.startswith(real.rstrip(os.sep) + os.sep):
            # a link up the tree: following it would list the folder's siblings (another split's images)
            say(f"{folder}: links to {real}, a folder that holds {root} (a loop up the tree); not followed")
            continue
        if (info.st_dev, info.st_ino) in seen:
            say(f"{folder}: links to a folder already listed; not followed again")
            continue
        seen.add((info.st_dev, info.st_ino))
        try:
            with os.scandir(folder) as entries:
                items = sorted(entries, key=lambda e: e.name)
        except OSError as err:
            say(f"{folder}: folder unreadable ({err.strerror or err}); its images are not listed")
            continue
        subfolders = []
        for entry in items:
            kind = _entry_kind(entry)
            if isinstance(kind, str):
                say(f"{entry.path}: {kind}; not listed")
            elif kind is None:
                subfolders.append(Path(entry.path))
            else:
                files.append((Path(entry.path), kind))
        stack.extend(reversed(subfolders))  # depth first, in sorted order
    yield from _once_each(files, say)


def link_problem(path: str | Path) -> str | None:
    """Why the link at ``path`` cannot be followed (it loops, or points at nothing); None when ``path``
    is no link, or a link to something that exists."""
    try:
        os.stat(path)
    except OSError as err:
        if not os.path.islink(path):
            return None
        if err.errno == errno.ELOOP:
            return "a link that loops back on itself"
        if err.errno == errno.ENOENT:
            return f"a link to {os.readlink(path)!r}, which does not exist"
        return f"a link that cannot be followed ({err.strerror or err})"
    return None


def _entry_kind(entry: os.DirEntry) -> bool | str | None:
    """None for a folder (links followed); for a file, True when it is a link and False when not; or
    why the entry is neither (a link that loops or points at nothing)."""
    if not entry.is_symlink():
        try:
            return None if entry.is_dir(follow_symlinks=False) else False
        except OSError:
            return False
    return link_problem(entry.path) or (None if os.path.isdir(entry.path) else True)


def _once_each(files: list[tuple[Path, bool]], say) -> Iterator[Path]:
    """Each real file once: under its own name when the walk found one, else under its first link.

    Files are told apart by (device, inode), read only when the walk met a file link at all."""
    if not any(linked for _, linked in files):
        yield from (path for path, _ in files)
        return
    keys = {}
    for path, _ in files:
        try:
            info = path.stat()
            keys[path] = (info.st_dev, info.st_ino)
        except OSError:
            keys[path] = path  # vanished since: listed, and the scan says why it cannot be read
    own = {keys[path]: path for path, linked in files if not linked}
    listed: dict[object, Path] = {}
    for path, linked in files:
        key = keys[path]
        first = (own.get(key) if linked else None) or listed.get(key)
        if first is not None and first != path:
            say(f"{path}: the same file as {first} (a link), already listed; not listed again")
            continue
        listed[key] = path
        yield path


def glob_files(pattern: str, notes: list[str] | None = None) -> list[Path]:
    """Files matching a glob (``*``, ``?``, ``[...]``; ``**`` = any number of folders), sorted.

    Unlike ``glob.glob(recursive=True)``, ``**`` follows each real folder once (:func:`walk_files`), so
    it ends on a tree with folder-link loops. As in ``glob``, names starting with a dot match only a
    pattern part that starts with a dot, and ``**`` does not enter hidden folders.
    """
    parts = Path(pattern).parts
    if "**" not in parts:
        return sorted(Path(p) for p in glob.glob(pattern) if os.path.isfile(p))
    magic = next(i for i, part in enumerate(parts) if any(ch in part for ch in "*?["))
    base = Path(*parts[:magic]) if magic else Path(".")
    wanted = parts[magic:]
    out = []
    for path in walk_files(base, notes):
        rel = path.relative_to(base).parts
        if _glob_match(rel, wanted):
            out.append(base / Path(*rel) if magic else Path(*rel))
    return sorted(out)


def _glob_match(parts: tuple[str, ...], pattern: tuple[str, ...]) -> bool:
    if not pattern:
        return not parts
    head, rest = pattern[0], pattern[1:]
    if head == "**":
        for skip in range(len(parts) + 1):
            if _glob_match(parts[skip:], rest):
                return True
            if skip < len(parts) and parts[skip].startswith("."):
                return False  # ** does not enter hidden folders
        return False
    if not parts or (parts[0].startswith(".") and not head.startswith(".")):
        return False
    return fnmatchcase(parts[0], head) and _glob_match(parts[1:], rest)


def list_images(source: str | Path, notes: list[str] | None = None) -> list[Path]:
    """Images of one source: a folder (recursive, sorted), a list file, or a single image.

    A folder is walked with :func:`walk_files` (link loops end; ``notes`` receives what was not
    followed). List-file lines are resolved against the list file's folder, then the working
    directory; lines that are blank or start with ``#`` are skipped. A list file is read as UTF-8 with
    ``surrogateescape``: a line naming a file whose name is not valid UTF-8 (a Latin-1 byte) still
    names that file. Missing images are kept in the list (the scan reports them).

    Raises:
        DataError: the source does not exist.
    """
    source = Path(source)
    if source.is_dir():
        return sorted(p for p in walk_files(source, notes) if p.suffix.lower() in IMAGE_SUFFIXES)
    if not source.is_file():
        problem = link_problem(source)
        raise DataError(f"{source}: {problem}; fix or remove the link" if problem
                        else f"{source}: image folder or list file not found; check the data file's paths")
    if is_image_name(source):
        return [source]
    base = source.parent
    out = []
    try:
        text = read_text(source, errors="surrogateescape")
    except OSError as err:
        raise DataError(f"{source}: cannot read the list file ({err.strerror or err}); check it") from None
    if _binary(text):
        kind = source.suffix or "a name without a suffix"
        raise DataError(f"{source}: neither an image (no decoder reads {kind}) nor a list file of image "
                        "paths (it is not text); pass images, folders, globs or .txt lists of image paths")
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            out.append(resolve(line, base))
    return out


def label_path_for(image: str | Path) -> Path:
    """turboyolo's rule, the one every reader and writer of label files uses (scan, label, cache):

    1. Ultralytics': the last ``images`` folder component -> ``labels``, the suffix -> ``.txt``;
    2. else PyTorch-YOLOv3's, where its label folder exists: the last ``images`` inside a folder name ->
       ``labels`` (``train_images/a.jpg`` -> ``train_labels/a.txt`` beside it);
    3. else beside the image.
    """
    parts = list(Path(image).parts)
    for i in range(len(parts) - 2, -1, -1):  # folders only, last one first
        if parts[i] == "images":
            parts[i] = "labels"
            return Path(*parts).with_suffix(".txt")
    beside = Path(image).with_suffix(".txt")
    sibling = pytorchyolo_label_path(image)
    if sibling.parent != beside.parent and sibling.parent.is_dir():
        return sibling
    return beside


def label_paths_for(images: Iterable[str | Path]) -> list[str]:
    """``str(label_path_for(image))`` of each image, the rule worked out once per folder: a large data set
    in a few folders costs a string join per image, not a path parse and a folder check."""
    folders: dict[str, str] = {}
    out = []
    for image in images:
        head, name = os.path.split(os.fspath(image))
        folder = folders.get(head)
        if folder is None:
            folder = folders[head] = str(label_path_for(Path(head) / "x.jpg").parent)
        dot = name.rfind(".")  # pathlib's suffix: a dot inside the name, not first, not last
        stem = name[:dot] if 0 < dot < len(name) - 1 else name
        out.append(stem + ".txt" if folder == "." else os.path.join(folder, stem + ".txt"))
    return out


class LabelRules:
    """:func:`label_path_for` and :func:`label_path_disagreement` of many images, each rule worked out once
    per folder (a path parse per folder, not about nine per image: a fifth of the scan's check of a small
    image); the same paths and warnings. Made anew for each pass over a data set (the rules read which
    folders exist)."""

    def __init__(self) -> None:
        self._folders: dict[str, tuple[str, str, str | None]] = {}

    def __call__(self, image: str | Path) -> tuple[Path, str | None]:
        """(the label file turboyolo reads, the warning :func:`label_path_disagreement` gives or None)."""
        text = os.fspath(image)
        head, name = os.path.split(text)
        folders = self._folders.get(head)
        if folders is None:
            probe = Path(head) / "x.jpg"
            darknet = str(darknet_label_path(probe).parent) if "images" in head else None
            folders = self._folders[head] = (str(label_path_for(probe).parent),
                                             str(pytorchyolo_label_path(probe).parent), darknet)
        chosen_folder, pytorchyolo_folder, darknet_folder = folders
        dot = name.rfind(".")  # pathlib's suffix: a dot inside the name, not first, not last
        label = (name[:dot] if 0 < dot < len(name) - 1 else name) + ".txt"
        chosen = label if chosen_folder == "." else os.path.join(chosen_folder, label)
        # Darknet's rule replaces the first "images" of the whole path: in the folder where it has one
        darknet = (label if darknet_folder == "." else os.path.join(darknet_folder, label)
                   ) if darknet_folder is not None else str(darknet_label_path(image))
        pytorchyolo = label if pytorchyolo_folder == "." else os.path.join(pytorchyolo_folder, label)
        notes = [f"{tool} would read {other}" for tool, other in (("Darknet", darknet),
                                                                  ("PyTorch-YOLOv3", pytorchyolo))
                 if other != chosen and os.path.isfile(other)]
        warning = f"labels for {image}: turboyolo reads {chosen}, but " + "; ".join(notes) if notes else None
        return Path(chosen), warning


def darknet_label_path(image: str | Path) -> Path:
    """Darknet's rule: the first ``images`` substring of the whole path -> ``labels``."""
    text = str(image)
    text = text.replace("images", "labels", 1)
    return Path(text).with_suffix(".txt")


def pytorchyolo_label_path(image: str | Path) -> Path:
    """PyTorch-YOLOv3's rule: the last ``images`` substring of the folder name -> ``labels``."""
    image = Path(image)
    folder = str(image.parent)
    if "images" in folder:
        head, tail = folder.rsplit("images", 1)
        folder = head + "labels" + tail
    return Path(folder) / (image.stem + ".txt")


def label_path_disagreement(image: str | Path, chosen: Path | None = None) -> str | None:
    """A warning when Darknet's or PyTorch-YOLOv3's rule finds a different existing label file."""
    chosen = chosen or label_path_for(image)
    notes = []
    others = (("Darknet", darknet_label_path(image)), ("PyTorch-YOLOv3", pytorchyolo_label_path(image)))
    for tool, other in others:
        if other != chosen and other.is_file():
            notes.append(f"{tool} would read {other}")
    if not notes:
        return None
    return f"labels for {image}: turboyolo reads {chosen}, but " + "; ".join(notes)


# the image sets a data set names: its two splits and the images waiting for labels
SPLITS = ("unlabeled", "train", "val")


def split_images(data: str | Path, split: str) -> list[Path]:
    """Images of ``split``: ``train``/``val`` from the data file, ``unlabeled`` from its ``unlabeled``
    key (data.yaml ``unlabeled: folder``, .data ``unlabeled = list``) or, for an image folder, the folder."""
    images = [image for source in split_sources(data, split) for image in list_images(source)]
    if not images:
        raise DataError(f"{data}: the {split} split has no images")
    return images


def split_folders(data: str | Path, split: str) -> list[Path]:
    """The image folders :func:`split_images` walks."""
    return [source for source in split_sources(data, split) if Path(source).is_dir()]


def split_sources(data: str | Path, split: str) -> list[Path]:
    """The sources (folders, list files, images) of ``split`` (see :func:`split_images`)."""
    if split not in SPLITS:
        raise ConfigError(f"--split must be one of {', '.join(SPLITS)}, got {split!r}")
    config = load_data_config(data)
    if split == "unlabeled":
        value = config.extra.get("unlabeled")
        if value is None:
            if Path(data).is_dir():
                sources = [Path(data)]
            else:
                raise ConfigError(
                    f"{data}: no `unlabeled` entry; add `unlabeled: <image folder>` or pass a folder"
                )
        else:
            items = value if isinstance(value, list) else [value]
            if not all(isinstance(v, str) and v.strip() for v in items):  # '' would be the whole data set
                raise ConfigError(f"{data}: `unlabeled` must be an image folder or list file (or a list of "
                                  f"them), not {value!r}")
            sources = [resolve(str(v), config.root) for v in items]
    else:
        sources = config.split(split)
    return sources

"""Options declared once: a dataclass field carries its default, help text and flag spellings.

Every command's options are small dataclasses of :func:`option` fields, grouped by concern;
:func:`add_flags` generates one argparse group per dataclass and :func:`read_flags` reads the parsed values
back into the dataclasses, so a new option touches one place, its field. Flags the user did not pass stay
absent from the parsed namespace (``argparse.SUPPRESS``): the dataclass default is the only default, and
``turboyolo train --resume`` knows which values were given.

The options several commands share are declared here, once each, with one help text: what a command
reads (:class:`InputArgs`: ``--cfg``, ``--weights``, ``--data``, added by :func:`add_input_flags`),
``--img-size`` (:func:`img_size_option`), ``--device`` (:func:`device_option`), ``--amp``, where a command
writes (:class:`RunDirArgs`: ``--project``, ``--name``, ``--exist-ok``), the caps of every detector's NMS
(``--max-det``, ``--max-candidates``: :func:`max_det_option`, :func:`max_candidates_option`), as are the
detection thresholds every detector entry point defaults to (:data:`CONF_THRES`, :data:`NMS_THRES`:
Darknet's ``detector test`` values) and the caps' defaults (:data:`MAX_DET`, :data:`MAX_CANDIDATES`, as
COCO and Ultralytics).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

from turboyolo.errors import FlagError
from turboyolo.rundir import next_run_dir

CONF_THRES = 0.25  # Darknet's -thresh of `darknet detector test`
NMS_THRES = 0.45  # Darknet's nms of `darknet detector test`
MAX_DET = 300  # detections kept per image after NMS (COCO's maxDets, Ultralytics' max_det)
MAX_CANDIDATES = 30000  # boxes per image NMS may examine, the best-scoring first (Ultralytics' max_nms)


def option(default: Any, help: str, *flags: str, shortcuts: dict[str, Any] | None = None,
           **argparse_kwargs: Any):
    """A config field with its help text and flag spellings (default: ``--<name with hyphens>``).

    ``shortcuts``: extra flags that take no value and set the field to theirs (``--cos-lr``: cosine).
    A ``default`` of :data:`dataclasses.MISSING` makes the field required (no default).
    """
    metadata = {"help": help, "flags": flags, "argparse": argparse_kwargs, "shortcuts": shortcuts or {}}
    if isinstance(default, list | dict | set):
        return field(default_factory=lambda: type(default)(default), metadata=metadata)
    return field(default=default, metadata=metadata)


RECTANGLE_COMMANDS = ("detect", "label", "export", "anchors")  # the commands whose --img-size may be W H


def img_size_option(default_is: str = "", default: int | None = None, rectangle: bool = False):
    """``--img-size``, the same flag for every command: the network's input side in pixels; with
    ``rectangle`` also a width and a height (read with :func:`img_size_pair`). ``default_is`` says what
    ``None`` means for this command (``the cfg's``)."""
    text = f"network input size in pixels: S, or W H ({', '.join(RECTANGLE_COMMANDS)})" + (
        f" (default: {default_is})" if default is None else "")
    return option(default, text, "--img-size", type=int, **({"nargs": "+"} if rectangle else {}))


def check_img_size(value: int | None, flag: str = "--img-size") -> None:
    """A square input side given to a command that trains or evaluates: a multiple of 32, or ``None``."""
    require(value is None or (value >= 32 and value % 32 == 0),
            f"{flag} must be a multiple of 32, got {value}")


def output_file_option(default_is: str):
    """``-o``/``--output``: the one file a command writes (``default_is``: what it writes without it)."""
    return option(None, f"file to write (default: {default_is})", "-o", "--output")


def overwrite_option():
    """``--overwrite``: replace the ``-o`` file when it exists (an input is never replaced)."""
    return option(False, "replace the -o file if it exists (never one of the inputs)", action="store_true")


def max_det_option():
    """``--max-det``: detections kept per image after NMS, the best-scoring (detect, label, test)."""
    return option(MAX_DET, "detections kept per image after NMS, the best-scoring (test: AP sees these)",
                  type=int)


def max_candidates_option():
    """``--max-candidates``: boxes x classes per image that NMS examines (detect, label, test)."""
    return option(MAX_CANDIDATES, "boxes x classes per image that NMS examines, the best-scoring first",
                  type=int)


def device_option(default: str = "auto"):
    """``--device``, the same for every command (:func:`turboyolo.devices.resolve_device`)."""
    return option(default, "cpu, cuda, cuda:N, a GPU index N, mps, or auto (CUDA when present)")


def amp_option():
    """``--amp``: mixed precision (:func:`turboyolo.devices.amp_dtype_for`)."""
    from turboyolo.devices import AMP_CHOICES  # torch: only for the commands that take --amp

    return option("auto", "mixed precision (auto: bf16 or fp16 on CUDA, off on CPU)", choices=AMP_CHOICES)


def require(ok: bool, message: str) -> None:
    """Raise :class:`FlagError` with ``message`` (which names the flag) unless ``ok``."""
    if not ok:
        raise FlagError(message)


def img_size_pair(value: int | Sequence[int] | None) -> tuple[int, int] | None:
    """``--img-size S`` or ``--img-size W H`` (an int, or a list of one or two) -> (width, height)."""
    if value is None:
        return None
    values = [value] if isinstance(value, int) else list(value)
    require(len(values) in (1, 2), "--img-size takes one size or a width and a height")
    width, height = int(values[0]), int(values[-1])
    require(width > 0 and height > 0, f"--img-size must be positive, got {width}x{height}")
    return width, height


def project_option(default: str | None = None):
    """``--project`` (alias ``--logdir``, PyTorch-YOLOv3's): the parent folder of run directories."""
    return option(default, "parent folder of run directories" + (" (default: runs/<command>)" if default
                                                                   is None else ""), "--project", "--logdir")


def run_name_option():
    """``--name``: the run directory's name under ``--project``."""
    return option("exp", "run directory name (exp, exp2, ... when taken)")


def exist_ok_option():
    """``--exist-ok``: write into ``<project>/<name>`` even when it exists."""
    return option(False, "reuse <project>/<name> if it exists", action="store_true")


@dataclass
class RunDirArgs:
    """Where the command writes: a fresh ``<project>/<name>`` (exp, exp2, ... when taken)."""

    project: str | None = project_option()
    name: str = run_name_option()
    exist_ok: bool = exist_ok_option()

    def make(self, command: str) -> Path:
        """Create the run directory (``runs/<command>/exp...`` unless ``project`` says otherwise)."""
        return next_run_dir(self.project or f"runs/{command}", self.name, self.exist_ok)


@dataclass
class InputArgs:
    """What the command reads: the network, its weights, the data set."""

    cfg: str | None = option(None, "Darknet .cfg of the network (train also takes an architecture name "
                             "such as yolov3-tiny)", "-m", "--cfg", "--model", metavar="CFG")
    weights: str | None = option(None, "Darknet .weights, a turboyolo checkpoint (.pt) or a pinned asset "
                                 "name (yolov3-tiny)", "-w", "--weights", "--pretrained-weights",
                                 metavar="WEIGHTS")
    data: str | None = option(None, "the data set: a Darknet .data file, a data.yaml or an image folder",
                              "-d", "--data", metavar="DATA")


def add_input_flags(parser: argparse.ArgumentParser, *names: str, required: Sequence[str] = ()) -> None:
    """The :class:`InputArgs` flags ``names`` (``"cfg", "weights", "data"``) of a command, ``required``
    among them; each one not passed reads as ``None`` (``args.cfg``)."""
    section = parser.add_argument_group("inputs", (InputArgs.__doc__ or "").strip())
    for item in fields(InputArgs):
        if item.name in names:
            _add_field(section, item, required=item.name in required)
    parser.set_defaults(**dict.fromkeys(names))


def add_flags(parser: argparse.ArgumentParser, groups: Mapping[str, type]) -> None:
    """The flags of every field of ``groups`` (name -> dataclass), one argument group per dataclass.

    Defaults are ``argparse.SUPPRESS``: a flag the user did not pass is absent from the namespace.
    """
    for group_name, kind in groups.items():
        section = parser.add_argument_group(group_name.removesuffix("_args"), (kind.__doc__ or "").strip())
        for item in fields(kind):
            if "help" in item.metadata:  # else not an option (set by the program, not a flag)
                _add_field(section, item)


def _add_field(section, item, required: bool = False) -> None:
    """The flag (and shortcut flags) of one :func:`option` field."""
    meta = item.metadata
    flags = meta["flags"] or (f"--{item.name.replace('_', '-')}",)
    kwargs = dict(meta["argparse"])
    if "action" not in kwargs and "choices" not in kwargs and "metavar" not in kwargs:
        kwargs["metavar"] = max(flags, key=len).lstrip("-").replace("-", "_").upper()
    default = item.default if item.default is not MISSING else None
    shown = " ".join(map(str, default)) if isinstance(default, tuple) else default
    help_text = meta["help"] + ("" if default is None or isinstance(default, bool)
                                else f" (default: {shown})")
    help_text = help_text.replace("%", "%%").replace("%%%%", "%%")  # a bare % is argparse's
    section.add_argument(*flags, dest=item.name, default=argparse.SUPPRESS, help=help_text,
                         **({"required": True} if required else {}), **kwargs)
    for flag, value in meta["shortcuts"].items():
        section.add_argument(flag, dest=item.name, action="store_const", const=value,
                             default=argparse.SUPPRESS, help=f"= {flags[0]} {value}")


def read_flags(args: argparse.Namespace, groups: Mapping[str, type]) -> dict[str, Any]:
    """The groups filled from parsed flags: name -> dataclass instance (its defaults where a flag was
    not passed)."""
    return {name: kind(**{item.name: getattr(args, item.name) for item in fields(kind)
                          if hasattr(args, item.name)})
            for name, kind in groups.items()}


# Flags with one meaning across the commands that a command without that meaning refuses, saying which
# of its own flags the user wants (YOLOv5's detect.py calls its NMS IoU --iou-thres).
REFUSED = {"--iou-thres": "is the IoU a detection needs to match a ground truth (turboyolo test, train); "
                          "the IoU of NMS is --nms-thres"}


def refuse_flag(parser: argparse.ArgumentParser, flag: str) -> None:
    """A flag this command does not take because it means something else elsewhere: passing it stops
    the command with :data:`REFUSED`'s message (hidden from ``-h``)."""
    message = REFUSED[flag]

    class Refused(argparse.Action):
        def __call__(self, parser, namespace, values, option_string=None):
            parser.error(f"{option_string}: {message}")

    parser.add_argument(flag, nargs="?", action=Refused, default=argparse.SUPPRESS, help=argparse.SUPPRESS)

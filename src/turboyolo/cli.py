"""The ``turboyolo`` console script: one parser, one subcommand per module in ``commands/``.

Flag convention for every command: hyphenated long flags, each also accepted in its underscore
spelling (``--conf-thres`` = ``--conf_thres``), so PyTorch-YOLOv3 users' command lines work.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import sys

from turboyolo import __version__
from turboyolo.errors import TurboYoloError, printable

# (subcommand, module under turboyolo.commands, one-line help). A command's module is imported only when
# that command runs (or asks for -h), so `turboyolo -h` and `turboyolo fetch` do not pay for torch.
COMMANDS: list[tuple[str, str, str]] = [
    ("detect", "detect", "run a model on images and save drawings, YOLO labels and COCO json"),
    ("fetch", "fetch", "download a pinned asset (weights, sample data) into the cache"),
    ("cfg", "cfg", "write a Darknet .cfg for yolov3 / yolov3-tiny / yolov3-spp with N classes"),
    ("demo", "demo", "the main job on real sample data (what `make demo` runs)"),
    ("train", "train", "train a model from a Darknet .cfg on a data set (PyTorch-YOLOv3's flags work)"),
    ("test", "test", "evaluate weights or a checkpoint on a data split (mAP@0.5, mAP@0.5:0.95, per class)"),
    ("anchors", "anchors", "fit anchors to a data set's boxes (k-means, 1 - IoU) and show their recall"),
    ("export", "export", "export a network to ONNX (raw, decoded or with NMS), checked with onnxruntime"),
    ("label", "label", "auto-label images without labels from a model's detections, with a review list"),
    ("review", "review", "check and correct labels in the browser (model-made first), saved as reviewed"),
    ("convert", "convert", "import Pascal VOC XML or COCO JSON labels into YOLO format"),
    ("prepare", "prepare", "decode every image once into the prepared cache (pre-resized uint8)"),
    ("bench", "bench", "measure the data pipeline: images/s and per core, cold and warm, hand-off"),
    ("doctor", "doctor", "measure every stage on your data, name the bottleneck, suggest settings"),
]


class FlagParser(argparse.ArgumentParser):
    """ArgumentParser that also accepts the underscore spelling of every hyphenated long flag."""

    def add_argument(self, *names, **kwargs):  # type: ignore[override]
        return super().add_argument(*names, *underscore_aliases(names), **kwargs)

    def add_argument_group(self, *args, **kwargs):
        group = super().add_argument_group(*args, **kwargs)
        plain = group.add_argument
        group.add_argument = lambda *names, **kw: plain(*names, *underscore_aliases(names), **kw)
        return group


def underscore_aliases(names) -> list[str]:
    """``--conf-thres`` -> ``[--conf_thres]`` (the spellings not already among ``names``)."""
    long = [name for name in names if name.startswith("--") and "-" in name[2:]]
    aliases = ["--" + name[2:].replace("-", "_") for name in long]
    return [alias for alias in aliases if alias not in names]


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; with ``only``, the flags of that command alone (the others are listed, not
    imported)."""
    parser = FlagParser(prog="turboyolo", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"turboyolo {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=FlagParser)
    for name, module_name, help_text in COMMANDS:
        sub = subparsers.add_parser(name, help=help_text, description=help_text)
        if only is None or name == only:
            module = importlib.import_module(f"turboyolo.commands.{module_name}")
            module.add_arguments(sub)
            sub.set_defaults(run=module.run)
    return parser


def _tolerant_streams() -> None:
    """Print file names that are not valid UTF-8 with escapes instead of dying on UnicodeEncodeError."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure") and getattr(stream, "errors", "") == "strict":
            try:
                stream.reconfigure(errors="backslashreplace")
            except (ValueError, OSError):  # a stream that cannot change (closed, detached)
                pass


_REFUSED_WRITES = (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.ENOSPC, errno.EDQUOT)


def main(argv: list[str] | None = None) -> int:
    _tolerant_streams()
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(only=next((arg for arg in argv if not arg.startswith("-")), ""))
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        return 2
    try:
        result = args.run(args)
    except TurboYoloError as err:
        print(f"turboyolo {args.command}: error: {printable(err)}", file=sys.stderr)
        return 1
    except OSError as err:  # a writer without its own check met a folder that refuses files
        if err.errno not in _REFUSED_WRITES or not err.filename:
            raise
        print(f"turboyolo {args.command}: error: cannot write {printable(err.filename)} ({err.strerror}): "
              "choose another output folder or make this one writable (or free space)", file=sys.stderr)
        return 1
    except KeyboardInterrupt as err:  # training says where it saved (TrainingInterrupted)
        detail = f": {printable(err)}" if str(err) else ""
        print(f"turboyolo {args.command}: interrupted{detail}", file=sys.stderr)
        return 130
    return int(result or 0)

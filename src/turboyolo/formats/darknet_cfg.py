"""Darknet ``.cfg`` <-> typed, frozen specs.

A ``.cfg`` is a list of ``[section]`` blocks of ``key=value`` lines. ``[net]`` becomes a :class:`NetSpec`;
every other block becomes one layer spec. Strings become numbers here and nowhere else; every error
names ``file:line``. The layer and key set is that of AlexeyAB Darknet's yolov3, yolov4, yolov4-tiny,
yolov4-csp and yolov7-tiny cfgs. Keys fall in four groups:

- implemented: typed fields of the specs below;
- training-only (:data:`TRAINING_ONLY_KEYS`): Darknet training settings turboyolo's trainer does not
  reproduce; kept in ``extra`` (written back); ``turboyolo train`` prints them with the reason
  (:func:`training_only_notes`), inference ignores them silently;
- unsupported (:data:`UNSUPPORTED_KEYS`): they would change the network's outputs and are not computed
  here: errors naming the key and the line;
- anything else: kept in ``extra`` and warned once as unknown.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from turboyolo.errors import ConfigError
from turboyolo.formats.text import read_text

ACTIVATIONS = ("leaky", "linear", "mish", "logistic", "swish", "relu")
IOU_LOSSES = ("mse", "iou", "giou", "diou", "ciou")  # Darknet's [yolo] iou_loss values
NMS_KINDS = ("default", "greedynms", "diounms")  # Darknet's [yolo] nms_kind values


@dataclass(frozen=True)
class NetSpec:
    """``[net]``: input size, batch schedule, optimiser and augmentation ranges (Darknet defaults)."""

    batch: int = 1
    subdivisions: int = 1
    width: int = 416
    height: int = 416
    channels: int = 3
    momentum: float = 0.9
    decay: float = 0.0001
    angle: float = 0.0
    saturation: float = 1.0
    exposure: float = 1.0
    hue: float = 0.0
    mosaic: float | None = None  # AlexeyAB's mosaic=1: a 4-image mosaic per training sample; None: not given
    learning_rate: float = 0.001
    burn_in: int = 0
    power: float = 4.0
    max_batches: int = 0
    policy: str = "constant"
    steps: tuple[int, ...] = ()
    scales: tuple[float, ...] = ()
    optimizer: str = "sgd"  # "sgd" | "adam"; Darknet's adam=1 and PyTorch-YOLOv3's optimizer= both map here
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-7
    extra: tuple[tuple[str, str], ...] = ()
    line: int = field(default=0, compare=False)


@dataclass(frozen=True)
class ConvSpec:
    filters: int
    size: int
    stride: int = 1
    padding: int = 0
    batch_normalize: bool = False
    activation: str = "logistic"
    extra: tuple[tuple[str, str], ...] = ()
    line: int = field(default=0, compare=False)


@dataclass(frozen=True)
class MaxPoolSpec:
    """Darknet max-pool: out = (in + padding - size) // stride + 1, window offset -padding // 2.

    Out-of-bounds positions are ignored (never zeros), which matters for size=2 stride=1. With
    ``maxpool_depth`` the pool runs across channels instead: output channel ``g`` (of
    ``out_channels``) is the maximum of input channels ``g, g + out_channels, ...``; H and W are kept.
    """

    size: int
    stride: int
    padding: int
    maxpool_depth: bool = False
    out_channels: int = 1
    extra: tuple[tuple[str, str], ...] = ()
    line: int = field(default=0, compare=False)


@dataclass(frozen=True)
class UpsampleSpec:
    stride: int = 2
    extra: tuple[tuple[str, str], ...] = ()
    line: int = field(default=0, compare=False)


@dataclass(frozen=True)
class RouteSpec:
    """Concatenate earlier outputs on channels; ``layers`` as written (negative = relative).

    ``groups``/``group_id`` (CSP splits): of each input only channel slice ``group_id`` of ``groups``
    equal slices is taken.
    """

    layers: tuple[int, ...]
    groups: int = 1
    group_id: int = 0
    extra: tuple[tuple[str, str], ...] = ()
    line: int = field(default=0, compare=False)


@dataclass(frozen=True)
class ShortcutSpec:
    """Add an earlier output (``from_`` as written; negative = relative) to the previous one."""

    from_: int
    activation: str = "linear"
    extra: tuple[tuple[str, str], ...] = ()
    line: int = field(default=0, compare=False)


@dataclass(frozen=True)
class YoloSpec:
    """A ``[yolo]`` head. The keys after ``random`` are AlexeyAB Darknet's; ``None`` means the cfg does
    not give the key (Darknet's default applies: :data:`YOLO_DEFAULTS`), so a written cfg keeps exactly
    the keys it was read with.
    """

    mask: tuple[int, ...]
    anchors: tuple[tuple[float, float], ...]
    classes: int
    num: int
    jitter: float = 0.2
    ignore_thresh: float = 0.5
    truth_thresh: float = 1.0
    random: bool = False
    scale_x_y: float | None = None  # x, y = sigmoid * scale_x_y - (scale_x_y - 1) / 2 (+ cell)
    new_coords: bool | None = None  # YOLOv7 coordinates: no sigmoid here, w = (2 t)^2 * anchor
    iou_thresh: float | None = None  # also assign every anchor whose shape IoU with a box exceeds this
    iou_loss: str | None = None  # mse | iou | giou | diou | ciou
    iou_normalizer: float | None = None
    obj_normalizer: float | None = None
    cls_normalizer: float | None = None
    max_delta: float | None = None  # clip of each box-coordinate gradient (IoU losses)
    nms_kind: str | None = None  # default | greedynms | diounms
    beta_nms: float | None = None  # DIoU-NMS exponent
    extra: tuple[tuple[str, str], ...] = ()
    line: int = field(default=0, compare=False)


LayerSpec = ConvSpec | MaxPoolSpec | UpsampleSpec | RouteSpec | ShortcutSpec | YoloSpec

SECTION_OF = {
    ConvSpec: "convolutional",
    MaxPoolSpec: "maxpool",
    UpsampleSpec: "upsample",
    RouteSpec: "route",
    ShortcutSpec: "shortcut",
    YoloSpec: "yolo",
}


# What Darknet uses when a [yolo] key of YoloSpec is absent. One exception is documented in
# turboyolo.train.loss: without iou_normalizer the MSE box term is pjreddie's (weight 1), as in turboyolo 0.1.
YOLO_DEFAULTS: dict[str, Any] = {
    "scale_x_y": 1.0,
    "new_coords": False,
    "iou_thresh": 1.0,
    "iou_loss": "mse",
    "iou_normalizer": 0.75,
    "obj_normalizer": 1.0,
    "cls_normalizer": 1.0,
    "max_delta": float("inf"),
    "nms_kind": "default",
    "beta_nms": 0.6,
}
YOLO_OPTIONAL = tuple(YOLO_DEFAULTS)


@dataclass(frozen=True)
class ModelSpec:
    net: NetSpec
    layers: tuple[LayerSpec, ...]
    source: str = field(default="<memory>", compare=False)

    @property
    def yolo_layers(self) -> list[tuple[int, YoloSpec]]:
        return [(i, layer) for i, layer in enumerate(self.layers) if isinstance(layer, YoloSpec)]

    @property
    def num_classes(self) -> int:
        yolos = self.yolo_layers
        return yolos[0][1].classes if yolos else 0

    def with_net(self, **changes: Any) -> ModelSpec:
        return replace(self, net=replace(self.net, **changes))


# Keys that change the network's numbers and that this implementation does not compute: errors.
UNSUPPORTED_KEYS = {
    "convolutional": {"groups", "binary", "xnor", "dilation", "antialiasing", "share_index", "flipped"},
    "route": set(),
    "shortcut": {"weights_type", "weights_normalization"},
    "maxpool": {"antialiasing", "stride_x", "stride_y"},
    "yolo": {"map"},
    "upsample": {"scale"},
    "net": set(),
}
# Darknet training settings turboyolo's trainer does not reproduce: kept (and written back), warned once.
TRAINING_ONLY_KEYS: dict[str, dict[str, str]] = {
    "net": {
        "cutmix": "Darknet's CutMix",
        "mixup": "Darknet's MixUp; turboyolo's is --mixup P",
        "blur": "Darknet's blur augmentation",
        "gaussian_noise": "Darknet's noise augmentation",
        "mosaic_bound": "Darknet's mosaic",
        "ema_alpha": "Darknet's weight EMA; turboyolo's is --ema / --ema-decay",
        "dynamic_minibatch": "Darknet's batch growth with the input size",
        "label_smooth_eps": "Darknet's label smoothing",
        "adversarial_lr": "Darknet's adversarial training",
    },
    "yolo": {
        "resize": "the range of Darknet's random resize (turboyolo: --aug-scale)",
        "objectness_smooth": "Darknet's IoU-valued objectness targets (turboyolo: --obj-iou)",
        "focal_loss": "Darknet's focal loss",
        "counters_per_class": "Darknet's class balancing",
        "iou_thresh_kind": "the overlap Darknet's iou_thresh assignment uses (turboyolo: IoU)",
        "delta_normalizer": "a Darknet option its [yolo] layer does not use",
    },
}
# The value that switches a training-only key off (Darknet's default): such a key is not warned about.
TRAINING_ONLY_OFF = {"resize": 1.0, "delta_normalizer": 1.0, "iou_thresh_kind": "iou"}
# Keys read from ``extra`` elsewhere or implemented by construction: kept without a warning.
QUIET_KEYS = {
    "net": {"flip", "step", "scale", "letter_box"},  # letter_box: turboyolo always letterboxes
    "route": {"stream", "wait_stream"},
    "yolo": {"label_smooth_eps"},  # the trainer's --label-smoothing default (train/defaults.py)
}
MIN_SIDE, MAX_SIDE = 32, 16384  # [net] width / height in pixels: below, no detection head has a cell

UNSUPPORTED_SECTIONS_HINT = (
    "supported: [net], [convolutional], [maxpool], [upsample], [route], [shortcut], [yolo]"
)


class _Section:
    """One ``[name]`` block while parsing: values are consumed as they are read."""

    def __init__(self, name: str, line: int, path: str):
        self.name, self.line, self.path = name, line, path
        self.values: dict[str, tuple[str, int]] = {}

    def where(self, key: str | None = None) -> str:
        line = self.values[key][1] if key in self.values else self.line
        return f"{self.path}:{line}"

    def take(self, key: str, convert: Callable[[str], Any], default: Any = None, required: bool = False):
        if key not in self.values:
            if required:
                raise ConfigError(f"{self.where()}: [{self.name}] needs `{key}=`; add it")
            return default
        raw, line = self.values.pop(key)
        try:
            value = convert(raw)
        except (ValueError, TypeError, OverflowError) as err:
            raise ConfigError(f"{self.path}:{line}: `{key}={raw}` is not a valid value ({err})") from err
        if any(isinstance(v, float) and not math.isfinite(v) for v in
               (value if isinstance(value, tuple) else (value,))):
            raise ConfigError(f"{self.path}:{line}: `{key}={raw}` is not a finite number; fix it")
        return value

    def leftovers(self, warned: set[str]) -> tuple[tuple[str, str], ...]:
        for key in self.values:
            if key in UNSUPPORTED_KEYS.get(self.name, ()):
                raise ConfigError(
                    f"{self.where(key)}: `{key}` in [{self.name}] changes the network's outputs and is not "
                    "implemented by turboyolo; remove it or use a cfg without it"
                )
        extra = tuple((k, raw) for k, (raw, _) in self.values.items())
        known = QUIET_KEYS.get(self.name, set()) | set(TRAINING_ONLY_KEYS.get(self.name, ()))
        for key, _ in extra:
            tag = f"{self.name}.{key}"
            if tag in warned or key in known:  # training-only keys: training_only_notes() at training
                continue
            warned.add(tag)
            warnings.warn(
                f"{self.where(key)}: unknown key `{key}` in [{self.name}] kept but ignored", stacklevel=4
            )
        return extra


def _is_off(key: str, raw: str) -> bool:
    """A training-only key set to its Darknet default ("0" for switches): nothing to warn about."""
    off = TRAINING_ONLY_OFF.get(key, 0.0)
    try:
        return float(raw) == off if not isinstance(off, str) else raw.strip().lower() == off
    except ValueError:
        return False


def _int(text: str) -> int:
    value = float(text)
    if value != int(value):
        raise ValueError("expected an integer")
    return int(value)


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _ints(text: str) -> tuple[int, ...]:
    return tuple(_int(part) for part in text.split(",") if part.strip())


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(part) for part in text.split(",") if part.strip())


def _bool(text: str) -> bool:
    return _int(text) != 0


def _activation(text: str) -> str:
    text = text.strip()
    if text not in ACTIVATIONS:
        raise ValueError(f"unsupported activation; use one of {', '.join(ACTIVATIONS)}")
    return text


def _read_sections(text: str, path: str) -> list[_Section]:
    sections: list[_Section] = []
    for number, raw_line in enumerate(text.splitlines(), start=1):
        line = raw_line.split("#", 1)[0].split(";", 1)[0].strip()
        if not line:
            continue
        if line.startswith("["):
            if not line.endswith("]") or len(line) < 3:
                raise ConfigError(f"{path}:{number}: malformed section header {raw_line.strip()!r}")
            sections.append(_Section(line[1:-1].strip().lower(), number, path))
            continue
        if "=" not in line:
            raise ConfigError(f"{path}:{number}: expected `key=value`, got {raw_line.strip()!r}")
        if not sections:
            raise ConfigError(f"{path}:{number}: `{line}` before the first [section]")
        key, value = (part.strip() for part in line.split("=", 1))
        if not key or not value:
            raise ConfigError(f"{path}:{number}: empty key or value in {raw_line.strip()!r}")
        if key in sections[-1].values:
            first = sections[-1].values[key][1]
            warnings.warn(
                f"{path}:{number}: `{key}` given again in [{sections[-1].name}]; the first value "
                f"(line {first}) is used, as Darknet does",
                stacklevel=3,
            )
            continue
        sections[-1].values[key] = (value, number)
    return sections


def _net(sec: _Section, warned: set[str]) -> NetSpec:
    kw: dict[str, Any] = {}
    for f in fields(NetSpec):
        if f.name in ("extra", "line", "optimizer", "steps", "scales", "policy", "b1", "b2", "eps"):
            continue
        convert = int if f.type == "int" else float
        value = sec.take(f.name, _int if convert is int else float)
        if value is not None:
            kw[f.name] = value
    kw["policy"] = sec.take("policy", str.strip, "constant")
    kw["steps"] = sec.take("steps", _ints, ())
    kw["scales"] = sec.take("scales", _floats, ())
    adam = sec.take("adam", _bool, False)
    optimizer = sec.take("optimizer", lambda s: s.strip().lower(), "adam" if adam else "sgd")
    if optimizer not in ("sgd", "adam"):
        raise ConfigError(f"{sec.where()}: optimizer={optimizer} is not supported; use sgd or adam")
    kw["optimizer"] = optimizer
    kw["b1"] = sec.take("B1", float, 0.9)
    kw["b2"] = sec.take("B2", float, 0.999)
    kw["eps"] = sec.take("eps", float, 1e-7)
    if kw["policy"] == "steps" and len(kw["steps"]) != len(kw["scales"]):
        raise ConfigError(f"{sec.where('steps')}: {len(kw['steps'])} steps but {len(kw['scales'])} scales")
    if kw.get("subdivisions", 1) < 1 or kw.get("batch", 1) < 1:
        raise ConfigError(f"{sec.where()}: batch and subdivisions must be >= 1")
    for side in ("width", "height"):
        if not MIN_SIDE <= kw.get(side, MIN_SIDE) <= MAX_SIDE:
            raise ConfigError(f"{sec.where()}: {side}={kw[side]} is outside {MIN_SIDE}..{MAX_SIDE} pixels")
    for key in ("max_batches", "learning_rate", "burn_in", "momentum", "decay"):
        if kw.get(key, 0) < 0:
            raise ConfigError(f"{sec.where(key)}: {key}={kw[key]} must be >= 0")
    return NetSpec(**kw, extra=sec.leftovers(warned), line=sec.line)


def _conv(sec: _Section, warned: set[str]) -> ConvSpec:
    for key in ("size", "stride", "filters"):
        raw = sec.values.get(key, ("1", 0))[0]
        if _number(raw) is not None and _number(raw) < 1:
            raise ConfigError(f"{sec.where(key)}: {key}={raw} must be >= 1")
    size = sec.take("size", _int, 1)
    pad_flag = sec.take("pad", _bool, False)
    padding = sec.take("padding", _int, 0)
    groups = sec.values.get("groups")
    if groups is not None and _int(groups[0]) == 1:
        sec.values.pop("groups")
    return ConvSpec(
        filters=sec.take("filters", _int, required=True),
        size=size,
        stride=sec.take("stride", _int, 1),
        padding=size // 2 if pad_flag else padding,
        batch_normalize=sec.take("batch_normalize", _bool, False),
        activation=sec.take("activation", _activation, "logistic"),
        extra=sec.leftovers(warned),
        line=sec.line,
    )


def _maxpool(sec: _Section, warned: set[str]) -> MaxPoolSpec:
    stride = sec.take("stride", _int, 1)
    size = sec.take("size", _int, stride)
    padding = sec.take("padding", _int, size - 1)
    depth = sec.take("maxpool_depth", _bool, False)
    out_channels = sec.take("out_channels", _int, 1)
    if out_channels < 1:
        raise ConfigError(f"{sec.where('out_channels')}: out_channels must be >= 1")
    return MaxPoolSpec(
        size=size,
        stride=stride,
        padding=padding,
        maxpool_depth=depth,
        out_channels=out_channels,
        extra=sec.leftovers(warned),
        line=sec.line,
    )


def _route(sec: _Section, warned: set[str]) -> RouteSpec:
    layers = sec.take("layers", _ints, required=True)
    groups = sec.take("groups", _int, 1)
    group_id = sec.take("group_id", _int, 0)
    if groups < 1 or not 0 <= group_id < groups:
        raise ConfigError(
            f"{sec.where('groups')}: route groups={groups} group_id={group_id}: need groups >= 1 and "
            "0 <= group_id < groups"
        )
    return RouteSpec(
        layers=layers, groups=groups, group_id=group_id, extra=sec.leftovers(warned), line=sec.line
    )


def _choice(choices: tuple[str, ...]) -> Callable[[str], str]:
    def convert(text: str) -> str:
        text = text.strip().lower()
        if text not in choices:
            raise ValueError(f"use one of {', '.join(choices)}")
        return text

    return convert


def _yolo_options(sec: _Section) -> dict[str, Any]:
    """The AlexeyAB [yolo] keys of :class:`YoloSpec`; absent ones stay ``None``."""
    kinds: dict[str, Callable[[str], Any]] = {
        "scale_x_y": float,
        "new_coords": _bool,
        "iou_thresh": float,
        "iou_loss": _choice(IOU_LOSSES),
        "iou_normalizer": float,
        "obj_normalizer": float,
        "cls_normalizer": float,
        "max_delta": float,
        "nms_kind": _choice(NMS_KINDS),
        "beta_nms": float,
    }
    options = {key: sec.take(key, convert) for key, convert in kinds.items()}
    if options["scale_x_y"] is not None and options["scale_x_y"] <= 0:
        raise ConfigError(f"{sec.where('scale_x_y')}: scale_x_y must be > 0")
    if options["max_delta"] is not None and options["max_delta"] <= 0:
        raise ConfigError(f"{sec.where('max_delta')}: max_delta must be > 0")
    return options


def _yolo(sec: _Section, warned: set[str]) -> YoloSpec:
    flat = sec.take("anchors", _floats, ())
    if len(flat) % 2:
        raise ConfigError(f"{sec.where('anchors')}: anchors need an even count of numbers (w,h pairs)")
    anchors = tuple((flat[i], flat[i + 1]) for i in range(0, len(flat), 2))
    num = sec.take("num", _int, len(anchors))
    mask = sec.take("mask", _ints, tuple(range(num)))
    if num != len(anchors):
        raise ConfigError(f"{sec.where('num')}: num={num} but {len(anchors)} anchor pairs are given")
    if any(m < 0 or m >= num for m in mask):
        raise ConfigError(f"{sec.where('mask')}: mask indices must lie in 0..{num - 1}")
    return YoloSpec(
        mask=mask,
        anchors=anchors,
        classes=sec.take("classes", _int, 20),
        num=num,
        jitter=sec.take("jitter", float, 0.2),
        ignore_thresh=sec.take("ignore_thresh", float, 0.5),
        truth_thresh=sec.take("truth_thresh", float, 1.0),
        random=sec.take("random", _bool, False),
        **_yolo_options(sec),
        extra=sec.leftovers(warned),
        line=sec.line,
    )


def _shortcut(sec: _Section, warned: set[str]) -> ShortcutSpec:
    for key in ("alpha", "beta"):
        if key in sec.values and float(sec.values[key][0]) != 1.0:
            raise ConfigError(f"{sec.where(key)}: shortcut {key} != 1 is not implemented; remove it")
        sec.values.pop(key, None)
    return ShortcutSpec(
        from_=sec.take("from", _int, required=True),
        activation=sec.take("activation", _activation, "linear"),
        extra=sec.leftovers(warned),
        line=sec.line,
    )


def _build_layer(sec: _Section, warned: set[str]) -> LayerSpec:
    if sec.name in ("convolutional", "conv"):
        sec.name = "convolutional"
        return _conv(sec, warned)
    if sec.name in ("maxpool", "max"):
        sec.name = "maxpool"
        return _maxpool(sec, warned)
    if sec.name == "upsample":
        return UpsampleSpec(stride=sec.take("stride", _int, 2), extra=sec.leftovers(warned), line=sec.line)
    if sec.name == "route":
        return _route(sec, warned)
    if sec.name == "shortcut":
        return _shortcut(sec, warned)
    if sec.name == "yolo":
        return _yolo(sec, warned)
    raise ConfigError(f"{sec.where()}: section [{sec.name}] is not supported ({UNSUPPORTED_SECTIONS_HINT})")


def parse_cfg_text(text: str, path: str = "<string>") -> ModelSpec:
    sections = _read_sections(text, path)
    if not sections or sections[0].name not in ("net", "network"):
        raise ConfigError(f"{path}: a Darknet cfg starts with a [net] section; this one does not")
    warned: set[str] = set()
    net = _net(sections[0], warned)
    layers = tuple(_build_layer(sec, warned) for sec in sections[1:])
    spec = ModelSpec(net=net, layers=layers, source=path)
    validate(spec)
    return spec


def parse_cfg(path: str | Path) -> ModelSpec:
    path = Path(path)
    try:
        text = read_text(path)
    except FileNotFoundError as err:
        raise ConfigError(
            f"{path}: no such cfg file; give a Darknet .cfg or write one with `turboyolo cfg`"
        ) from err
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: cannot read as a text .cfg ({err})") from err
    return parse_cfg_text(text, str(path))


def parse_anchor_list(text: str, flag: str = "--anchors") -> tuple[tuple[float, float], ...]:
    """``'10,13, 16,30, ...'`` (a [yolo] ``anchors=`` value) -> ((10.0, 13.0), (16.0, 30.0), ...)."""
    try:
        values = [float(v) for v in str(text).replace(" ", "").split(",") if v]
    except ValueError as err:
        raise ConfigError(f"{flag} {text!r}: {err}") from None
    if not values or len(values) % 2 or min(values) <= 0:
        raise ConfigError(f"{flag} {text!r}: needs w,h pairs of positive numbers (an even count)")
    return tuple(zip(values[0::2], values[1::2]))


def training_only_notes(spec: ModelSpec) -> list[str]:
    """One line per Darknet training setting of ``spec`` that turboyolo's trainer does not reproduce
    (:data:`TRAINING_ONLY_KEYS`, switched on); ``turboyolo train`` prints them. Inference ignores them."""
    notes, seen = [], set()
    sections = [("net", spec.net)] + [(SECTION_OF[type(layer)], layer) for layer in spec.layers]
    for section, item in sections:
        reasons = TRAINING_ONLY_KEYS.get(section, {})
        for key, raw in item.extra:
            if key in reasons and not _is_off(key, raw) and (section, key) not in seen:
                seen.add((section, key))
                notes.append(
                    f"[{section}] {key}={raw} is a Darknet training setting turboyolo does not implement "
                    f"({reasons[key]}); ignored"
                )
    return notes


def resolve_index(ref: int, index: int) -> int:
    """Darknet layer references: negative = relative to ``index``, otherwise absolute."""
    return index + ref if ref < 0 else ref


def validate(spec: ModelSpec) -> None:
    """Structural checks that need the whole network: references, head filter counts, class counts."""
    where = spec.source
    classes = {layer.classes for _, layer in spec.yolo_layers}
    if len(classes) > 1:
        raise ConfigError(f"{where}: [yolo] layers disagree on classes ({sorted(classes)}); use one count")
    for index, layer in enumerate(spec.layers):
        refs = (
            layer.layers
            if isinstance(layer, RouteSpec)
            else (layer.from_,)
            if isinstance(layer, ShortcutSpec)
            else ()
        )
        for ref in refs:
            target = resolve_index(ref, index)
            if not 0 <= target < index:
                raise ConfigError(
                    f"{where}:{layer.line}: layer {index} refers to layer {target}, which is "
                    f"not an earlier layer"
                )
        if isinstance(layer, YoloSpec):
            prev = spec.layers[index - 1] if index else None
            want = len(layer.mask) * (layer.classes + 5)
            if not isinstance(prev, ConvSpec) or prev.filters != want:
                got = prev.filters if isinstance(prev, ConvSpec) else "no convolution"
                raise ConfigError(
                    f"{where}:{prev.line if prev else layer.line}: the convolution before [yolo] "
                    f"(line {layer.line}) must have filters={want} = {len(layer.mask)} anchors x "
                    f"({layer.classes} classes + 5), found {got}; fix filters= or classes="
                )


# ----------------------------------------------------------------------------------------------- writing


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, float):
        return str(int(value)) if value == int(value) else repr(value)
    if isinstance(value, tuple):
        return ",".join(_fmt(v) for v in value)
    return str(value)


def _net_lines(net: NetSpec) -> list[str]:
    lines = ["[net]"]
    for f in fields(NetSpec):
        if f.name in ("extra", "line", "optimizer", "b1", "b2", "eps"):
            continue
        value = getattr(net, f.name)
        if value == () or value is None:  # no steps/scales: Darknet reads a missing key as none, `steps=`
            continue  # is malformed; a key the cfg did not give (mosaic) stays absent
        lines.append(f"{f.name}={_fmt(value)}")
    if net.optimizer == "adam":
        lines += ["adam=1", f"B1={_fmt(net.b1)}", f"B2={_fmt(net.b2)}", f"eps={_fmt(net.eps)}"]
    return lines


def _layer_lines(layer: LayerSpec) -> list[str]:
    lines = [f"[{SECTION_OF[type(layer)]}]"]
    if isinstance(layer, ConvSpec):
        if layer.batch_normalize:
            lines.append("batch_normalize=1")
        lines += [f"filters={layer.filters}", f"size={layer.size}", f"stride={layer.stride}"]
        if layer.padding == layer.size // 2 and layer.size > 1:
            lines.append("pad=1")
        else:
            lines.append(f"padding={layer.padding}")
        lines.append(f"activation={layer.activation}")
    elif isinstance(layer, MaxPoolSpec):
        lines += [f"size={layer.size}", f"stride={layer.stride}"]
        if layer.padding != layer.size - 1:
            lines.append(f"padding={layer.padding}")
        if layer.maxpool_depth:
            lines += ["maxpool_depth=1", f"out_channels={layer.out_channels}"]
    elif isinstance(layer, UpsampleSpec):
        lines.append(f"stride={layer.stride}")
    elif isinstance(layer, RouteSpec):
        lines.append("layers=" + ", ".join(str(v) for v in layer.layers))
        if layer.groups != 1:
            lines += [f"groups={layer.groups}", f"group_id={layer.group_id}"]
    elif isinstance(layer, ShortcutSpec):
        lines += [f"from={layer.from_}", f"activation={layer.activation}"]
    elif isinstance(layer, YoloSpec):
        anchors = ",  ".join(f"{_fmt(w)},{_fmt(h)}" for w, h in layer.anchors)
        lines += [
            f"mask = {_fmt(layer.mask)}",
            f"anchors = {anchors}",
            f"classes={layer.classes}",
            f"num={layer.num}",
            f"jitter={_fmt(layer.jitter)}",
            f"ignore_thresh = {_fmt(layer.ignore_thresh)}",
            f"truth_thresh = {_fmt(layer.truth_thresh)}",
            f"random={int(layer.random)}",
        ]
        lines += [
            f"{key}={_fmt(getattr(layer, key))}" for key in YOLO_OPTIONAL if getattr(layer, key) is not None
        ]
    return lines


def format_cfg(spec: ModelSpec) -> str:
    blocks = [_net_lines(spec.net) + [f"{k}={v}" for k, v in spec.net.extra]]
    for layer in spec.layers:
        blocks.append(_layer_lines(layer) + [f"{k}={v}" for k, v in layer.extra])
    return "\n\n".join("\n".join(block) for block in blocks) + "\n"


def write_cfg(spec: ModelSpec, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(format_cfg(spec))
    return path

"""Darknet cfgs generated from the architecture (what create_custom_model.sh did by copying).

``make_spec("yolov3", num_classes=N)`` returns the :class:`ModelSpec` of Darknet's canonical network
with N classes; :func:`turboyolo.formats.darknet_cfg.write_cfg` turns it into a ``.cfg``. The YOLOv3
family is here; yolov4-tiny, yolov4, yolov4-csp and yolov7-tiny are in :mod:`turboyolo.model.zoo_alexeyab`.
"""

from __future__ import annotations

from dataclasses import replace

from turboyolo.errors import ConfigError
from turboyolo.formats.darknet_cfg import (
    ConvSpec,
    LayerSpec,
    MaxPoolSpec,
    ModelSpec,
    NetSpec,
    RouteSpec,
    ShortcutSpec,
    UpsampleSpec,
    YoloSpec,
)
from turboyolo.model.zoo_alexeyab import FAMILY as V4_FAMILY
from turboyolo.model.zoo_alexeyab import conv

COCO_ANCHORS = (
    (10, 13),
    (16, 30),
    (33, 23),
    (30, 61),
    (62, 45),
    (59, 119),
    (116, 90),
    (156, 198),
    (373, 326),
)
TINY_ANCHORS = ((10, 14), (23, 27), (37, 58), (81, 82), (135, 169), (344, 319))
ARCHITECTURES = ("yolov3", "yolov3-tiny", "yolov3-spp", *V4_FAMILY)
# The layer count N of each architecture's pretrained-backbone file ``<name>.conv.N`` (AlexeyAB's
# README: darknet53.conv.74, yolov3-tiny.conv.11, yolov4-tiny.conv.29, yolov4.conv.137,
# yolov4-csp.conv.142); yolov7-tiny has no official one: 87 is everything before its heads.
BACKBONE_CUTS = {"yolov3": 74, "yolov3-spp": 74, "yolov3-tiny": 11}
BACKBONE_CUTS.update({name: arch.backbone_cut for name, arch in V4_FAMILY.items()})


def _head_conv(num_anchors: int, num_classes: int) -> ConvSpec:
    return conv(num_anchors * (num_classes + 5), 1, activation="linear")


def _yolo(mask, anchors, num_classes: int, tiny: bool) -> YoloSpec:
    return YoloSpec(
        mask=tuple(mask),
        anchors=tuple((float(w), float(h)) for w, h in anchors),
        classes=num_classes,
        num=len(anchors),
        jitter=0.3,
        ignore_thresh=0.7,
        truth_thresh=1.0,
        random=True,
    )


def _darknet53() -> list[LayerSpec]:
    layers: list[LayerSpec] = [conv(32, 3)]
    for filters, repeats in ((64, 1), (128, 2), (256, 8), (512, 8), (1024, 4)):
        layers.append(conv(filters, 3, stride=2))
        for _ in range(repeats):
            layers += [conv(filters // 2, 1), conv(filters, 3), ShortcutSpec(from_=-3, activation="linear")]
    return layers


def _spp() -> list[LayerSpec]:
    pool = [MaxPoolSpec(size=s, stride=1, padding=s - 1) for s in (5, 9, 13)]
    return [
        pool[0],
        RouteSpec((-2,)),
        pool[1],
        RouteSpec((-4,)),
        pool[2],
        RouteSpec((-1, -3, -5, -6)),
        conv(512, 1),
    ]


def _yolov3_layers(num_classes: int, spp: bool, anchors) -> list[LayerSpec]:
    layers = _darknet53()  # 75 layers; outputs 36 (stride 8) and 61 (stride 16) feed the necks
    first = [conv(512, 1), conv(1024, 3), conv(512, 1)]
    if spp:
        first += _spp()
    first += [conv(1024, 3), conv(512, 1), conv(1024, 3)]
    layers += first + [_head_conv(3, num_classes), _yolo((6, 7, 8), anchors, num_classes, False)]
    for filters, skip in ((256, 61), (128, 36)):
        layers += [RouteSpec((-4,)), conv(filters, 1), UpsampleSpec(2), RouteSpec((-1, skip))]
        layers += [conv(filters, 1), conv(filters * 2, 3)] * 3
        mask = (3, 4, 5) if filters == 256 else (0, 1, 2)
        layers += [_head_conv(3, num_classes), _yolo(mask, anchors, num_classes, False)]
    return layers


def _tiny_layers(num_classes: int, anchors) -> list[LayerSpec]:
    layers: list[LayerSpec] = []
    for filters in (16, 32, 64, 128, 256):
        layers += [conv(filters, 3), MaxPoolSpec(size=2, stride=2, padding=1)]
    layers += [conv(512, 3), MaxPoolSpec(size=2, stride=1, padding=1), conv(1024, 3)]
    layers += [
        conv(256, 1),
        conv(512, 3),
        _head_conv(3, num_classes),
        _yolo((3, 4, 5), anchors, num_classes, True),
    ]
    layers += [RouteSpec((-4,)), conv(128, 1), UpsampleSpec(2), RouteSpec((-1, 8)), conv(256, 3)]
    layers += [_head_conv(3, num_classes), _yolo((0, 1, 2), anchors, num_classes, True)]
    return layers


def make_spec(
    architecture: str,
    num_classes: int = 80,
    width: int | None = None,
    height: int | None = None,
    batch: int | None = None,
    subdivisions: int | None = None,
    learning_rate: float | None = None,
    anchors: tuple[tuple[float, float], ...] | None = None,
) -> ModelSpec:
    """The canonical Darknet network ``architecture`` for ``num_classes`` classes.

    ``None`` keeps the canonical cfg's value (YOLOv3 family: 416x416, batch 64, subdivisions 16,
    learning rate 0.001, as turboyolo always wrote them).
    """
    if architecture not in ARCHITECTURES:
        raise ConfigError(f"unknown architecture {architecture!r}; choose one of {', '.join(ARCHITECTURES)}")
    if num_classes < 1:
        raise ConfigError(f"--num-classes must be >= 1, got {num_classes}")
    if architecture in V4_FAMILY:
        return _v4_spec(architecture, num_classes, width, height, batch, subdivisions, learning_rate, anchors)
    width, height = width or 416, height or 416
    batch, subdivisions, learning_rate = batch or 64, subdivisions or 16, learning_rate or 0.001
    if width % 32 or height % 32:
        raise ConfigError(f"--width/--height must be multiples of 32, got {width}x{height}")
    tiny = architecture == "yolov3-tiny"
    default_anchors = TINY_ANCHORS if tiny else COCO_ANCHORS
    anchors = tuple(anchors) if anchors else default_anchors
    if len(anchors) != len(default_anchors):
        raise ConfigError(f"{architecture} needs {len(default_anchors)} anchors, got {len(anchors)}")
    layers = (
        _tiny_layers(num_classes, anchors)
        if tiny
        else _yolov3_layers(num_classes, architecture == "yolov3-spp", anchors)
    )
    net = NetSpec(
        batch=batch,
        subdivisions=subdivisions,
        width=width,
        height=height,
        channels=3,
        momentum=0.9,
        decay=0.0005,
        angle=0.0,
        saturation=1.5,
        exposure=1.5,
        hue=0.1,
        learning_rate=learning_rate,
        burn_in=1000,
        power=4.0,
        max_batches=500200,
        policy="steps",
        steps=(400000, 450000),
        scales=(0.1, 0.1),
    )
    return ModelSpec(net=net, layers=tuple(layers), source=f"<{architecture}>")


def _v4_spec(
    architecture, num_classes, width, height, batch, subdivisions, learning_rate, anchors
) -> ModelSpec:
    arch = V4_FAMILY[architecture]
    net = arch.net
    changes = dict(
        width=width, height=height, batch=batch, subdivisions=subdivisions, learning_rate=learning_rate
    )
    net = replace(net, **{key: value for key, value in changes.items() if value is not None})
    if net.width % 32 or net.height % 32:
        raise ConfigError(f"--width/--height must be multiples of 32, got {net.width}x{net.height}")
    anchors = tuple(anchors) if anchors else arch.anchors
    if len(anchors) != len(arch.anchors):
        raise ConfigError(f"{architecture} needs {len(arch.anchors)} anchors, got {len(anchors)}")
    layers = arch.layers(num_classes, anchors)
    return ModelSpec(net=net, layers=tuple(layers), source=f"<{architecture}>")


def with_anchors(spec: ModelSpec, anchors: tuple[tuple[float, float], ...]) -> ModelSpec:
    """The same network with every [yolo] layer's anchor list replaced (masks kept)."""
    layers = list(spec.layers)
    for index, layer in enumerate(layers):
        if isinstance(layer, YoloSpec):
            if len(anchors) != layer.num:
                raise ConfigError(
                    f"{spec.source}:{layer.line}: [yolo] has num={layer.num}, {len(anchors)} anchors given"
                )
            layers[index] = replace(layer, anchors=tuple((float(w), float(h)) for w, h in anchors))
    return replace(spec, layers=tuple(layers))


def with_classes(spec: ModelSpec, num_classes: int) -> ModelSpec:
    """The same network predicting ``num_classes`` classes: every [yolo] layer's ``classes`` and the
    filters of the convolution feeding it (``len(mask) * (5 + classes)``)."""
    layers = list(spec.layers)
    for index, layer in enumerate(layers):
        if not isinstance(layer, YoloSpec):
            continue
        head = layers[index - 1] if index else None
        if not isinstance(head, ConvSpec) or head.filters != len(layer.mask) * (5 + layer.classes):
            raise ConfigError(f"{spec.source}:{layer.line}: [yolo] is not fed by a convolution with "
                              f"len(mask) * (5 + classes) filters; set its class count in the cfg")
        layers[index - 1] = replace(head, filters=len(layer.mask) * (5 + num_classes))
        layers[index] = replace(layer, classes=num_classes)
    return replace(spec, layers=tuple(layers))

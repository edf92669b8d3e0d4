"""AlexeyAB's Darknet family, YOLOv4 and YOLOv7, generated from the architecture (``yolov4-tiny.cfg``,
``yolov4.cfg``, ``yolov4-csp.cfg`` and ``yolov7-tiny.cfg``, layer for layer).

Each ``*_layers(num_classes, anchors)`` returns the layer specs; :data:`FAMILY` gives, per
architecture, the layers, the default anchors and the canonical ``[net]`` section.
:func:`turboyolo.model.zoo.make_spec` is the entry point.

Building blocks (index arithmetic of the routes follows from the block lengths):

- *CSP tiny* (yolov4-tiny): 3x3 conv, second half of its channels (route ``groups=2 group_id=1``), two
  3x3 convs, concatenation, 1x1 conv, concatenation with the first conv, 2x2 max-pool;
- *CSP stage* (yolov4, yolov4-csp): strided 3x3 conv, a 1x1 split into two branches, one of them through
  residual blocks, concatenation, 1x1 conv;
- *ELAN tiny* (yolov7-tiny): two 1x1 branches, the second followed by two 3x3 convs, all four outputs
  concatenated and mixed by a 1x1 conv;
- *SPP*: max-pools 5, 9 and 13 at stride 1 over the same input, concatenated with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from turboyolo.formats.darknet_cfg import (
    ConvSpec,
    LayerSpec,
    MaxPoolSpec,
    NetSpec,
    RouteSpec,
    ShortcutSpec,
    UpsampleSpec,
    YoloSpec,
)

TINY_ANCHORS = ((10, 14), (23, 27), (37, 58), (81, 82), (135, 169), (344, 319))
COCO_ANCHORS = (
    (10, 13), (16, 30), (33, 23), (30, 61), (62, 45), (59, 119), (116, 90), (156, 198), (373, 326),
)  # fmt: skip
V4_ANCHORS = (
    (12, 16), (19, 36), (40, 28), (36, 75), (76, 55), (72, 146), (142, 110), (192, 243), (459, 401),
)  # fmt: skip

Anchors = tuple[tuple[float, float], ...]


def conv(filters: int, size: int, stride: int = 1, activation: str = "leaky") -> ConvSpec:
    """A "same"-padded convolution, batch-normalized unless ``linear`` (every generator's block)."""
    return ConvSpec(
        filters=filters,
        size=size,
        stride=stride,
        padding=size // 2,
        batch_normalize=activation != "linear",
        activation=activation,
    )


def _merge_up(filters: int, skip: int, activation: str = "leaky") -> list[LayerSpec]:
    """The top-down neck step: reduce, upsample 2x, reduce the earlier layer ``skip``, concatenate both."""
    return [conv(filters, 1, activation=activation), UpsampleSpec(2), RouteSpec((skip,)),
            conv(filters, 1, activation=activation), RouteSpec((-1, -3))]


def _head(num_anchors: int, num_classes: int, activation: str = "linear") -> ConvSpec:
    """The convolution before a ``[yolo]``: no batch norm, bias, ``linear`` (``logistic`` for new_coords)."""
    filters = num_anchors * (num_classes + 5)
    return ConvSpec(
        filters=filters, size=1, stride=1, padding=0, batch_normalize=False, activation=activation
    )


def _yolo(mask, anchors: Anchors, num_classes: int, **keys: Any) -> YoloSpec:
    extra = tuple((k, v) for k, v in keys.pop("extra", ()))
    return YoloSpec(
        mask=tuple(mask),
        anchors=tuple((float(w), float(h)) for w, h in anchors),
        classes=num_classes,
        num=len(anchors),
        extra=extra,
        **keys,
    )


def _spp() -> list[LayerSpec]:
    return [
        MaxPoolSpec(size=5, stride=1, padding=4),
        RouteSpec((-2,)),
        MaxPoolSpec(size=9, stride=1, padding=8),
        RouteSpec((-4,)),
        MaxPoolSpec(size=13, stride=1, padding=12),
        RouteSpec((-1, -3, -5, -6)),
    ]


# ------------------------------------------------------------------------------------------ yolov4-tiny


def _csp_tiny(filters: int) -> list[LayerSpec]:
    half = filters // 2
    return [
        conv(filters, 3),
        RouteSpec((-1,), groups=2, group_id=1),
        conv(half, 3),
        conv(half, 3),
        RouteSpec((-1, -2)),
        conv(filters, 1),
        RouteSpec((-6, -1)),
        MaxPoolSpec(size=2, stride=2, padding=1),
    ]


def yolov4_tiny_layers(num_classes: int, anchors: Anchors) -> list[LayerSpec]:
    """38 layers; heads at 30 (stride 32, anchors 3-5) and 37 (stride 16, anchors 1-3, as Darknet's)."""
    keys = dict(
        jitter=0.3, scale_x_y=1.05, cls_normalizer=1.0, iou_normalizer=0.07, iou_loss="ciou",
        ignore_thresh=0.7, truth_thresh=1.0, random=False, nms_kind="greedynms", beta_nms=0.6,
        extra=(("resize", "1.5"),),
    )  # fmt: skip
    layers: list[LayerSpec] = [conv(32, 3, 2), conv(64, 3, 2)]
    for filters in (64, 128, 256):
        layers += _csp_tiny(filters)  # the 256 block's 1x1 conv (layer 23) feeds the second head
    layers += [conv(512, 3), conv(256, 1), conv(512, 3), _head(3, num_classes)]
    layers += [_yolo((3, 4, 5), anchors, num_classes, **keys)]
    layers += [RouteSpec((-4,)), conv(128, 1), UpsampleSpec(2), RouteSpec((-1, 23)), conv(256, 3)]
    layers += [_head(3, num_classes), _yolo((1, 2, 3), anchors, num_classes, **keys)]
    return layers


# ----------------------------------------------------------------------------------- yolov4, yolov4-csp


def _residual(inner: int, filters: int, activation: str) -> list[LayerSpec]:
    return [
        conv(inner, 1, activation=activation),
        conv(filters, 3, activation=activation),
        ShortcutSpec(-3),
    ]


def _csp_stage(filters: int, repeats: int, first: bool, activation: str = "mish") -> list[LayerSpec]:
    """Strided conv to ``filters``; split; ``repeats`` residual blocks on one branch; join; 1x1 conv.

    The first stage of yolov4 keeps full-width branches (64) with 32-channel residual bottlenecks.
    """
    part = filters if first else filters // 2
    inner = part // 2 if first else part
    layers: list[LayerSpec] = [
        conv(filters, 3, 2, activation),
        conv(part, 1, activation=activation),
        RouteSpec((-2,)),
        conv(part, 1, activation=activation),
    ]
    for _ in range(repeats):
        layers += _residual(inner, part, activation)
    layers += [conv(part, 1, activation=activation), RouteSpec((-1, -(3 * repeats + 4)))]
    return layers + [conv(filters, 1, activation=activation)]


def yolov4_layers(num_classes: int, anchors: Anchors) -> list[LayerSpec]:
    """162 layers: CSPDarknet53 (mish, 0-104), SPP + PAN (leaky), heads at 139, 150, 161 (strides 8,
    16, 32). Backbone outputs feeding the PAN: 54 (stride 8), 85 (stride 16)."""
    layers: list[LayerSpec] = [conv(32, 3, activation="mish")]
    layers += _csp_stage(64, 1, first=True)
    for filters, repeats in ((128, 2), (256, 8), (512, 8), (1024, 4)):
        layers += _csp_stage(filters, repeats, first=False)
    layers += [conv(512, 1), conv(1024, 3), conv(512, 1)] + _spp()
    layers += [conv(512, 1), conv(1024, 3), conv(512, 1)]
    for filters, skip in ((256, 85), (128, 54)):
        layers += _merge_up(filters, skip)
        layers += [conv(filters, 1), conv(filters * 2, 3)] * 2 + [conv(filters, 1)]

    def keys(scale_x_y: float, random: bool) -> dict:
        return dict(
            jitter=0.3, ignore_thresh=0.7, truth_thresh=1.0, scale_x_y=scale_x_y, iou_thresh=0.213,
            cls_normalizer=1.0, iou_normalizer=0.07, iou_loss="ciou", nms_kind="greedynms", beta_nms=0.6,
            max_delta=5.0, random=random,
        )  # fmt: skip

    layers += [
        conv(256, 3),
        _head(3, num_classes),
        _yolo((0, 1, 2), anchors, num_classes, **keys(1.2, False)),
    ]
    for filters, skip, mask, scale in ((256, -16, (3, 4, 5), 1.1), (512, -37, (6, 7, 8), 1.05)):
        layers += [RouteSpec((-4,)), conv(filters, 3, 2), RouteSpec((-1, skip))]
        layers += [conv(filters, 1), conv(filters * 2, 3)] * 3
        layers += [_head(3, num_classes), _yolo(mask, anchors, num_classes, **keys(scale, mask[0] == 6))]
    return layers


def _csp_block(filters: int) -> list[LayerSpec]:
    """yolov4-csp's neck block: 1x1 in, split, two 1x1 + 3x3 pairs on one branch, join, 1x1 out."""
    return [
        conv(filters, 1, activation="mish"),
        conv(filters, 1, activation="mish"),
        RouteSpec((-2,)),
        conv(filters, 1, activation="mish"),
        conv(filters, 3, activation="mish"),
        conv(filters, 1, activation="mish"),
        conv(filters, 3, activation="mish"),
        RouteSpec((-1, -6)),
        conv(filters, 1, activation="mish"),
    ]


def _new_coords_keys(**per_head: Any) -> dict:
    """The [yolo] keys shared by yolov4-csp and yolov7-tiny (YOLOv7 coordinates, CIoU, DIoU-NMS)."""
    extra = (("objectness_smooth", str(per_head.pop("objectness_smooth"))), ("resize", "1.5"))
    return dict(
        jitter=0.1, scale_x_y=2.0, ignore_thresh=0.7, truth_thresh=1.0, iou_thresh=0.2,
        iou_normalizer=0.05, cls_normalizer=0.5, iou_loss="ciou", nms_kind="diounms", beta_nms=0.6,
        new_coords=True, extra=extra, **per_head,
    )  # fmt: skip


def yolov4_csp_layers(num_classes: int, anchors: Anchors) -> list[LayerSpec]:
    """175 layers: CSPDarknet53 (0-98), SPP-CSP + CSP-PAN (mish), heads at 144, 159, 174 (strides 8, 16,
    32) with ``new_coords`` and logistic head convolutions. Backbone outputs: 48 (stride 8), 79 (16)."""
    layers: list[LayerSpec] = [conv(32, 3, activation="mish"), conv(64, 3, 2, "mish")]
    layers += _residual(32, 64, "mish")
    for filters, repeats in ((128, 2), (256, 8), (512, 8), (1024, 4)):
        layers += _csp_stage(filters, repeats, first=False)
    mish = dict(activation="mish")
    layers += [conv(512, 1, **mish), RouteSpec((-2,)), conv(512, 1, **mish), conv(512, 3, **mish)]
    layers += [conv(512, 1, **mish)] + _spp() + [conv(512, 1, **mish), conv(512, 3, **mish)]
    layers += [RouteSpec((-1, -13)), conv(512, 1, **mish)]  # 113: the neck's stride-32 output
    for filters, skip in ((256, 79), (128, 48)):
        layers += _merge_up(filters, skip, **mish) + _csp_block(filters)
    heads = (
        dict(obj_normalizer=4.0, max_delta=5.0, objectness_smooth=0),
        dict(obj_normalizer=1.0, max_delta=5.0, objectness_smooth=1),
        dict(obj_normalizer=0.4, max_delta=2.0, objectness_smooth=1),
    )
    layers += [conv(256, 3, **mish), _head(3, num_classes, "logistic")]
    layers += [_yolo((0, 1, 2), anchors, num_classes, **_new_coords_keys(**heads[0]))]
    for filters, skip, mask, per_head in ((256, -20, (3, 4, 5), heads[1]), (512, -49, (6, 7, 8), heads[2])):
        layers += [RouteSpec((-4,)), conv(filters, 3, 2, "mish"), RouteSpec((-1, skip))]
        layers += _csp_block(filters) + [conv(filters * 2, 3, **mish), _head(3, num_classes, "logistic")]
        layers += [_yolo(mask, anchors, num_classes, **_new_coords_keys(**per_head))]
    return layers


# ------------------------------------------------------------------------------------------ yolov7-tiny


def _elan_tiny(inner: int, out: int) -> list[LayerSpec]:
    return [
        conv(inner, 1),
        RouteSpec((-2,)),
        conv(inner, 1),
        conv(inner, 3),
        conv(inner, 3),
        RouteSpec((-5, -3, -2, -1)),
        conv(out, 1),
    ]


def yolov7_tiny_layers(num_classes: int, anchors: Anchors) -> list[LayerSpec]:
    """99 layers: ELAN backbone (0-32), SPP-CSP (33-44), PAN (45-86), heads at 90, 94, 98 (strides 8,
    16, 32) with ``new_coords`` and logistic head convolutions; all convolutions leaky."""
    layers: list[LayerSpec] = [conv(32, 3, 2), conv(64, 3, 2)] + _elan_tiny(32, 64)
    for inner, out in ((64, 128), (128, 256), (256, 512)):
        layers += [MaxPoolSpec(size=2, stride=2, padding=1)] + _elan_tiny(inner, out)
    layers += [conv(256, 1), RouteSpec((-2,)), conv(256, 1)] + _spp()
    layers += [conv(256, 1), RouteSpec((-10, -1)), conv(256, 1)]  # 44: the neck's stride-32 output
    for filters, skip in ((128, 24), (64, 16)):  # top-down: outputs 56 (stride 16) and 68 (stride 8)
        layers += _merge_up(filters, skip)
        layers += _elan_tiny(filters // 2, filters)
    for filters, skip in ((128, 56), (256, 44)):  # bottom-up: outputs 77 (stride 16) and 86 (stride 32)
        layers += [conv(filters, 3, 2), RouteSpec((-1, skip))] + _elan_tiny(filters // 2, filters)
    for source, filters, mask in ((68, 128, (0, 1, 2)), (77, 256, (3, 4, 5)), (86, 512, (6, 7, 8))):
        per_head = dict(obj_normalizer=1.0, max_delta=2.0, objectness_smooth=1)
        layers += [RouteSpec((source,)), conv(filters, 3), _head(3, num_classes, "logistic")]
        layers += [_yolo(mask, anchors, num_classes, **_new_coords_keys(**per_head))]
    return layers


# ------------------------------------------------------------------------------------ canonical [net]


def _net(**changes: Any) -> NetSpec:
    values: dict[str, Any] = dict(
        batch=64, subdivisions=1, width=416, height=416, channels=3, momentum=0.9, decay=0.0005, angle=0.0,
        saturation=1.5, exposure=1.5, hue=0.1, learning_rate=0.00261, burn_in=1000, power=4.0,
        max_batches=2000200, policy="steps", steps=(1600000, 1800000), scales=(0.1, 0.1),
    )  # fmt: skip
    values.update(changes)
    return NetSpec(**values)


_V4_NET = dict(subdivisions=8, momentum=0.949, max_batches=500500, steps=(400000, 450000))


@dataclass(frozen=True)
class Architecture:
    layers: Any  # (num_classes, anchors) -> list[LayerSpec]
    anchors: Anchors
    net: NetSpec
    backbone_cut: int  # the ``.conv.N`` layer count of its pretrained backbone file


FAMILY: dict[str, Architecture] = {
    "yolov4-tiny": Architecture(yolov4_tiny_layers, TINY_ANCHORS, _net(), 29),
    "yolov4": Architecture(
        yolov4_layers,
        V4_ANCHORS,
        _net(**_V4_NET, width=608, height=608, learning_rate=0.0013, mosaic=1.0),
        137,
    ),
    "yolov4-csp": Architecture(
        yolov4_csp_layers,
        V4_ANCHORS,
        _net(
            **_V4_NET,
            width=512,
            height=512,
            learning_rate=0.001,
            mosaic=1.0,
            extra=(("letter_box", "1"), ("ema_alpha", "0.9998")),
        ),
        142,
    ),
    "yolov7-tiny": Architecture(yolov7_tiny_layers, COCO_ANCHORS, _net(), 87),
}

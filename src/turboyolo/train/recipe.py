"""What a run trains with besides the loop: augmentation and loss values resolved against the cfg, the
anchor check at the start, class-balanced image weights and single-class labels.

Options left ``None`` take the cfg's value (``[net]`` angle, hue, saturation, exposure, flip, mosaic;
``[yolo]`` jitter, label_smooth_eps, iou_loss, iou_thresh), or turboyolo's default where the cfg gives
none; :func:`resolve` writes them into the config so ``config.yaml`` and the console show every number
the run used.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from turboyolo.data.anchors import AnchorFit, anchor_fit, kmeans_anchors, letterbox_box_sizes
from turboyolo.data.augment import AugmentParams
from turboyolo.data.scan import Sample
from turboyolo.formats.darknet_cfg import ModelSpec, YoloSpec
from turboyolo.model.zoo import with_anchors
from turboyolo.train.config import HYP_GROUPS, TrainConfig

ANCHOR_IOU = 0.5  # a box is coverable when its best anchor reaches this shape IoU (`turboyolo anchors`)
MIN_BPR = 0.98  # below this best-possible recall the check warns (Ultralytics' threshold)
MAX_JITTER = 0.3  # Darknet's [yolo] jitter is a crop; as an aspect jitter more than this distorts too much


def _first_yolo(spec: ModelSpec) -> YoloSpec | None:
    return next((layer for layer in spec.layers if isinstance(layer, YoloSpec)), None)


# turboyolo's defaults where neither a flag nor the cfg says (measured on trees and BCCD, 250 iterations:
# docs/PERFORMANCE.md, "Defaults"). The cfg's own keys win over these; --schedule darknet does not change
# them.
DEFAULT_MOSAIC = 1.0  # [net] mosaic absent (the stock YOLOv3 cfgs)
DEFAULT_BOX_LOSS = "giou"  # no [yolo] names iou_loss (the stock YOLOv3 cfgs: Darknet's mse)
DEFAULT_ASSIGN_IOU = 0.213  # no [yolo] gives iou_thresh (AlexeyAB's value; pjreddie's Darknet: 1)
DEFAULT_BN_MOMENTUM = 0.03  # Darknet's 0.01 lets the running statistics lag a short fine-tune


def resolve(config: TrainConfig, spec: ModelSpec) -> TrainConfig:
    """``config`` with every augmentation, loss and BatchNorm option that is ``None`` set from the cfg, or
    from turboyolo's defaults where the cfg does not say."""
    net, yolo = spec.net, _first_yolo(spec)
    aug, loss, runtime = config.augment, config.loss, config.runtime
    from_cfg = {
        "degrees": float(net.angle),
        "jitter": min(yolo.jitter if yolo is not None else MAX_JITTER, MAX_JITTER),
        "hue": float(net.hue),
        "saturation": max(float(net.saturation), 1.0),
        "exposure": max(float(net.exposure), 1.0),
        "fliplr": 0.5 if dict(net.extra).get("flip", "1") != "0" else 0.0,
        "mosaic": min(max(float(net.mosaic), 0.0), 1.0) if net.mosaic is not None else
        0.0 if config.data_args.augment_on == "device" else DEFAULT_MOSAIC,  # the device path makes none
    }
    augment = dataclasses.replace(aug, **{k: v for k, v in from_cfg.items() if getattr(aug, k) is None})
    heads = [layer for layer in spec.layers if isinstance(layer, YoloSpec)]
    loss_values = {}
    if loss.label_smoothing is None:
        loss_values["label_smoothing"] = float(dict(yolo.extra).get("label_smooth_eps", 0.0)) if yolo else 0.0
    if loss.box_loss is None:
        loss_values["box_loss"] = "cfg" if any(h.iou_loss for h in heads) else DEFAULT_BOX_LOSS
    if loss.assign_iou_thresh is None and not any(h.iou_thresh is not None for h in heads):
        loss_values["assign_iou_thresh"] = DEFAULT_ASSIGN_IOU  # else None: each head's own iou_thresh
    if runtime.bn_momentum is None:
        runtime = dataclasses.replace(runtime, bn_momentum=DEFAULT_BN_MOMENTUM)
    return dataclasses.replace(config, augment=augment, loss=dataclasses.replace(loss, **loss_values),
                               runtime=runtime)


def augment_params(config: TrainConfig, spec: ModelSpec) -> AugmentParams | None:
    """The training augmentation (None with ``--no-augment``)."""
    aug = resolve(config, spec).augment
    if not aug.augment:
        return None
    return AugmentParams(degrees=aug.degrees, scale=tuple(aug.aug_scale), translate=aug.translate,
                         jitter=aug.jitter, hue=aug.hue, saturation=aug.saturation, exposure=aug.exposure,
                         flip=aug.fliplr, flipud=aug.flipud, mosaic=aug.mosaic, mixup=aug.mixup)


def describe(config: TrainConfig) -> list[str]:
    """One console line per ``--hyp`` group: every augmentation and loss value of the run."""
    values = config.as_dict()
    return [f"{group}: " + ", ".join(f"{key}={_short(value)}" for key, value in values[group].items())
            for group in HYP_GROUPS]


def _short(value) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_short(v) for v in value) + "]"
    return str(value)


# ---------------------------------------------------------------------------------------------- anchors
def check_anchors(spec: ModelSpec, samples: Sequence[Sample], *, autoanchor: bool, data: str, cfg: str,
                  say: Callable[..., None]) -> ModelSpec:
    """Print how well the cfg's anchors cover the training boxes at the training size; below
    :data:`MIN_BPR` warn (or with ``autoanchor`` fit new anchors and return the cfg with them).

    The figures are those of ``turboyolo anchors`` (:func:`turboyolo.data.anchors.anchor_fit`, shape
    IoU >= :data:`ANCHOR_IOU`). New anchors keep the pretrained heads useful: box outputs are relative to
    the anchor.
    """
    yolo = _first_yolo(spec)
    labelled = [s for s in samples if len(s.labels)]
    if yolo is None or not labelled or any(s.hw is None for s in labelled):
        return spec
    net = spec.net
    sizes = letterbox_box_sizes([s.labels for s in labelled], [s.hw for s in labelled],
                                (net.width, net.height))
    current = anchor_fit(sizes, yolo.anchors, ANCHOR_IOU)
    say(f"anchors: {_figures(current)} on {len(sizes)} training boxes at {net.width}x{net.height}")
    if current.recall >= MIN_BPR:
        return spec
    if not autoanchor:
        say(f"warning: the anchors cover the training boxes poorly (best-possible recall "
            f"{current.recall:.1%} < {MIN_BPR:.0%}); fit new ones with `turboyolo anchors --data {data} "
            f"--cfg {cfg}` and give them to --anchors, or leave --autoanchor on (the default) and no "
            "--anchors")
        return spec
    try:
        fitted = kmeans_anchors(sizes, len(yolo.anchors), seed=0, thresh=ANCHOR_IOU)
    except ValueError as err:
        say(f"autoanchor: cannot fit {len(yolo.anchors)} anchors ({err}); keeping the cfg's")
        return spec
    if (fitted.recall, fitted.mean_iou) <= (current.recall, current.mean_iou):
        say(f"autoanchor: k-means anchors are no better ({_figures(fitted)}); keeping the cfg's")
        return spec
    say(f"autoanchor: training with anchors fitted to the boxes ({_figures(fitted)}): {fitted.text()} "
        "(written to the run's model.cfg)")
    return with_anchors(spec, tuple(map(tuple, fitted.anchors)))


def _figures(fit: AnchorFit) -> str:
    return (f"best-possible recall {fit.recall:.1%} (IoU >= {fit.thresh:g}), mean IoU {fit.mean_iou:.3f}, "
            f"{fit.used}/{len(fit.anchors)} anchors used")


# ---------------------------------------------------------------------------------------------- labels
def image_weights(samples: Sequence[Sample], num_classes: int) -> np.ndarray:
    """Per image, the sum over its boxes of 1 / (boxes of that class in the set), so images holding rare
    classes are drawn more often (Ultralytics' ``--image-weights`` from class counts). An image without
    boxes gets the smallest weight of a labelled one (it still teaches the background)."""
    classes = [s.labels[:, 0].astype(np.int64) for s in samples]
    counts = np.bincount(np.concatenate(classes) if classes else np.zeros(0, np.int64), minlength=num_classes)
    class_weight = np.where(counts > 0, 1.0 / np.maximum(counts, 1), 0.0)
    weights = np.array([class_weight[c].sum() for c in classes], np.float64)
    positive = weights[weights > 0]
    weights[weights == 0] = positive.min() if len(positive) else 1.0
    return weights


def single_class(samples: Sequence[Sample]) -> list[Sample]:
    """The samples with every box in class 0 (``--single-cls``)."""
    out = []
    for sample in samples:
        labels = sample.labels.copy()
        labels[:, 0] = 0
        out.append(dataclasses.replace(sample, labels=labels))
    return out

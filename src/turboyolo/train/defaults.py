"""What an option left unset takes: the cfg's value, or turboyolo's default where the cfg gives none.

Options left ``None`` take the cfg's value (``[net]`` angle, hue, saturation, exposure, flip, mosaic;
``[yolo]`` jitter, label_smooth_eps, iou_loss, iou_thresh), or turboyolo's default where the cfg gives
none; :func:`resolve` writes them into the config (called once, by
:func:`turboyolo.train.resolve.resolve_options`) so ``config.yaml`` and the console show every number
the run used.
"""

from __future__ import annotations

import dataclasses

from turboyolo.formats.darknet_cfg import ModelSpec, YoloSpec
from turboyolo.train.config import HYP_GROUPS, TrainConfig

MAX_JITTER = 0.3  # Darknet's [yolo] jitter is a crop; as an aspect jitter more than this distorts too much


def first_yolo(spec: ModelSpec) -> YoloSpec | None:
    return next((layer for layer in spec.layers if isinstance(layer, YoloSpec)), None)


# turboyolo's defaults where neither a flag nor the cfg says (measured on trees and BCCD, 250 iterations:
# docs/PERFORMANCE.md, "Training defaults"). The cfg's own keys win over these; --schedule darknet does
# not change them.
DEFAULT_MOSAIC = 1.0  # [net] mosaic absent (the stock YOLOv3 cfgs)
DEFAULT_BOX_LOSS = "giou"  # no [yolo] names iou_loss (the stock YOLOv3 cfgs: Darknet's mse)
DEFAULT_ASSIGN_IOU = 0.213  # no [yolo] gives iou_thresh (AlexeyAB's value; pjreddie's Darknet: 1)
DEFAULT_BN_MOMENTUM = 0.03  # Darknet's 0.01 lets the running statistics lag a short fine-tune


def resolve(config: TrainConfig, spec: ModelSpec) -> TrainConfig:
    """``config`` with every augmentation, loss and BatchNorm option that is ``None`` set from the cfg, or
    from turboyolo's defaults where the cfg does not say."""
    net, yolo = spec.net, first_yolo(spec)
    aug, loss, runtime = config.augment, config.loss, config.runtime
    from_cfg = {
        "degrees": float(net.angle),
        "jitter": yolo.jitter if yolo is not None and aug.loader == "darknet" else  # Darknet's own, uncapped
        min(yolo.jitter if yolo is not None else MAX_JITTER, MAX_JITTER),
        "hue": float(net.hue),
        "saturation": max(float(net.saturation), 1.0),
        "exposure": max(float(net.exposure), 1.0),
        "fliplr": 0.5 if dict(net.extra).get("flip", "1") != "0" else 0.0,
        "mosaic": min(max(float(net.mosaic), 0.0), 1.0) if net.mosaic is not None else DEFAULT_MOSAIC,
    }
    augment = dataclasses.replace(aug, **{k: v for k, v in from_cfg.items() if getattr(aug, k) is None})
    heads = [layer for layer in spec.layers if isinstance(layer, YoloSpec)]
    loss_values = {}
    if loss.label_smoothing is None:
        loss_values["label_smoothing"] = float(dict(yolo.extra).get("label_smooth_eps", 0.0)) if yolo else 0.0
    if loss.box_loss is None:
        loss_values["box_loss"] = "cfg" if any(h.iou_loss for h in heads) else DEFAULT_BOX_LOSS
    if loss.assign_iou_thres is None and not any(h.iou_thresh is not None for h in heads):
        loss_values["assign_iou_thres"] = DEFAULT_ASSIGN_IOU  # else None: each head's own iou_thresh
    if runtime.bn_momentum is None:
        runtime = dataclasses.replace(runtime, bn_momentum=DEFAULT_BN_MOMENTUM)
    return dataclasses.replace(config, augment=augment, loss=dataclasses.replace(loss, **loss_values),
                               runtime=runtime)


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

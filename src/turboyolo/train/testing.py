"""The ``turboyolo test`` job: Darknet weights or a checkpoint evaluated on one split of a data set."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from turboyolo.assets import ASSETS
from turboyolo.data.pipeline import build_loader
from turboyolo.data.scan import scan_dataset
from turboyolo.devices import amp_dtype_for, resolve_device
from turboyolo.errors import ConfigError
from turboyolo.formats.darknet_cfg import parse_cfg, parse_cfg_text
from turboyolo.formats.datasets import load_data_config
from turboyolo.model.loading import build_model, is_checkpoint, read_checkpoint, resolve_model, weights_path
from turboyolo.train.engine import evaluate
from turboyolo.train.metrics import EvalResult


@dataclass
class TestOptions:
    """What ``turboyolo test`` takes besides the weights and the data set."""

    cfg: str | None = None
    split: str = "val"
    img_size: int | None = None  # None: a checkpoint's --val-img-size, else the cfg's width
    batch_size: int = 16
    workers: int | None = None
    conf_thres: float = 0.01
    iou_thres: float = 0.5
    nms_thres: float = 0.4
    max_det: int = 300
    device: str = "auto"
    amp: str = "auto"
    backend: str = "pycocotools"
    rect: bool = False  # batches of similar aspect ratio, each letterboxed to its own rectangle


def test_weights(weights: str | Path, data: str | Path, options: TestOptions,
                 log: Callable[[str], None] = print) -> tuple[EvalResult, list[str]]:
    """mAP of ``weights`` on ``options.split`` of ``data``; returns the result and the class names.

    The weights must fit the cfg exactly (as for detect): a checkpoint for another class count is
    refused, never evaluated with random heads.
    """
    spec = None
    if not Path(weights).exists() and str(weights) in ASSETS:  # a pretrained name: its canonical cfg
        spec, weights = resolve_model(options.cfg, weights)
    weights = weights_path(weights)
    state = read_checkpoint(weights) if is_checkpoint(weights) else None
    if options.cfg:
        spec = parse_cfg(options.cfg)
    elif state is not None and isinstance(state.get("cfg_text"), str):
        spec = parse_cfg_text(state["cfg_text"], f"{weights}:cfg_text")
    if spec is None:
        raise ConfigError("--model/--cfg is required with Darknet .weights (a checkpoint carries its cfg)")
    size = options.img_size
    if not size and state is not None:  # evaluate where the run evaluated
        saved = state.get("config") or {}
        size = (saved.get("eval") or {}).get("val_img_size") or saved.get("val_img_size")
        if size:
            log(f"input {size} x {size}: the run's --val-img-size (--img-size overrides)")
    if size:
        spec = spec.with_net(width=size, height=size)
    model = build_model(spec, weights)
    log(f"loaded {weights}")
    device = resolve_device(options.device)
    model.to(device)
    # labels are checked against the model's classes when the data set names none
    numbered = None if load_data_config(data).names else [str(k) for k in range(model.num_classes)]
    scan = scan_dataset(data, options.split, numbered)
    log(scan.console_text())  # the summary and the excluded and fixed files by name
    scan.require_samples()
    names = scan.names
    if len(names) != model.num_classes:
        raise ConfigError(f"{data}: {len(names)} class names but the model has {model.num_classes} classes; "
                          "use the data set the weights were trained for, or a cfg with its class count")
    loader = build_loader(scan.samples, img_size=spec.net.width, batch_size=options.batch_size, augment=None,
                          workers=options.workers, shuffle=False, rect=options.rect)
    result, _ = evaluate(model, loader, device=device, num_classes=model.num_classes,
                         conf_thres=options.conf_thres, iou_thres=options.iou_thres,
                         nms_thres=options.nms_thres, max_det=options.max_det,
                         amp_dtype=amp_dtype_for(device, options.amp), backend=options.backend)
    if loader.dropped_summary():  # images that broke after the scan: left out, never substituted
        log(loader.dropped_summary())
    return result, names

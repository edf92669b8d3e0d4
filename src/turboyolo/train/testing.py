"""The ``turboyolo test`` job: Darknet weights or a checkpoint evaluated on one split of a data set."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path

from turboyolo.assets import ASSETS
from turboyolo.data.pipeline import build_loader
from turboyolo.data.scan import scan_dataset
from turboyolo.devices import amp_dtype_for, evaluation_threads_on, resolve_device
from turboyolo.errors import ConfigError, FlagError, WeightsError
from turboyolo.formats.darknet_cfg import ModelSpec, parse_cfg, parse_cfg_text
from turboyolo.formats.datasets import load_data_config
from turboyolo.model.loading import build_model, is_checkpoint, read_checkpoint, resolve_model, weights_path
from turboyolo.options import (
    amp_option,
    check_img_size,
    device_option,
    img_size_option,
    max_candidates_option,
    max_det_option,
    option,
    require,
)
from turboyolo.train.config import EvalArgs, checked
from turboyolo.train.engine import evaluate
from turboyolo.train.metrics import (
    BACKENDS,
    EVAL_CONF_THRES,
    EVAL_IOU_THRES,
    EVAL_NMS_THRES,
    EvalResult,
)

EVAL_OPTIONS = tuple(f.name for f in fields(EvalArgs))  # what a checkpoint's stored eval group may hold
KERNELS = ("torch", "tuned")


@dataclass
class TestArgs:
    """How the split is evaluated."""

    __test__ = False  # not a pytest test class

    split: str = option("val", "which split to evaluate", choices=("val", "train"))
    img_size: int | None = img_size_option("a checkpoint's --val-img-size, else the cfg's width")
    batch_size: int = option(16, "images per forward pass", "-b", "--batch-size", type=int)
    workers: int | None = option(None, "loader workers", "--n-cpu", "--workers", type=int)
    iou_thres: float | None = option(None, "IoU a detection needs with a ground truth to count as found in "
                                     f"precision/recall/F1 (AP is always COCO's: at 0.5 and over 0.5:0.95; "
                                     f"default: a checkpoint's, else {EVAL_IOU_THRES})", type=float)
    conf_thres: float | None = option(None, "score where precision/recall/F1 are read (AP uses every "
                                      f"detection >= 0.001; default: a checkpoint's, else {EVAL_CONF_THRES})",
                                      type=float)
    nms_thres: float | None = option(None, "IoU of per-class NMS (default: a checkpoint's, else "
                                     f"{EVAL_NMS_THRES})", type=float)
    max_det: int = max_det_option()
    max_candidates: int = max_candidates_option()
    device: str = device_option()
    amp: str = amp_option()
    backend: str = option("builtin", "what computes COCO's AP: builtin (vectorised, pycocotools' matching "
                          "and accumulation), pycocotools (the official numbers) or faster-coco-eval",
                          choices=BACKENDS)
    kernels: str = option("torch", "the network's convolutions: torch (PyTorch's public modules: the same "
                          "digits every run) or tuned (CPU, float32: each layer on its fastest kernel there, "
                          "as detect --backend tuned; docs/DETECT.md)", choices=KERNELS)
    rect: bool = option(False, "batches of similar aspect ratio, each letterboxed to its own rectangle",
                        action="store_true")

    def __post_init__(self) -> None:
        check_img_size(self.img_size)
        require(self.iou_thres is None or 0 < self.iou_thres <= 1, "--iou-thres must be in (0, 1]")
        require(self.conf_thres is None or 0 <= self.conf_thres < 1, "--conf-thres must be in [0, 1)")
        require(self.nms_thres is None or 0 < self.nms_thres <= 1, "--nms-thres must be in (0, 1]")
        require(self.batch_size >= 1, "--batch-size must be >= 1")
        require(self.max_det >= 1, "--max-det must be >= 1")
        require(self.max_candidates >= 1, "--max-candidates must be >= 1")


@dataclass
class TestRequest:
    """What ``turboyolo test`` is asked to do: ``weights`` (Darknet ``.weights`` with ``cfg``, a checkpoint
    that carries its cfg, or a pinned asset name) on ``data``, as ``test`` says."""

    __test__ = False  # not a pytest test class

    weights: str | Path
    data: str | Path
    cfg: str | None = None
    test: TestArgs = field(default_factory=TestArgs)


GROUPS: dict[str, type] = {"test": TestArgs}


@dataclass
class TestReport:
    """What :func:`run_test` measured: the evaluation and the data set's class names."""

    __test__ = False  # not a pytest test class

    result: EvalResult
    names: list[str]

    def summary(self) -> str:
        """The per-class table, the two mAPs, where an NMS cap bit, and the time split."""
        return "\n".join([self.result.table(self.names), self.result.headline(), *self.result.notes()])


def run_test(request: TestRequest, log: Callable[[str], object] = lambda _: None) -> TestReport:
    """mAP of ``request.weights`` on ``request.test.split`` of ``request.data``.

    The weights must fit the cfg exactly (as for detect): a checkpoint for another class count is
    refused, never evaluated with random heads. ``log`` receives what was loaded and the data set's scan
    summary as they happen (nothing by default).
    """
    options, data = request.test, request.data
    spec, weights, state = _model_spec(request)
    run_eval = eval_settings(state, weights)
    size = options.img_size
    if not size and run_eval.get("val_img_size"):  # evaluate where the run evaluated
        size = run_eval["val_img_size"]
        log(f"input {size} x {size}: the run's --val-img-size (--img-size overrides)")
    defaults = {"conf_thres": EVAL_CONF_THRES, "iou_thres": EVAL_IOU_THRES, "nms_thres": EVAL_NMS_THRES}
    thresholds = {name: getattr(options, name) if getattr(options, name) is not None else
                  run_eval.get(name, default) for name, default in defaults.items()}
    if size:
        spec = spec.with_net(width=size, height=size)
    model = build_model(spec, weights)
    log(f"loaded {weights}")
    device = resolve_device(options.device)
    amp_dtype = amp_dtype_for(device, options.amp)
    tuned = options.kernels == "tuned"
    if tuned and (device.type != "cpu" or amp_dtype is not None):
        raise FlagError(f"--kernels tuned runs float32 on the CPU; this run evaluates on {device}"
                        f"{' under --amp' if amp_dtype is not None else ''}: use --kernels torch, or "
                        "--device cpu --amp off")
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
    # an inference copy: batch norm folded into the convolutions; on the CPU channels_last (--kernels
    # tuned: each layer's fastest kernel there)
    with evaluation_threads_on(device):  # on the CPU one core left to the loader (devices.py says why)
        model = model.inference_copy_for(device, autocast=amp_dtype, tuned=tuned, say=log)
        result, _ = evaluate(model, loader, device=device, num_classes=model.num_classes,
                             **thresholds, max_det=options.max_det, max_candidates=options.max_candidates,
                             amp_dtype=amp_dtype, backend=options.backend)
    if loader.dropped_summary():  # images that broke after the scan: left out, never substituted
        log(loader.dropped_summary())
    return TestReport(result, names)


def eval_settings(state: dict | None, source: str | Path = "the checkpoint") -> dict:
    """The evaluation settings a checkpoint's run used (its resolved ``eval`` group; ``{}`` for Darknet
    weights): ``turboyolo test`` of a run's weights reads them as the run's own evaluations did.

    Raises:
        WeightsError: the stored config (or its ``eval``) is not a mapping of options (``source`` named).
        ConfigError, FlagError: a stored value of the wrong type or range (the key named).
    """
    saved = (state or {}).get("config") or {}
    if not isinstance(saved, dict) or not isinstance(saved.get("eval") or {}, dict):
        what = saved if not isinstance(saved, dict) else saved.get("eval")
        part = "config" if not isinstance(saved, dict) else "config's eval section"
        raise WeightsError(f"{source}: damaged checkpoint: its stored {part} is {type(what).__name__} "
                           f"{str(what)[:40]!r}, not a mapping of options; use another checkpoint of the run "
                           "(weights/best.pt or last.pt), or its .weights with --cfg")
    settings = dict(saved.get("eval") or {})
    if saved.get("val_img_size"):  # turboyolo 0.1: flat
        settings.setdefault("val_img_size", saved["val_img_size"])
    settings = {key: value for key, value in settings.items() if value is not None and key in EVAL_OPTIONS}
    return checked(settings, f"{source} (its config)")


def _model_spec(request: TestRequest) -> tuple[ModelSpec, Path, dict | None]:
    """The network to evaluate, the weights file and (for a checkpoint) its contents."""
    spec, weights = None, request.weights
    if not Path(weights).exists() and str(weights) in ASSETS:  # a pretrained name: its canonical cfg
        spec, weights = resolve_model(request.cfg, weights)
    weights = weights_path(weights)
    state = read_checkpoint(weights) if is_checkpoint(weights) else None
    if request.cfg:
        spec = parse_cfg(request.cfg)
    elif state is not None and isinstance(state.get("cfg_text"), str):
        spec = parse_cfg_text(state["cfg_text"], f"{weights}:cfg_text")
    if spec is None:
        raise ConfigError("--model/--cfg is required with Darknet .weights (a checkpoint carries its cfg)")
    return spec, weights, state

"""Training settings as small grouped dataclasses; the ``turboyolo train`` flags are generated from them.

Each field is declared once, with its help text and flag spellings (PyTorch-YOLOv3's names included), so
a new option touches one place: its field. Darknet ``[net]`` values are the defaults of the network
(batch, subdivisions, size, optimizer, schedule); the fields that override them are ``None`` until set.

A flag the user did not pass stays absent from the parsed namespace (``argparse.SUPPRESS``): the config
knows which values were given, so ``--resume`` can take exactly those (:meth:`TrainConfig.resumed`).
``TrainConfig.as_dict()`` (nested by group) is what ``config.yaml`` and every checkpoint store;
:meth:`TrainConfig.from_dict` also reads the flat dict of turboyolo 0.1 checkpoints.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from turboyolo.devices import AMP_CHOICES
from turboyolo.errors import FlagError, TurboYoloError
from turboyolo.formats.darknet_cfg import parse_anchor_list
from turboyolo.formats.yamlfile import read_yaml, typed
from turboyolo.model.zoo import ARCHITECTURES
from turboyolo.options import add_flags as add_group_flags
from turboyolo.options import amp_option, device_option, option
from turboyolo.options import require as _require

CACHE_CHOICES = ("none", "ram", "disk")
AUGMENT_ON_CHOICES = ("cpu", "device")
BOX_LOSSES = ("cfg", "darknet", "mse", "iou", "giou", "diou", "ciou")  # turboyolo.train.loss.BOX_LOSSES
BN_TRAIN_CHOICES = ("torch", "darknet")


@dataclass
class DataArgs:
    """What the loader feeds the network."""

    img_size: int | None = option(None, "network input side (default: the cfg's width)", type=int)
    cache: str = option("none", "decode each image once into a prepared cache (`turboyolo prepare` "
                        "builds the disk one ahead of time)", choices=CACHE_CHOICES)
    workers: int | None = option(None, "loader worker processes (default: CPUs - 1)", "--workers", "--n-cpu",
                                 type=int)
    augment_on: str = option("cpu", "where affine/letterbox, HSV and flip run: the loader's CPU processes, "
                             "or the training device as batched tensor ops (then the loader only copies "
                             "cached uint8 images; use with --cache)", choices=AUGMENT_ON_CHOICES)
    single_cls: bool = option(False, "train every class as one (a cfg with more classes is rewritten to 1; "
                              "names become ['item'] unless the data set has one)", action="store_true")
    image_weights: bool = option(False, "draw training images by class weight (1 / boxes of the class, "
                                 "summed over an image's boxes) instead of each once per epoch",
                                 action="store_true")

    def check(self) -> None:
        _require(self.img_size is None or (self.img_size >= 32 and self.img_size % 32 == 0),
                 "--img-size must be a multiple of 32")
        _require(self.cache in CACHE_CHOICES, f"--cache must be one of {', '.join(CACHE_CHOICES)}")
        _require(self.augment_on in AUGMENT_ON_CHOICES, "--augment-on must be cpu or device")
        _require(self.workers is None or self.workers >= 0, "--workers must be >= 0")


@dataclass
class ScheduleArgs:
    """How long the run is and how images group into iterations."""

    epochs: int = option(300, "passes over the training set", "-e", "--epochs", type=int)
    max_batches: int | None = option(None, "stop after this many iterations (default: the cfg's "
                                     "max_batches; 0 = epochs only)", type=int)
    batch: int | None = option(None, "images per iteration (default: the cfg's batch)", type=int)
    subdivisions: int | None = option(None, "mini-batches per iteration (default: the cfg's)", type=int)
    time_limit_min: float = option(0.0, "stop after this many minutes of training (0: none); the LR schedule "
                                   "is still the cfg's over --max-batches/--epochs (a warning says when the "
                                   "limit cuts it short)", "--time-limit", type=float)
    patience: int = option(0, "stop when this many epochs pass without a better fitness "
                           "(0.1 mAP@0.5 + 0.9 mAP@0.5:0.95; 0: never)", type=int)

    def check(self) -> None:
        _require(self.epochs >= 1, "--epochs must be >= 1")
        _require(self.max_batches is None or self.max_batches >= 0, "--max-batches must be >= 0")
        _require(self.batch is None or self.batch >= 1, "--batch must be >= 1")
        _require(self.subdivisions is None or self.subdivisions >= 1, "--subdivisions must be >= 1")
        _require(self.time_limit_min >= 0, "--time-limit must be >= 0 minutes")
        _require(self.patience >= 0, "--patience must be >= 0 epochs (0: off)")


SCHEDULES = ("fitted", "darknet")
OPTIMIZERS = ("sgd", "adam", "adamw")
LR_DECAYS = ("cosine", "linear")


@dataclass
class OptimArgs:
    """The optimizer and its learning-rate schedule. ``fitted`` (the default) follows the planned run: a
    warm-up, then a decay that ends at its last planned iteration (``--epochs`` / ``--max-batches``);
    ``darknet`` runs the cfg's ``[net]`` optimizer, learning_rate, burn_in, power, policy, steps and scales
    exactly as Darknet does (its plan is 500,200 iterations for the stock cfgs)."""

    lr_schedule: str = option("fitted", "fitted: warm-up, then a decay ending at the run's last planned "
                              "iteration, with the optimizer below; darknet: the cfg's [net] schedule and "
                              "optimizer, as Darknet runs them", "--schedule", "--lr-schedule",
                              choices=SCHEDULES)
    optimizer: str | None = option(None, "default: adam (fitted schedule), the cfg's (darknet)",
                                   choices=OPTIMIZERS)
    lr: float | None = option(None, "peak learning rate (default: 0.002 for adam/adamw, 0.01 for sgd with "
                              "the fitted schedule; the cfg's learning_rate with darknet)", "--lr",
                              type=float)
    lr_final: float = option(0.0, "fitted schedule: the rate at the last planned iteration, as a fraction "
                             "of --lr", type=float, metavar="FRACTION")
    warmup_epochs: float = option(3.0, "fitted schedule: warm-up length in epochs, capped at 10%% of the "
                                  "planned iterations and at 1000 iterations; the rate rises as "
                                  "(i / warm-up)^2 (0: none)", "--warmup-epochs", "--warmup", type=float,
                                  metavar="EPOCHS")
    lr_decay: str = option("cosine", "fitted schedule: the decay after the warm-up (--cos-lr / --linear-lr "
                           "are shortcuts)", choices=LR_DECAYS,
                           shortcuts={"--cos-lr": "cosine", "--linear-lr": "linear"})
    weight_decay: float | None = option(None, "L2 weight decay of the convolution weights, decoupled for "
                                        "adamw (default: 0.0005 fitted, the cfg's decay with darknet)",
                                        type=float)
    momentum: float | None = option(None, "SGD momentum, Adam's beta1 (default: 0.9 fitted, the cfg's "
                                    "momentum with darknet)", type=float)

    def check(self) -> None:
        _require(self.lr_schedule in SCHEDULES, f"--schedule must be one of {', '.join(SCHEDULES)}")
        _require(self.optimizer is None or self.optimizer in OPTIMIZERS,
                 f"--optimizer must be one of {', '.join(OPTIMIZERS)}")
        _require(self.lr is None or self.lr > 0, "--lr must be > 0")
        _require(0 <= self.lr_final <= 1, "--lr-final is a fraction of --lr in [0, 1]")
        _require(self.warmup_epochs >= 0, "--warmup-epochs must be >= 0")
        _require(self.lr_decay in LR_DECAYS, f"--lr-decay must be one of {', '.join(LR_DECAYS)}")
        _require(self.weight_decay is None or self.weight_decay >= 0, "--weight-decay must be >= 0")
        _require(self.momentum is None or 0 <= self.momentum < 1, "--momentum must be in [0, 1)")


@dataclass
class AugmentArgs:
    """The training augmentation; ``None`` = the cfg's value (``[net]`` angle, hue, saturation, exposure,
    flip, mosaic; ``[yolo]`` jitter). Every field is also a ``--hyp`` file key."""

    augment: bool = option(True, "augment training images (--no-augment: letterbox only, for debugging)",
                           action=argparse.BooleanOptionalAction)
    multiscale: bool = option(False, "draw the input size per batch from 0.67x..1.5x --img-size",
                              "--multiscale-training", "--multiscale", action="store_true")
    aug_scale: tuple[float, float] = option((0.75, 1.25), "random zoom range", nargs=2, type=float,
                                            metavar=("MIN", "MAX"))
    translate: float = option(0.1, "random shift, a fraction of the input side per axis", type=float)
    degrees: float | None = option(None, "random rotation in +-degrees (default: the cfg's angle)",
                                   type=float)
    jitter: float | None = option(None, "aspect-ratio jitter (default: the cfg's [yolo] jitter, at most 0.3)",
                                  type=float)
    hue: float | None = option(None, "hue shift, a fraction of the colour circle (default: the cfg's hue)",
                               type=float)
    saturation: float | None = option(None, "saturation factor range 1/S..S (default: the cfg's, >= 1)",
                                      type=float)
    exposure: float | None = option(None, "brightness factor range 1/E..E (default: the cfg's, >= 1)",
                                    type=float)
    fliplr: float | None = option(None, "probability of a left-right flip (default: 0.5, 0 with the cfg's "
                                  "flip=0)", type=float, metavar="P")
    flipud: float = option(0.0, "probability of an up-down flip (aerial and microscope images)", type=float,
                           metavar="P")
    mosaic: float | None = option(None, "probability of a 4-image mosaic per training sample (default: "
                                  "the cfg's [net] mosaic when it gives one, else 1)", type=float,
                                  metavar="P")
    close_mosaic: int | None = option(None, "no mosaic and no mixup in the last N epochs of the run "
                                      "(default: the last 20%% of the planned epochs, at most 10)", type=int,
                                      metavar="N")
    mixup: float = option(0.0, "probability of blending a training sample with another (YOLOv5's mixup)",
                          type=float, metavar="P")

    def check(self) -> None:
        low, high = self.aug_scale
        _require(0 < low <= high, "--aug-scale needs 0 < MIN <= MAX")
        for name in ("mosaic", "mixup", "fliplr", "flipud"):
            value = getattr(self, name)
            _require(value is None or 0 <= value <= 1, f"--{name} is a probability in [0, 1]")
        _require(self.translate >= 0, "--translate must be >= 0")
        _require(self.jitter is None or self.jitter >= 0, "--jitter must be >= 0")
        _require(self.hue is None or 0 <= self.hue <= 0.5, "--hue must be in [0, 0.5]")
        for name in ("saturation", "exposure"):
            value = getattr(self, name)
            _require(value is None or value >= 1, f"--{name} is a Darknet factor >= 1 (1 = off)")
        _require(self.close_mosaic is None or self.close_mosaic >= 0, "--close-mosaic must be >= 0 epochs")


@dataclass
class LossArgs:
    """Target assignment, the anchors and the weights of the loss terms (also ``--hyp`` file keys)."""

    box_loss: str | None = option(None, "box regression loss (default: each [yolo]'s iou_loss when the cfg "
                                  "names one, else giou); cfg = each [yolo]'s iou_loss, mse when absent; the "
                                  "others replace it in every head; darknet = Darknet's own deltas (mse's "
                                  "squared error, its x, y gradient without the logistic's derivative), "
                                  "mse = the squared error's exact gradient; the cfg's iou_normalizer still "
                                  "weighs it", choices=BOX_LOSSES)
    assign_iou_thres: float | None = option(None, "also train every anchor whose shape IoU with a box "
                                            "exceeds this (AlexeyAB's iou_thresh; 1 = best anchor only, "
                                            "as pjreddie's Darknet; default: each [yolo]'s iou_thresh when "
                                            "the cfg gives one, else 0.213)", type=float)
    anchor_ratio: float = option(0.0, "train every anchor within this w/h factor of a box (YOLOv5: 4; "
                                 "0 = off)", type=float)
    obj_iou: bool = option(True, "objectness target of an assigned cell = GIoU (>= 0) of its predicted box "
                           "with the ground truth, so scores rank well-placed boxes above loose ones "
                           "(docs/PERFORMANCE.md measures it); on by default, --no-obj-iou: "
                           "Darknet's target 1",
                           action=argparse.BooleanOptionalAction)
    box_gain: float = option(1.0, "multiplier of the box term", type=float)
    obj_gain: float = option(1.0, "multiplier of the objectness term", type=float)
    cls_gain: float = option(1.0, "multiplier of the class term", type=float)
    label_smoothing: float | None = option(None, "class targets 1 - eps/2 and eps/2 instead of 1 and 0 "
                                           "(default: the cfg's [yolo] label_smooth_eps, else 0)",
                                           "--label-smoothing", "--label-smooth-eps", type=float,
                                           metavar="EPS")
    autoanchor: bool = option(True, "when the cfg's anchors cover the training boxes poorly (best-possible "
                              "recall < 98%%), fit new ones (k-means) and train with them (model.cfg); "
                              "--no-autoanchor keeps the cfg's and only warns",
                              action=argparse.BooleanOptionalAction)
    anchors: str | None = option(None, "anchors of every [yolo] layer instead of the cfg's, as w,h pairs in "
                                 "pixels of the network input ('16,17, 25,29, ...', e.g. from `turboyolo "
                                 "anchors`)", metavar="W,H,...")

    def check(self) -> None:
        _require(self.box_loss is None or self.box_loss in BOX_LOSSES,
                 f"--box-loss must be one of {', '.join(BOX_LOSSES)}")
        _require(self.assign_iou_thres is None or 0 < self.assign_iou_thres <= 1,
                 "--assign-iou-thres must be in (0, 1]")
        _require(self.anchor_ratio >= 0, "--anchor-ratio must be >= 0")
        _require(min(self.box_gain, self.obj_gain, self.cls_gain) >= 0, "loss gains must be >= 0")
        _require(self.label_smoothing is None or 0 <= self.label_smoothing < 1,
                 "--label-smoothing must be in [0, 1)")
        if self.anchors is not None:
            if isinstance(self.anchors, list | tuple):  # a YAML list: [16, 17, 25, 29] or [[16, 17], ...]
                flat = [v for item in self.anchors
                        for v in (item if isinstance(item, list | tuple) else [item])]
                self.anchors = ",".join(f"{v:g}" for v in flat)
            parse_anchor_list(self.anchors)


@dataclass
class EvalArgs:
    """When and how the validation split is evaluated."""

    evaluation_interval: int = option(1, "evaluate every N epochs (0: never)", type=int)
    val_img_size: int | None = option(None, "input side of the evaluations (default: the training size); "
                                      "small objects trained on random zooms are often found better a "
                                      "size up", type=int)
    iou_thres: float = option(0.5, "IoU a detection needs with a ground truth to count as found, for "
                              "precision / recall / F1 at --conf-thres (AP is always at 0.5 and 0.5:0.95)",
                              type=float)
    conf_thres: float = option(0.1, "score where precision, recall and F1 are read", type=float)
    nms_thres: float = option(0.5, "IoU of per-class NMS in evaluation", type=float)
    eval_batch: int | None = option(None, "images per evaluation batch (default: 2 x the mini-batch)",
                                    type=int)
    verbose: bool = option(False, "print the per-class table every evaluation", "-v", "--verbose",
                           action="store_true")
    rect: bool = option(False, "evaluate in batches of similar aspect ratio, each letterboxed to its own "
                        "rectangle (less padding; the same boxes)", action="store_true")

    def check(self) -> None:
        _require(self.evaluation_interval >= 0, "--evaluation-interval must be >= 0 (0: never)")
        _require(self.val_img_size is None or (self.val_img_size >= 32 and self.val_img_size % 32 == 0),
                 "--val-img-size must be a multiple of 32")
        _require(0 < self.iou_thres <= 1, "--iou-thres must be in (0, 1]")
        _require(0 <= self.conf_thres < 1, "--conf-thres must be in [0, 1)")
        _require(0 < self.nms_thres <= 1, "--nms-thres must be in (0, 1]")
        _require(self.eval_batch is None or self.eval_batch >= 1, "--eval-batch must be >= 1")


@dataclass
class RuntimeArgs:
    """Where and how the step runs; the weights' averaging and what stays frozen."""

    device: str = device_option()
    amp: str = amp_option()
    compile: bool = option(False, "torch.compile the model", action="store_true")
    sync_bn: bool = option(False, "SyncBatchNorm across GPUs under torchrun (CUDA only)", action="store_true")
    channels_last: bool = option(False, "channels_last memory format", action="store_true")
    ema: bool = option(True, "evaluate and export an exponential moving average of the weights",
                       action=argparse.BooleanOptionalAction)
    ema_decay: float | None = option(None, "EMA decay, reached after the --ema-ramp (default: fitted to "
                                     "the run: averages over its last ~20%% of planned iterations, "
                                     "1 - 1 / (0.2 x iterations) within 0.9-0.9999)", type=float)
    ema_ramp: float | None = option(None, "iterations over which the EMA decay ramps up (default: 8%% of "
                                    "the planned iterations, at most 2000)", type=float)
    clip_norm: float = option(10.0, "gradient-norm clip (0: off)", type=float)
    freeze: int = option(0, "keep the first N layers (weights and BN statistics) as loaded", type=int)
    bn_momentum: float | None = option(None, "BatchNorm momentum, the weight of each mini-batch in the "
                                       "running statistics (default: 0.03; Darknet's is 0.01)", type=float)
    bn_train: str = option("torch", "BatchNorm in training: torch (PyTorch's fused formula) or darknet "
                           "(Darknet's: the unbiased variance, (x - mean) / (sqrt(var) + 1e-6), and its "
                           "hand-written backward; slower; --sync-bn replaces it)", choices=BN_TRAIN_CHOICES)
    seed: int = option(0, "random seed (-1 behaves as 0)", type=int)

    def check(self) -> None:
        self.seed = max(self.seed, 0)
        _require(self.amp in AMP_CHOICES, f"--amp must be one of {', '.join(AMP_CHOICES)}")
        _require(self.ema_decay is None or 0 < self.ema_decay < 1, "--ema-decay must be in (0, 1)")
        _require(self.ema_ramp is None or self.ema_ramp > 0, "--ema-ramp must be > 0")
        _require(self.clip_norm >= 0, "--clip-norm must be >= 0 (0: off)")
        _require(self.freeze >= 0, "--freeze must be >= 0 (a layer count)")
        _require(self.bn_momentum is None or 0 < self.bn_momentum < 1, "--bn-momentum must be in (0, 1)")
        _require(self.bn_train in BN_TRAIN_CHOICES,
                 f"--bn-train must be one of {', '.join(BN_TRAIN_CHOICES)}")


@dataclass
class OutputArgs:
    """Where the run writes, what it keeps and where it logs."""

    project: str = option("runs/train", "parent folder of run directories", "--project", "--logdir")
    name: str = option("exp", "run directory name (exp, exp2, ... when taken)")
    exist_ok: bool = option(False, "reuse <project>/<name> if it exists", action="store_true")
    checkpoint_interval: int = option(1, "also keep weights/epoch<N>.pt every N epochs (0: last.pt and "
                                      "best.pt only)", type=int)
    wandb: bool = option(False, "also log to Weights & Biases (WANDB_MODE=offline works)",
                         action="store_true")
    log_interval: int = option(10, "iterations between loss readouts (one device sync each)", type=int)

    def check(self) -> None:
        _require(self.checkpoint_interval >= 0, "--checkpoint-interval must be >= 0 (0: last/best only)")
        _require(self.log_interval >= 1, "--log-interval must be >= 1")


GROUPS: dict[str, type] = {
    "data_args": DataArgs,
    "schedule": ScheduleArgs,
    "optim": OptimArgs,
    "augment": AugmentArgs,
    "loss": LossArgs,
    "eval": EvalArgs,
    "runtime": RuntimeArgs,
    "output": OutputArgs,
}
# What --resume takes from the command line; everything else that shapes the numbers is the run's own.
RESUMABLE = ("epochs", "max_batches", "time_limit_min", "workers", "device", "wandb", "verbose")


@dataclass
class TrainConfig:
    """``turboyolo train`` settings: the inputs, then one group per concern.

    Build one with :meth:`build` (flat keyword names, as the flags), :meth:`from_flags` (parsed
    arguments) or :meth:`from_dict` (a checkpoint's or ``config.yaml``'s copy).
    """

    cfg: str = ""
    data: str = ""
    weights: str | None = None
    resume: str | None = None
    hyp: str | None = None  # the --hyp file the augment and loss values came from (they are stored too)
    data_args: DataArgs = field(default_factory=DataArgs)
    schedule: ScheduleArgs = field(default_factory=ScheduleArgs)
    optim: OptimArgs = field(default_factory=OptimArgs)
    augment: AugmentArgs = field(default_factory=AugmentArgs)
    loss: LossArgs = field(default_factory=LossArgs)
    eval: EvalArgs = field(default_factory=EvalArgs)
    runtime: RuntimeArgs = field(default_factory=RuntimeArgs)
    output: OutputArgs = field(default_factory=OutputArgs)
    given: tuple[str, ...] = ()  # option names set explicitly (flags passed, keywords given)

    def __post_init__(self) -> None:
        for group in GROUPS:
            getattr(self, group).check()
        if not self.cfg and self.weights in ARCHITECTURES and not Path(self.weights).exists():
            self.cfg = self.weights  # `--weights yolov4-tiny` alone: its canonical network
        if not self.cfg and not self.resume:
            raise FlagError("--model/--cfg is required (a Darknet .cfg, `turboyolo cfg` writes one; or an "
                            f"architecture: {', '.join(ARCHITECTURES)}), unless --resume names a checkpoint")
        if not self.data and not self.resume:
            raise FlagError("--data is required (a .data file or data.yaml)")

    # ------------------------------------------------------------------ construction
    @classmethod
    def build(cls, cfg: str = "", data: str = "", weights: str | None = None, resume: str | None = None,
              hyp: str | None = None, base: dict[str, Any] | None = None, **options: Any) -> TrainConfig:
        """From flat option names (``epochs=5, cache="ram"``), the Python API's spelling of the flags.

        ``base``: option values to start from (a ``--config`` file's, :func:`read_config`); then ``hyp``, a
        YAML file of augmentation and loss values (:func:`read_hyp`); options given here win over both.
        """
        groups: dict[str, dict[str, Any]] = {group: {} for group in GROUPS}
        base = dict(base or {})
        cfg, data, weights = (given or base.get(key) for key, given in
                              (("cfg", cfg), ("data", data), ("weights", weights)))
        hyp = hyp or base.get("hyp")
        for key in INPUTS:
            base.pop(key, None)
        from_file = read_hyp(hyp) if hyp else {}
        base, from_file, options = renamed(base), renamed(from_file), renamed(options)
        options = checked(options, "")  # the Python API's keywords (the flags' types are argparse's)
        for name, value in {**base, **from_file, **options}.items():
            group = OPTION_GROUP.get(name)
            if group is None:
                raise FlagError(f"unknown training option {name!r}; see `turboyolo train -h`")
            groups[group][name] = tuple(value) if isinstance(value, list) else value
        made = {group: GROUPS[group](**values) for group, values in groups.items()}
        return cls(cfg=str(cfg or ""), data=str(data or ""), weights=str(weights) if weights else None,
                   resume=str(resume) if resume else None, hyp=str(hyp) if hyp else None,
                   given=tuple(dict.fromkeys([*base, *options])), **made)

    @classmethod
    def from_flags(cls, args: argparse.Namespace) -> TrainConfig:
        """From ``turboyolo train``'s parsed flags (only those the user passed are present); with
        ``--config FILE`` the file's values first, the flags over them."""
        values = {name: getattr(args, name) for name in OPTION_GROUP if hasattr(args, name)}
        inputs = {key: getattr(args, key, None) for key in INPUTS}
        base: dict[str, Any] = {}
        if getattr(args, "config", None):
            base = read_config(args.config)
        return cls.build(inputs["cfg"] or "", inputs["data"] or "", inputs["weights"], inputs["resume"],
                         inputs["hyp"], base=base, **values)

    @classmethod
    def from_dict(cls, values: dict, source: str = "") -> TrainConfig:
        """From :meth:`as_dict` output, or the flat dict of a turboyolo 0.1 checkpoint; ``source`` (the
        checkpoint) is named when a value has the wrong type or range."""
        flat: dict[str, Any] = {}
        for key, value in values.items():
            if key in GROUPS and isinstance(value, dict):
                flat.update(value)
            else:
                flat[key] = value
        flat = renamed(flat)
        if "aug_scale_min" in flat or "aug_scale_max" in flat:  # 0.1 stored the zoom range as two fields
            flat["aug_scale"] = (flat.pop("aug_scale_min", 0.75), flat.pop("aug_scale_max", 1.25))
        flat.setdefault("obj_iou", False)  # saved before it became the default: trained with target 1
        if "optim" not in values and "lr_schedule" not in flat:  # saved before 0.3: the cfg's schedule
            flat["lr_schedule"] = "darknet"  # and Darknet's BN momentum, as it was trained
            flat["bn_momentum"] = flat.get("bn_momentum") or 0.01
            flat["close_mosaic"] = flat.get("close_mosaic") or 0
        inputs = {key: flat.pop(key, None) for key in INPUTS}
        given = tuple(RENAMED.get(name, name) for name in flat.pop("given", ()) or ())
        options = {key: value for key, value in flat.items() if key in OPTION_GROUP}
        if source:
            checked({**options, **{key: value for key, value in inputs.items() if value is not None}}, source)
        config = cls.build(inputs["cfg"] or "", inputs["data"] or "", inputs["weights"], inputs["resume"],
                           **options)  # the stored values, not the --hyp file again (it may be gone)
        config.given, config.hyp = given, inputs["hyp"]
        return config

    def as_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out["given"] = list(self.given)
        out["augment"]["aug_scale"] = list(self.augment.aug_scale)
        return out

    def resumed(self, passed: TrainConfig) -> TrainConfig:
        """This (saved) config with the options of :data:`RESUMABLE` that ``passed`` sets explicitly.

        Returns the merged config and leaves ``passed.given`` options outside :data:`RESUMABLE` to the
        caller to report as ignored.
        """
        refuse_new_inputs(self, passed)
        merged = TrainConfig.from_dict(self.as_dict())
        for name in passed.given:
            if name in RESUMABLE:
                group = OPTION_GROUP[name]
                setattr(getattr(merged, group), name, getattr(getattr(passed, group), name))
        merged.resume = passed.resume
        for group in GROUPS:
            getattr(merged, group).check()
        return merged

    def get(self, name: str) -> Any:
        """An option by its flat name (``config.get("epochs")``)."""
        return getattr(getattr(self, OPTION_GROUP[name]), name)

    def replace(self, **options: Any) -> TrainConfig:
        """A copy with options changed by their flat names (experiments, the demo recipe)."""
        values, options = self.as_dict(), renamed(options)
        for name, value in options.items():
            if name in INPUTS:
                values[name] = value
            elif name in OPTION_GROUP:
                values[OPTION_GROUP[name]][name] = value
            else:
                raise FlagError(f"unknown training option {name!r}; see `turboyolo train -h`")
        values["given"] = sorted(set(self.given) | set(options))
        return TrainConfig.from_dict(values)


OPTION_GROUP: dict[str, str] = {f.name: group for group, kind in GROUPS.items() for f in fields(kind)}
# The keys of a --hyp file: every augmentation and loss knob.
HYP_GROUPS = ("augment", "loss")
HYP_OPTIONS = tuple(f.name for group in HYP_GROUPS for f in fields(GROUPS[group]))
RUN_KEYS = (*GROUPS, *(f.name for f in fields(TrainConfig) if f.name not in GROUPS), "plan")  # config.yaml
INPUTS = ("cfg", "data", "weights", "resume", "hyp")  # what a run reads besides its options


# Options renamed since they were first stored (config.yaml, checkpoints, recipes, --hyp files): old -> new.
RENAMED = {"assign_iou_thresh": "assign_iou_thres"}  # 0.2: one spelling, the flag's


def renamed(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with the option names of :data:`RENAMED` spelled as now."""
    return {RENAMED.get(key, key): value for key, value in values.items()}


RECIPE_DIR = Path(__file__).parents[1] / "resources" / "recipes"
RECIPES = {path.stem: path for path in sorted(RECIPE_DIR.glob("*.yaml"))}  # packaged: --config trees


def read_config(path: str | Path) -> dict[str, Any]:
    """The values of a ``--config`` file, flat: a run's ``config.yaml`` (grouped by section) or a recipe
    (grouped or flat; a name of :data:`RECIPES`, such as ``trees``, is the packaged recipe of that
    sample), with ``cfg``, ``data`` and ``weights`` if it names them. Relative paths that do
    not exist from the working directory are taken from the file's folder. ``given``, ``plan`` (what a
    run derived) and ``resume`` are not read: a recipe starts a new run."""
    path = Path(path)
    if not path.exists() and str(path) in RECIPES:
        path = RECIPES[str(path)]
    if not path.exists():
        raise FlagError(f"--config {path}: no such file, and not a packaged recipe; the packaged recipes: "
                        f"{', '.join(RECIPES)} (or give a run's config.yaml or a recipe file)")
    loaded = read_yaml(path, "--config")
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise FlagError(f"--config {path}: expected a mapping of option names to values (as a run's "
                        "config.yaml)")
    flat: dict[str, Any] = {}
    for key, value in loaded.items():
        if key in GROUPS and isinstance(value, dict):
            flat.update(value)
        elif key not in ("given", "plan", "resume"):
            flat[key] = value
    flat = renamed(flat)
    unknown = sorted(str(key) for key in set(flat) - set(OPTION_GROUP) - set(INPUTS))
    if unknown:
        raise FlagError(f"--config {path}: unknown key(s) {', '.join(unknown)}; the keys are those of a "
                        "run's config.yaml (the flags of `turboyolo train` with underscores)")
    for key in ("cfg", "data", "weights", "hyp"):
        value = flat.get(key)
        if isinstance(value, str) and value and not Path(value).is_absolute() and not Path(value).exists():
            beside = path.parent / value
            if beside.exists():
                flat[key] = str(beside)
    flat.pop("resume", None)
    flat = checked(flat, f"--config {path}")
    return {key: tuple(value) if isinstance(value, list) else value for key, value in flat.items()}


def read_hyp(path: str | Path) -> dict[str, Any]:
    """The option values of a ``--hyp`` YAML file: flat (``mosaic: 0.5``) or grouped as in a run's
    ``config.yaml`` (``augment: {mosaic: 0.5}``, ``loss: {...}``; a whole ``config.yaml`` works, its
    other sections are not read); keys are :data:`HYP_OPTIONS`."""
    loaded = read_yaml(path, "--hyp")
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise FlagError(f"--hyp {path}: expected a mapping of option names to values")
    flat: dict[str, Any] = {}
    run_config = any(isinstance(loaded.get(group), dict) for group in HYP_GROUPS)
    for key, value in loaded.items():
        if key in HYP_GROUPS and isinstance(value, dict):
            flat.update(value)
        elif not (run_config and key in RUN_KEYS):  # a run's config.yaml: only its recipe is read
            flat[key] = value
    flat = renamed(flat)
    unknown = sorted(set(flat) - set(HYP_OPTIONS))
    if unknown:
        raise FlagError(f"--hyp {path}: unknown key(s) {', '.join(map(str, unknown))}; the keys are the "
                        f"augmentation and loss options: {', '.join(HYP_OPTIONS)}")
    flat = checked(flat, f"--hyp {path}")
    return {key: tuple(value) if isinstance(value, list) else value for key, value in flat.items()}


def refuse_new_inputs(saved: TrainConfig, passed: TrainConfig) -> None:
    """``--resume`` continues the run's own network, weights and data: a ``--cfg``, ``--weights``,
    ``--data`` or ``--hyp`` other than the run's is refused (never silently dropped)."""
    for key in ("weights", "cfg", "data", "hyp"):  # --weights NAME alone also sets cfg: name --weights
        mine, given = getattr(saved, key), getattr(passed, key)
        if given and given != mine and not (mine and _same_file(mine, given)):
            raise FlagError(
                f"--resume {passed.resume} continues its run as it was set up (--{key} {mine or 'none'}); "
                f"--{key} {given} cannot change it: drop --{key} to continue, or start a new run from these "
                f"weights: `turboyolo train --config <run>/config.yaml --weights {passed.resume} "
                f"--{key} {given}`")


def _same_file(first: str, second: str) -> bool:
    try:
        return Path(first).resolve() == Path(second).resolve()
    except OSError:
        return False


# ---------------------------------------------------------------- values from files: typed and in range
# Each option's declared type (the field's annotation); a --config / --hyp file, a checkpoint's config and
# the Python API's keywords are held to it, and to the option's range, with the file and the key named.
OPTION_TYPES = {f.name: str(f.type) for kind in GROUPS.values() for f in fields(kind)}
OPTION_TYPES.update(dict.fromkeys(INPUTS, "str | None"))


def _flag(name: str) -> str:
    """The option ``name`` as its flag and keyword (``--time-limit / time_limit_min``)."""
    kind = GROUPS.get(OPTION_GROUP.get(name, ""))
    flags = next((f.metadata.get("flags") for f in fields(kind) if f.name == name), ()) if kind else ()
    flag = next((f for f in flags if f.startswith("--")), "--" + name.replace("_", "-"))
    return f"{flag} ({name})"


def checked(values: dict[str, Any], source: str) -> dict[str, Any]:
    """``values`` (flat option names) in their declared types (:func:`turboyolo.formats.yamlfile.typed`)
    and ranges (each group's ``check``); ``anchors`` may be a YAML list of numbers (or of pairs).

    Raises:
        ConfigError (a wrong type), FlagError (out of range): naming ``source`` (the file; empty for
            keywords and flags) and the key.
    """
    out = {}
    for key, value in values.items():
        if key == "anchors" and isinstance(value, list | tuple):
            items = [v for item in value for v in (item if isinstance(item, list | tuple) else [item])]
            value = ",".join(f"{typed(v, 'float', key, source):g}" for v in items)
        out[key] = typed(value, OPTION_TYPES.get(key, "?"), key if source else _flag(key), source)
    for group, kind in GROUPS.items():
        mine = {key: value for key, value in out.items() if OPTION_GROUP.get(key) == group}
        try:
            kind(**mine).check()  # the group's range checks, on this source's values alone
        except TurboYoloError as err:  # the same kind of error, the file named
            if not source:
                raise
            raise type(err)(f"{source}: {err}") from None
    return out


def add_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of every option of :class:`TrainConfig`, one argument group per config group
    (:func:`turboyolo.options.add_flags`: a flag not passed is absent from the namespace)."""
    add_group_flags(parser, GROUPS)

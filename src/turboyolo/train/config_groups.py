"""The option groups of ``turboyolo train``: one small dataclass per concern, each field declared once
with its help text, flag spellings (PyTorch-YOLOv3's names included) and validation.

Darknet ``[net]`` values are the defaults of the network (batch, subdivisions, size, optimizer, schedule);
the fields that override them are ``None`` until set. ``auto`` (``--cache``, ``--augment-on``,
``--workers`` left unset) is decided at the start of a run from measurements
(:mod:`turboyolo.train.auto`). :class:`turboyolo.train.config.TrainConfig` holds one of each.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from turboyolo.data.scan import UNREVIEWED_CHOICES
from turboyolo.devices import AMP_CHOICES
from turboyolo.formats.darknet_cfg import parse_anchor_list
from turboyolo.options import (
    amp_option,
    check_img_size,
    device_option,
    exist_ok_option,
    img_size_option,
    option,
    project_option,
    run_name_option,
)
from turboyolo.options import require as _require
from turboyolo.train.metrics import EVAL_CONF_THRES, EVAL_IOU_THRES, EVAL_NMS_THRES

CACHE_CHOICES = ("auto", "none", "ram", "disk")
AUGMENT_ON_CHOICES = ("auto", "cpu", "device")
BOX_LOSSES = ("cfg", "darknet", "mse", "iou", "giou", "diou", "ciou")  # turboyolo.train.loss.BOX_LOSSES
BN_TRAIN_CHOICES = ("torch", "darknet")
LOADERS = ("turboyolo", "darknet")
ARITHMETICS = ("torch", "darknet")


@dataclass
class DataArgs:
    """What the loader feeds the network."""

    img_size: int | None = img_size_option("the cfg's width")
    cache: str = option("auto", "decode each image once into a prepared cache (`turboyolo prepare` "
                        "builds the disk one ahead of time); auto: none when decoding keeps the step fed, "
                        "else ram when it fits, else disk (measured at the start, one line says why)",
                        choices=CACHE_CHOICES)
    workers: int | None = option(None, "loader worker processes (default: auto, enough to feed the step, "
                                 "at most CPUs - 1)", "--workers", "--n-cpu", type=int)
    augment_on: str = option("auto", "where affine/letterbox, HSV and flip run: the loader's CPU processes, "
                             "or the training device as batched tensor ops (then the loader only copies "
                             "cached uint8 images); auto: device only when the CPU "
                             "would make the step wait and the device path does the same augmentation",
                             choices=AUGMENT_ON_CHOICES)
    single_cls: bool = option(False, "train every class as one (a cfg with more classes is rewritten to 1; "
                              "names become ['item'] unless the data set has one)", action="store_true")
    image_weights: bool = option(False, "draw training images by class weight (1 / boxes of the class, "
                                 "summed over an image's boxes) instead of each once per epoch",
                                 action="store_true")
    unreviewed: str = option("include", "training images whose labels a model made and nobody reviewed "
                             "(`turboyolo label`, `turboyolo review`): include them as labelled, exclude "
                             "them, or ignore their background (their boxes count, the rest of the image "
                             "gets no 'no object' loss)", choices=UNREVIEWED_CHOICES)

    def check(self) -> None:
        check_img_size(self.img_size)
        _require(self.cache in CACHE_CHOICES, f"--cache must be one of {', '.join(CACHE_CHOICES)}")
        _require(self.augment_on in AUGMENT_ON_CHOICES, "--augment-on must be auto, cpu or device")
        _require(self.workers is None or self.workers >= 0, "--workers must be >= 0")
        _require(self.unreviewed in UNREVIEWED_CHOICES,
                 f"--unreviewed must be one of {', '.join(UNREVIEWED_CHOICES)}, got {self.unreviewed!r}")


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
    loader: str = option("turboyolo", "how training images are drawn and made: turboyolo (epochs, the "
                         "options below) or darknet (pjreddie's load_data_detection: random list entries, "
                         "the cfg's jitter/hue/saturation/exposure as Darknet applies them, a flip with "
                         "--fliplr; exact/loader.py)", choices=LOADERS)
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
    iou_thres: float = option(EVAL_IOU_THRES, "IoU a detection needs with a ground truth to count as found, "
                              "for precision / recall / F1 at --conf-thres (AP: at 0.5 and 0.5:0.95)",
                              type=float)
    conf_thres: float = option(EVAL_CONF_THRES, "score where precision, recall and F1 are read", type=float)
    nms_thres: float = option(EVAL_NMS_THRES, "IoU of per-class NMS in evaluation", type=float)
    eval_batch: int | None = option(None, "images per evaluation batch (default: 2 x the mini-batch)",
                                    type=int)
    verbose: bool = option(False, "print the per-class table every evaluation", "-v", "--verbose",
                           action="store_true")
    rect: bool = option(False, "evaluate in batches of similar aspect ratio, each letterboxed to its own "
                        "rectangle (less padding; the same boxes)", action="store_true")

    def check(self) -> None:
        _require(self.evaluation_interval >= 0, "--evaluation-interval must be >= 0 (0: never)")
        check_img_size(self.val_img_size, "--val-img-size")
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
    channels_last: bool | None = option(None, "channels_last memory format (default: on for the CPU, off "
                                        "on CUDA)", action=argparse.BooleanOptionalAction)
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
    arithmetic: str = option("torch", "the training step's float arithmetic: torch (PyTorch's kernels and "
                             "autograd) or darknet (the float32 operations of Darknet's compiled CPU code: "
                             "with --config darknet's settings the whole step, forward, deltas, backward "
                             "and update, equal to the darknet binary's to the bit; else the forward pass; "
                             "CPU only, some 100x slower; exact/step.py)", choices=ARITHMETICS)
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

    project: str = project_option("runs/train")
    name: str = run_name_option()
    exist_ok: bool = exist_ok_option()
    checkpoint_interval: int = option(1, "also keep weights/epoch<N>.pt every N epochs (0: last.pt and "
                                      "best.pt only)", type=int)
    wandb: bool = option(False, "also log to Weights & Biases (WANDB_MODE=offline works)",
                         action="store_true")
    log_interval: int = option(10, "iterations between loss readouts (one device sync each)", type=int)

    def check(self) -> None:
        _require(self.checkpoint_interval >= 0, "--checkpoint-interval must be >= 0 (0: last/best only)")
        _require(self.log_interval >= 1, "--log-interval must be >= 1")

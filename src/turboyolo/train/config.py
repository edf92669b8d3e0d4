"""Typed training / evaluation configs built from the command line; validation names the flag.

Darknet ``[net]`` values are the defaults (batch, subdivisions, size, optimizer, schedule); flags
override them. ``TrainConfig.as_dict()`` is what the run directory and every checkpoint store.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from turboyolo.errors import TurboYoloError

AMP_CHOICES = ("auto", "off", "bf16", "fp16")
CACHE_CHOICES = ("none", "ram", "disk")


class FlagError(TurboYoloError):
    """A command-line value that cannot work."""


@dataclass
class TrainConfig:
    """``turboyolo train`` settings (PyTorch-YOLOv3 flag names in comments where they differ)."""

    cfg: str = ""  # --model/-m
    data: str = ""  # --data/-d
    weights: str | None = None  # --pretrained_weights
    resume: str | None = None
    epochs: int = 300
    max_batches: int | None = None  # None: the cfg's; 0: no limit (epochs decide)
    batch: int | None = None  # None: the cfg's
    subdivisions: int | None = None
    img_size: int | None = None
    val_img_size: int | None = None  # None: the training size (small objects: evaluate larger)
    workers: int | None = None  # --n_cpu
    device: str = "auto"
    amp: str = "auto"
    cache: str = "none"
    augment_on: str = "cpu"  # cpu | device: warp + colour as batched tensor ops after the copy
    ema: bool = True
    compile: bool = False
    sync_bn: bool = False  # SyncBatchNorm under torchrun (CUDA only)
    channels_last: bool = False
    multiscale: bool = False  # --multiscale_training
    augment: bool = True  # False: letterbox only (overfitting tests, debugging)
    aug_scale_min: float = 0.75  # random zoom range of the training augmentation
    aug_scale_max: float = 1.25
    checkpoint_interval: int = 1
    evaluation_interval: int = 1
    iou_thres: float = 0.5
    conf_thres: float = 0.1
    nms_thres: float = 0.5
    eval_batch: int | None = None  # None: 2 x the training mini-batch
    clip_norm: float = 10.0
    freeze: int = 0  # layers [0, freeze) keep their loaded weights and BN statistics
    ema_decay: float = 0.9999
    ema_ramp: float = 2000.0  # iterations over which the EMA decay ramps up (short runs: ~20)
    bn_momentum: float | None = None  # None: Darknet's 0.01; short runs want 0.03-0.1
    box_loss: str = "darknet"
    anchor_ratio: float = 0.0  # > 0: every anchor within this w/h factor of a box trains on it (YOLOv5: 4)
    obj_iou: bool = False  # objectness target = IoU of the assigned prediction (YOLOv5) instead of 1
    box_gain: float = 1.0  # multipliers of the loss terms (per-image sums)
    obj_gain: float = 1.0
    cls_gain: float = 1.0
    assign_iou_thresh: float = 1.0  # AlexeyAB's iou_thresh: extra anchors per box above this shape IoU
    seed: int = 0  # -1: PyTorch-YOLOv3's "no seed" (we still seed, with 0)
    project: str = "runs/train"  # --logdir
    name: str = "exp"
    exist_ok: bool = False
    wandb: bool = False
    verbose: bool = False
    time_limit_min: float = 0.0  # 0: none
    log_interval: int = 10

    def __post_init__(self) -> None:
        checks = [
            (self.epochs >= 1, "--epochs must be >= 1"),
            (self.amp in AMP_CHOICES, f"--amp must be one of {', '.join(AMP_CHOICES)}"),
            (self.cache in CACHE_CHOICES, f"--cache must be one of {', '.join(CACHE_CHOICES)}"),
            (self.augment_on in ("cpu", "device"), "--augment-on must be cpu or device"),
            (self.batch is None or self.batch >= 1, "--batch must be >= 1"),
            (self.subdivisions is None or self.subdivisions >= 1, "--subdivisions must be >= 1"),
            (
                self.img_size is None or (self.img_size >= 32 and self.img_size % 32 == 0),
                "--img-size must be a multiple of 32",
            ),
            (
                self.val_img_size is None or (self.val_img_size >= 32 and self.val_img_size % 32 == 0),
                "--val-img-size must be a multiple of 32",
            ),
            (self.checkpoint_interval >= 0, "--checkpoint-interval must be >= 0 (0: last/best only)"),
            (self.evaluation_interval >= 0, "--evaluation-interval must be >= 0 (0: never)"),
            (0 < self.iou_thres <= 1, "--iou-thres must be in (0, 1]"),
            (0 <= self.conf_thres < 1, "--conf-thres must be in [0, 1)"),
            (0 < self.nms_thres <= 1, "--nms-thres must be in (0, 1]"),
            (self.freeze >= 0, "--freeze must be >= 0 (a layer count)"),
            (0 < self.aug_scale_min <= self.aug_scale_max, "--aug-scale needs 0 < MIN <= MAX"),
            (0 < self.ema_decay < 1, "--ema-decay must be in (0, 1)"),
            (self.box_loss in ("darknet", "giou"), "--box-loss must be darknet or giou"),
        ]
        for ok, message in checks:
            if not ok:
                raise FlagError(message)
        if not self.cfg and not self.resume:
            raise FlagError(
                "--model/--cfg is required (a Darknet .cfg; `turboyolo cfg` writes one), "
                "unless --resume names a checkpoint"
            )
        if not self.data and not self.resume:
            raise FlagError("--data is required (a .data file or data.yaml)")

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> TrainConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known})

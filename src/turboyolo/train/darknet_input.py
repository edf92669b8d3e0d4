"""The training loader of ``--loader darknet`` (the ``darknet`` recipe), from the run's resolved options.

Takes the cfg's ``[yolo]`` jitter and ``max``, the resolved hue / saturation / exposure and ``--fliplr``
into :class:`~turboyolo.data.darknet_augment.DarknetAugment`, and says once, at the start, what the run
reproduces of Darknet's input and what it cannot (Darknet's random numbers) or does not use (turboyolo's
own augmentation options, which pjreddie's ``load_data_detection`` has no counterpart for).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from turboyolo.data.darknet_augment import DarknetAugment, jitter_note
from turboyolo.data.darknet_loader import build_darknet_loader
from turboyolo.data.loader import DetectionLoader, default_workers
from turboyolo.data.scan import Sample
from turboyolo.formats.darknet_cfg import ModelSpec
from turboyolo.train.config import TrainConfig
from turboyolo.train.defaults import first_yolo

DARKNET_MAX_BOXES = 90  # [yolo] max


def darknet_augment(config: TrainConfig, spec: ModelSpec) -> DarknetAugment | None:
    """What ``load_data_detection`` is given (None with ``--no-augment``); ``config`` is resolved
    (:class:`turboyolo.train.resolve.ResolvedRun`), so every value is the effective one."""
    aug = config.augment
    if not aug.augment:
        return None
    yolo = first_yolo(spec)
    max_boxes = int(dict(yolo.extra).get("max", DARKNET_MAX_BOXES)) if yolo is not None else DARKNET_MAX_BOXES
    return DarknetAugment(jitter=float(aug.jitter), hue=float(aug.hue), saturation=float(aug.saturation),
                          exposure=float(aug.exposure), flip=float(aug.fliplr), max_boxes=max_boxes)


def unused_options(config: TrainConfig) -> list[str]:
    """turboyolo's augmentation options set to something ``load_data_detection`` has no counterpart for."""
    aug, data = config.augment, config.data_args
    unused = [f"--{name.replace('_', '-')} {value}" for name, value in (
        ("degrees", aug.degrees), ("translate", aug.translate), ("mosaic", aug.mosaic), ("mixup", aug.mixup),
        ("flipud", aug.flipud)) if value]
    if tuple(aug.aug_scale) != (1, 1):
        unused.append(f"--aug-scale {aug.aug_scale[0]:g} {aug.aug_scale[1]:g}")
    flags = (("--multiscale", aug.multiscale), ("--image-weights", data.image_weights),
             ("--augment-on device", data.augment_on == "device"),
             (f"--cache {data.cache}", data.cache != "none"))
    unused += [flag for flag, on in flags if on]
    return unused


def darknet_train_loader(config: TrainConfig, spec: ModelSpec, samples: Sequence[Sample], mini_batch: int,
                         rank: int, world_size: int, log: Callable[[str], None] = print) -> DetectionLoader:
    """The loader, and the one line (two with unused options) that says what it does."""
    params = darknet_augment(config, spec)
    net = spec.net
    per_iteration = max(net.subdivisions // world_size, 1)
    what = (jitter_note(params) if params is not None
            else "--no-augment: placed in the middle, no colour, no flip")
    log(f"loader: darknet (pjreddie's load_data_detection): {mini_batch * per_iteration * world_size} list "
        f"entries drawn at random, with replacement, per iteration; the whole image placed on a 0.5-grey "
        f"{net.width}x{net.height} canvas keeping its aspect; {what}")
    ignored = unused_options(config)
    if ignored:
        log("loader: darknet does not apply " + ", ".join(ignored) + " (Darknet has no such augmentation)")
    workers = config.data_args.workers
    return build_darknet_loader(samples, net_wh=(net.width, net.height), batch_size=mini_batch,
                                batches_per_iteration=per_iteration, params=params,
                                workers=default_workers(world_size) if workers is None else workers,
                                seed=config.runtime.seed, rank=rank, world_size=world_size)

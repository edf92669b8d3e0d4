"""The ``turboyolo doctor`` job: a request in; measurements, verdict and ``doctor.md`` / ``doctor.json`` out.

:mod:`turboyolo.doctor.measure` times the stages, :mod:`turboyolo.doctor.verdict` names the bottleneck
and renders the report; this module resolves what the request leaves open (the cfg's size and batch,
the device, worker counts), runs both and writes the two files into a fresh run directory.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from turboyolo.data.loader import default_workers
from turboyolo.devices import amp_dtype_for, resolve_device
from turboyolo.doctor.measure import DoctorOptions, measure
from turboyolo.doctor.verdict import GPU_RATES, StageTimings, Verdict, diagnose, render_markdown
from turboyolo.errors import FlagError
from turboyolo.formats.darknet_cfg import parse_cfg
from turboyolo.options import RunDirArgs, amp_option, check_img_size, device_option, img_size_option, option
from turboyolo.rundir import removed_if_empty
from turboyolo.train.config import AUGMENT_ON_CHOICES, CACHE_CHOICES


@dataclass
class DoctorArgs:
    """What to measure (``None``: the cfg's value or the default). ``--assume-step-ms`` / ``--assume-gpu``
    (at most one) select data-only mode: the training step is taken as that many ms per mini-batch, or as
    that GPU's time from the model's FLOPs, not measured."""

    split: str = option("train", "which split to measure")
    device: str = device_option()
    img_size: int | None = img_size_option("the cfg's width")
    batch: int | None = option(None, "images per iteration (default: the cfg's)", type=int)
    subdivisions: int | None = option(None, "mini-batches per iteration", type=int)
    amp: str = amp_option()
    workers: int | None = option(None, "the loader workers you train with (default: auto's choice)",
                                 "--n-cpu", "--workers", type=int)
    worker_counts: tuple[int, ...] | None = option(None, "comma-separated worker counts to measure the "
                                                   "loader at (default: 0,1,2,4,... up to CPUs - 1)")
    cache: str = option("auto", "the --cache you train with (auto: what train would choose)",
                        choices=CACHE_CHOICES)
    augment_on: str = option("auto", "the --augment-on you train with (auto: what train would choose)",
                             choices=AUGMENT_ON_CHOICES)
    assume_step_ms: float | None = option(None, "data-only mode: take the training step as this many ms per "
                                          "mini-batch", type=float)
    assume_gpu: str | None = option(None, "data-only mode: take the step time of this GPU (from the model's "
                                    "FLOPs)", choices=tuple(GPU_RATES))
    assume_cpus: int | None = option(None, "predict for a machine with this many cores like this one's "
                                     "(the GPU machine you plan to train on; default: the cores this "
                                     "process may use)", type=int)
    epochs: int | None = option(None, "the epochs you train for (default: train's): the report says what "
                                "share of such a run its start takes", "-e", "--epochs", type=int)
    images: int = option(32, "images of the split used per stage", type=int)
    repeats: int = option(3, "timed repeats per stage (median)", type=int)

    def __post_init__(self) -> None:
        if isinstance(self.worker_counts, str):
            try:
                self.worker_counts = tuple(int(c) for c in self.worker_counts.split(","))
            except ValueError as err:
                raise FlagError(f"--worker-counts {self.worker_counts!r}: comma-separated integers") from err
        if self.assume_step_ms is not None and self.assume_step_ms <= 0:
            raise FlagError(f"--assume-step-ms {self.assume_step_ms}: give a positive step time in ms")
        if self.assume_step_ms is not None and self.assume_gpu is not None:
            raise FlagError("--assume-step-ms and --assume-gpu exclude each other; pass one")
        if self.epochs is not None and self.epochs < 1:
            raise FlagError(f"--epochs {self.epochs}: give the epochs you train for (>= 1)")
        if self.assume_cpus is not None and not 1 <= self.assume_cpus <= 1024:
            raise FlagError(f"--assume-cpus {self.assume_cpus}: give the planned machine's cores (1-1024)")


GROUPS: dict[str, type] = {"doctor": DoctorArgs, "run_dir": RunDirArgs}


@dataclass
class DoctorRequest:
    """What ``turboyolo doctor`` is asked to do: measure training ``cfg`` on ``data`` as ``doctor`` says."""

    data: str | Path
    cfg: str | Path | None
    doctor: DoctorArgs = field(default_factory=DoctorArgs)
    run_dir: RunDirArgs = field(default_factory=RunDirArgs)

    def __post_init__(self) -> None:
        if not self.cfg:
            raise FlagError("--model/--cfg is required: the Darknet .cfg you train (e.g. `turboyolo cfg "
                            "yolov3 --num-classes N -o my.cfg`)")


@dataclass
class DoctorReport:
    """The measurements, the verdict, the rendered Markdown and the run directory holding the files."""

    run_dir: Path
    timings: StageTimings
    verdict: Verdict
    markdown: str

    def summary(self) -> str:
        """The Markdown report (after a blank line) and where its two files are."""
        return f"\n{self.markdown}\nreport: {self.run_dir / 'doctor.md'}, {self.run_dir / 'doctor.json'}"


def run_doctor(request: DoctorRequest, log: Callable[[str], object] = lambda _: None) -> DoctorReport:
    """Measure every stage on ``request.data``, name the bottleneck, write ``doctor.md`` and ``doctor.json``.

    ``log`` receives the scan summary and each stage's timing as it is measured (nothing by default).

    Raises:
        FlagError: an ``img_size`` that is not a multiple of 32, a batch that subdivisions do not divide,
            a bad device or amp.
        ConfigError, DataError: a bad cfg or data set.
    """
    args = request.doctor
    spec = parse_cfg(request.cfg)
    net = spec.net
    img_size = args.img_size or net.width
    check_img_size(img_size)
    spec = spec.with_net(width=img_size, height=img_size)
    batch, subdivisions = args.batch or net.batch, args.subdivisions or net.subdivisions
    if batch % subdivisions:
        raise FlagError(f"batch {batch} is not a multiple of subdivisions {subdivisions} "
                        "(--batch/--subdivisions)")
    device = resolve_device(args.device)
    cpus = default_workers() + 1
    if args.worker_counts:
        counts = tuple(args.worker_counts)
    else:
        counts = tuple(sorted({0, *[c for c in (1, 2, 4, 8, 16) if c <= max(1, cpus - 1)]}))
    options = DoctorOptions(img_size=img_size, batch=batch, subdivisions=subdivisions, device=device,
                            workers=args.workers, worker_counts=counts, cache=args.cache,
                            augment_on=args.augment_on, amp=args.amp,
                            amp_dtype=amp_dtype_for(device, args.amp),
                            assume_step_ms=args.assume_step_ms, assume_gpu=args.assume_gpu,
                            assume_cpus=args.assume_cpus,
                            images=args.images, repeats=args.repeats, epochs=args.epochs,
                            cfg=str(request.cfg),
                            data=str(request.data))
    run_dir = request.run_dir.make("doctor")
    with removed_if_empty(run_dir, made=not request.run_dir.exist_ok):  # a data error leaves no empty folder
        timings = measure(request.data, args.split, spec, options, run_dir, log=log)
    verdict = diagnose(timings)
    text = render_markdown(timings, verdict, f"turboyolo doctor: {request.data}")
    (run_dir / "doctor.md").write_text(text)
    (run_dir / "doctor.json").write_text(json.dumps({"timings": vars(timings) | {
        "loader_images_per_s": {str(k): v for k, v in timings.loader_images_per_s.items()}},
        "verdict": verdict.as_dict()}, indent=2))
    return DoctorReport(run_dir, timings, verdict, text)

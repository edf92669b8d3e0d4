"""The ``turboyolo doctor`` job: a request in; measurements, verdict and ``doctor.md`` / ``doctor.json`` out.

:mod:`turboyolo.doctor.measure` times the stages, :mod:`turboyolo.doctor.verdict` names the bottleneck
and renders the report; this module resolves what the request leaves open (the cfg's size and batch,
the device, worker counts), runs both and writes the two files into a fresh run directory.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from turboyolo.doctor.verdict import StageTimings, Verdict
from turboyolo.errors import FlagError


@dataclass
class DoctorRequest:
    """What to measure: the flags of ``turboyolo doctor`` (``None``: the cfg's value or the default).

    ``assume_step_ms`` / ``assume_gpu`` (at most one) select data-only mode: the training step is
    taken as that many ms per mini-batch, or as that GPU's time from the model's FLOPs, not measured.
    """

    data: str | Path
    cfg: str | Path | None
    split: str = "train"
    device: str | None = "auto"
    img_size: int | None = None
    batch: int | None = None
    subdivisions: int | None = None
    amp: str = "auto"
    workers: int | None = None  # the loader workers you train with (default: CPUs - 1)
    worker_counts: Sequence[int] | None = None  # measured too (default: 0, 1, 2, 4, ... up to CPUs - 1)
    cache: str = "none"  # none | ram | disk: the --cache you train with
    augment_on: str = "cpu"
    assume_step_ms: float | None = None
    assume_gpu: str | None = None
    images: int = 32  # images of the split used per stage
    repeats: int = 3  # timed repeats per stage (median)
    run_dir: tuple[str, str, bool] = ("runs/doctor", "exp", False)  # (project, name, exist_ok)

    def __post_init__(self) -> None:
        if not self.cfg:
            raise FlagError("--model/--cfg is required: the Darknet .cfg you train (e.g. `turboyolo cfg "
                            "yolov3 --num-classes N -o my.cfg`)")
        if self.assume_step_ms is not None and self.assume_step_ms <= 0:
            raise FlagError(f"--assume-step-ms {self.assume_step_ms}: give a positive step time in ms")
        if self.assume_step_ms is not None and self.assume_gpu is not None:
            raise FlagError("--assume-step-ms and --assume-gpu exclude each other; pass one")


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


def run_doctor(request: DoctorRequest, log: Callable[[str], object] = print) -> DoctorReport:
    """Measure every stage on ``request.data``, name the bottleneck, write ``doctor.md`` and ``doctor.json``.

    ``log`` receives the scan summary and each stage's timing as it is measured.

    Raises:
        FlagError: an ``img_size`` that is not a multiple of 32, a batch that subdivisions do not divide,
            a bad device or amp.
        ConfigError, DataError: a bad cfg or data set.
    """
    from turboyolo.data.loader import default_workers
    from turboyolo.devices import amp_dtype_for, resolve_device
    from turboyolo.doctor.measure import DoctorOptions, measure
    from turboyolo.doctor.verdict import diagnose, render_markdown
    from turboyolo.formats.darknet_cfg import parse_cfg
    from turboyolo.rundir import next_run_dir

    spec = parse_cfg(request.cfg)
    net = spec.net
    img_size = request.img_size or net.width
    if img_size % 32:
        raise FlagError(f"--img-size {img_size}: use a multiple of 32")
    spec = spec.with_net(width=img_size, height=img_size)
    batch, subdivisions = request.batch or net.batch, request.subdivisions or net.subdivisions
    if batch % subdivisions:
        raise FlagError(f"batch {batch} is not a multiple of subdivisions {subdivisions} "
                        "(--batch/--subdivisions)")
    device = resolve_device(request.device)
    cpus = default_workers() + 1
    workers = default_workers() if request.workers is None else request.workers
    if request.worker_counts:
        counts = tuple(request.worker_counts)
    else:
        counts = tuple(sorted({0, *[c for c in (1, 2, 4, 8, 16) if c <= max(1, cpus - 1)]}))
    options = DoctorOptions(img_size=img_size, batch=batch, subdivisions=subdivisions, device=device,
                            workers=workers, worker_counts=counts, cache=request.cache,
                            augment_on=request.augment_on, amp_dtype=amp_dtype_for(device, request.amp),
                            assume_step_ms=request.assume_step_ms, assume_gpu=request.assume_gpu,
                            images=request.images, repeats=request.repeats)
    run_dir = next_run_dir(*request.run_dir)
    timings = measure(request.data, request.split, spec, options, run_dir, log=log)
    verdict = diagnose(timings)
    text = render_markdown(timings, verdict, f"turboyolo doctor: {request.data}")
    (run_dir / "doctor.md").write_text(text)
    (run_dir / "doctor.json").write_text(json.dumps({"timings": vars(timings) | {
        "loader_images_per_s": {str(k): v for k, v in timings.loader_images_per_s.items()}},
        "verdict": verdict.as_dict()}, indent=2))
    return DoctorReport(run_dir, timings, verdict, text)

"""``auto``: the input pipeline a run chooses for itself (``--cache``, ``--augment-on``, ``--workers``),
and on CUDA whether the cfg's mini-batch fits (``--subdivisions``).

Pure decisions, no I/O: :func:`choose_pipeline` takes what was measured at the start of the run
(:class:`ImageCosts`: the loader's CPU seconds per image on a sample of the training images, cold,
from the prepared cache and with device augmentation; :mod:`turboyolo.train.facts` measures them), the
machine (:class:`Machine`: usable cores, free RAM, free disk at the cache folder, the device), the size of
the data set's cache and the step's time per image, and returns a :class:`PipelineChoice` with one reason
per choice and the predicted data-wait. ``turboyolo doctor`` shows the same choice from the same model.

The throughput model (wall-clock). A loader process spends ``cost`` CPU-seconds per image (read or
decode, augment, collate). ``W >= 1`` workers on ``C`` cores deliver ``min(W, C - 1) / (cost + send)``
images/s (the main process keeps a core; ``send``: a worker's cost of handing each batch over), and no
more than the main process can take over (``1 / handoff``); the step consumes ``1 / step`` images/s
and waits for the rest: ``data-wait = 1 - supply / demand``. With ``W = 0`` the main process loads
each batch between two steps, so the times add: ``data-wait = cost / (cost + step)``.

Rules (each explicit flag wins over its rule):

- ``--cache``: ``none`` when the cold path keeps the step fed (data-wait <= 5%: a CPU-bound step spends
  no RAM or disk); else ``ram`` when the cache fits in free RAM with a margin, else ``disk`` when it fits
  on the disk of the cache folder, else ``none`` with a warning.
- ``--augment-on``: ``device`` only when the step runs on an accelerator, the images are cached, the
  device path does the same augmentation as the CPU path
  (:func:`turboyolo.data.device_loader.device_augment_unsupported` is None), and the CPU path would
  make the step wait, or would keep it fed with less than the workers' margin (twice the step's
  demand); else ``cpu``.
- ``--workers``: enough to feed the step twice over, at most the usable cores - 1 (at most 16).
- ``--subdivisions`` (CUDA, not given): the cfg's, unless its mini-batch does not fit in the free device
  memory (:func:`choose_subdivisions`).

What a choice changes: ``--workers`` and ``--cache`` only change speed (the batches are the same, bit for
bit: tests/data/test_loader.py). ``--augment-on device`` makes the same draws and the same boxes, bit for
bit, but its pixels differ from the CPU path's by interpolation and colour rounding (tests/data/
test_device_loader.py), so the weights differ as two float orders do. ``--subdivisions`` is Darknet's: the
mini-batch is what training batch norm normalises over, so auto keeps the cfg's and changes it only when it
does not fit, and says that this changes what is learned.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from turboyolo.data.cache import human_bytes as _human

DATA_WAIT_TARGET = 0.05  # a choice that keeps the predicted data-wait under this is good enough
RAM_SHARE = 0.5  # the cache may take at most this share of the free RAM ...
RAM_RESERVE = 2 << 30  # ... and must leave at least this much of it free
DISK_SHARE = 0.9  # and at most this share of the free disk at the cache folder
WORKER_MARGIN = 2.0  # workers enough for twice the step's demand (measurements on a sample are rough)
MAX_WORKERS = 16
FAR_ABOVE = 0.2  # measured data-wait this much above the prediction: the run says so
AUTO = "auto"
# what --augment-on device keeps of the CPU path's augmentation (tests/data/test_device_loader.py)
DEVICE_SAME = ("the same augmentation draws and boxes (its pixels differ from the CPU path's by "
               "interpolation and colour rounding; --augment-on cpu keeps them)")


@dataclass(frozen=True)
class ImageCosts:
    """CPU-seconds per image of one loader process (collate included), measured on a sample.

    Attributes:
        cold_s: from the original files (read + decode + CPU augmentation).
        warm_s: from the prepared cache with CPU augmentation (None: not measured, where the choice
            could not use it: it reads the files whatever a cache would cost).
        device_s: from the prepared cache, CPU side of ``--augment-on device`` (None: not measured, or the
            device path does not do this run's augmentation).
        handoff_s: main-process seconds per image receiving a worker's batch (0: not measured).
        worker_extra_s: what a worker process pays per image beyond the in-process cost: sending each
            batch to the main process (0: not measured).
    """

    cold_s: float
    warm_s: float | None
    device_s: float | None = None
    handoff_s: float = 0.0
    worker_extra_s: float = 0.0
    device_handoff_s: float | None = None  # the same two for the device path (None: as the CPU path's)
    device_extra_s: float | None = None
    device_spread_decodes: float = 1.0  # originals the device path decodes per sample without a cache
    # when several workers make one partner pool's batches (each holds only what its own batches drew):
    # up to a mosaic's parts x (1 + mixup); one worker or none decodes each original once per pool

    def with_workers(self, augment_on: str) -> tuple[float, float]:
        """(the worker's extra cost, the main process's hand-off) per image for ``augment_on``: the device
        path reuses shared batch buffers, so its batches cost a worker and the main process less."""
        if augment_on == "device" and self.device_s is not None and self.device_handoff_s is not None:
            return self.device_extra_s or 0.0, self.device_handoff_s
        return self.worker_extra_s, self.handoff_s

    def cost(self, cache: str, augment_on: str, workers: int = 0) -> float:
        """CPU-seconds per image of the process that makes a batch, with ``workers`` loader workers."""
        if augment_on == "device" and self.device_s is not None:
            if cache == "none":  # decodes each original (once per partner pool with 0-1 worker), then
                # only places images and draws numbers
                decodes = 1.0 if workers <= 1 else self.device_spread_decodes
                return decodes * max(self.cold_s - self.warm_s, 0.0) + self.device_s
            return self.device_s
        return self.warm_s if cache != "none" else self.cold_s


@dataclass(frozen=True)
class Machine:
    """What the machine offers the loader: cores, free RAM and disk (bytes), the training device type."""

    cores: int
    free_ram: int
    free_disk: int
    device: str = "cpu"  # torch device type: cpu | cuda | mps
    cache_folder: str = ""  # where a disk cache goes (named in messages)

    @property
    def max_workers(self) -> int:
        return max(0, min(MAX_WORKERS, self.cores - 1))


@dataclass(frozen=True)
class Decision:
    """One setting of the pipeline, where it came from, and why."""

    name: str  # cache | augment_on | workers
    value: object
    source: str  # auto | flag | recipe
    reason: str

    @property
    def flag(self) -> str:
        return f"--{self.name.replace('_', '-')} {self.value}"


def rate_text(rate: float) -> str:
    """A rate for the console: whole numbers from 10 up (``1,234``), two significant digits below
    (``0.42``, ``3.1``), so a slow CPU step never reads as 0 images/s."""
    return f"{rate:,.0f}" if rate >= 10 or rate == 0 else f"{rate:.2g}"


@dataclass(frozen=True)
class PipelineChoice:
    """The pipeline settings of a run and what they are predicted to give."""

    cache: str
    augment_on: str
    workers: int
    data_wait: float  # predicted share of the step's wall time spent waiting for data
    images_per_s: float  # predicted wall-clock images/s of training
    decisions: tuple[Decision, ...] = ()
    warnings: tuple[str, ...] = ()
    advice: str = ""  # what would help when the measured data-wait is far above the prediction
    step_s: float = 0.0  # the step's seconds per image the prediction used
    costs: ImageCosts | None = field(default=None, compare=False)

    def lines(self) -> list[str]:
        """One console line per choice, with its reason, then the predicted data-wait."""
        out = [f"{d.flag} ({d.source}): {d.reason}" for d in self.decisions]
        out += list(self.warnings)
        out.append(f"input pipeline: predicted data-wait {100 * self.data_wait:.0f}%, "
                   f"{rate_text(self.images_per_s)} images/s")
        return out

    def as_dict(self) -> dict:
        return {"cache": self.cache, "augment_on": self.augment_on, "workers": self.workers,
                "predicted_data_wait": round(self.data_wait, 4),
                "predicted_images_per_s": round(self.images_per_s, 2), "step_s_per_image": self.step_s,
                "reasons": {d.name: f"{d.source}: {d.reason}" for d in self.decisions},
                "warnings": list(self.warnings), "advice": self.advice}


def supply(costs: ImageCosts, cache: str, augment_on: str, workers: int, cores: int) -> float:
    """Wall-clock images/s the loader delivers (see the module docstring)."""
    cost = max(costs.cost(cache, augment_on, workers), 1e-9)
    if workers <= 0:
        return 1.0 / cost
    extra, handoff = costs.with_workers(augment_on)
    by_workers = max(1, min(workers, cores - 1)) / (cost + extra)
    return min(by_workers, 1.0 / handoff) if handoff > 0 else by_workers


def predict(costs: ImageCosts, cache: str, augment_on: str, workers: int, cores: int,
            step_s: float) -> tuple[float, float]:
    """(data-wait share, wall-clock images/s) of training with these settings; ``step_s`` per image."""
    step_s = max(step_s, 1e-12)
    if workers <= 0:  # loading and stepping take turns in the main process
        cost = costs.cost(cache, augment_on)
        return cost / (cost + step_s), 1.0 / (cost + step_s)
    rate, demand = supply(costs, cache, augment_on, workers, cores), 1.0 / step_s
    return (0.0 if rate >= demand else 1.0 - rate / demand), min(rate, demand)


def cache_fits(cache_bytes: int, machine: Machine) -> tuple[str | None, str]:
    """``ram``, ``disk`` or None, and the sentence that says why."""
    ram_room = max(0, min(RAM_SHARE * machine.free_ram, machine.free_ram - RAM_RESERVE))
    need = _human(cache_bytes)
    if cache_bytes <= ram_room:
        return "ram", f"the cache ({need}) fits in free RAM ({_human(machine.free_ram)} free)"
    disk_room = DISK_SHARE * machine.free_disk
    if cache_bytes <= disk_room:
        return "disk", (f"the cache ({need}) does not fit in free RAM with a margin "
                        f"({_human(machine.free_ram)} free) but on disk ({_human(machine.free_disk)} free at "
                        f"{machine.cache_folder or 'the cache folder'})")
    return None, (f"the cache ({need}) fits neither in free RAM ({_human(machine.free_ram)}) nor on disk "
                  f"({_human(machine.free_disk)} free at {machine.cache_folder or 'the cache folder'})")


def choose_pipeline(requested: dict[str, tuple[object, str]], costs: ImageCosts, machine: Machine,
                    step_s: float, cache_bytes: int, unsupported: str | None,
                    device_step_s: float | None = None) -> PipelineChoice:
    """The run's ``cache``, ``augment_on`` and ``workers``.

    Args:
        requested: per setting, ``(value, source)``: ``value`` ``"auto"`` (workers: None) is decided here,
            anything else was given (``source``: flag or recipe) and is kept.
        step_s: the training step's seconds per image (CPU augmentation).
        cache_bytes: what the prepared cache of the training split takes.
        unsupported: why the device path would not do this run's augmentation (None: it would).
        device_step_s: the step's seconds per image with ``--augment-on device`` (default ``step_s``).
    """
    device_step_s = step_s if device_step_s is None else device_step_s
    decisions, warnings = [], []
    cache, cache_source = requested["cache"]
    augment_on, augment_source = requested["augment_on"]
    workers, workers_source = requested["workers"]
    feed = machine.max_workers if workers is None else int(workers)
    if cache == AUTO:
        cold_wait, _ = predict(costs, "none", "cpu", feed, machine.cores, step_s)
        if cold_wait <= DATA_WAIT_TARGET:
            cache, why = "none", (f"the step dominates: the original files keep it fed (data-wait "
                                  f"{100 * cold_wait:.0f}%), so no RAM or disk is spent on a cache")
        else:
            fits, why = cache_fits(cache_bytes, machine)
            cache = fits or "none"
            why = f"decoding makes the step wait {100 * cold_wait:.0f}%; {why}"
            if fits is None:
                warnings.append(f"warning: --cache auto: {why}; training reads the original files (the cold "
                                "path). Free RAM or disk, or train at a smaller --img-size")
        decisions.append(Decision("cache", cache, "auto", why))
    else:
        decisions.append(Decision("cache", cache, cache_source, "given"))
    if augment_on == AUTO:
        augment_on, why = _choose_augment_on(costs, machine, cache, feed, step_s, device_step_s, unsupported)
        decisions.append(Decision("augment_on", augment_on, "auto", why))
    else:
        decisions.append(Decision("augment_on", augment_on, augment_source, "given"))
    run_step = device_step_s if augment_on == "device" else step_s
    if workers is None:
        workers, why = _choose_workers(costs, machine, cache, augment_on, run_step)
        decisions.append(Decision("workers", workers, "auto", why))
    else:
        decisions.append(Decision("workers", workers, workers_source, "given"))
    wait, rate = predict(costs, cache, augment_on, int(workers), machine.cores, run_step)
    return PipelineChoice(cache, augment_on, int(workers), wait, rate, tuple(decisions), tuple(warnings),
                          advice(cache, augment_on, int(workers), machine, unsupported), run_step, costs)


def _choose_augment_on(costs: ImageCosts, machine: Machine, cache: str, workers: int, step_s: float,
                       device_step_s: float, unsupported: str | None) -> tuple[str, str]:
    cpu_wait, _ = predict(costs, cache, "cpu", workers, machine.cores, step_s)
    # with the workers' margin: a CPU path that only just keeps up waits in practice (its cost is measured
    # on a sample of 8 images and varies from image to image)
    margin_wait, _ = predict(costs, cache, "cpu", workers, machine.cores, step_s / WORKER_MARGIN)
    if margin_wait <= DATA_WAIT_TARGET or (cpu_wait <= DATA_WAIT_TARGET and machine.device == "cpu"):
        return "cpu", f"the loader's CPU augmentation keeps the step fed (data-wait {100 * cpu_wait:.0f}%)"
    if machine.device == "cpu":
        return "cpu", "the step runs on the CPU: augmenting there too would only share its cores"
    if cache == "none":
        return "cpu", "without a cache the device path would still decode every original"
    if unsupported is not None or costs.device_s is None:
        why = unsupported or "not measured"
        return "cpu", (f"the device path would not do this run's augmentation ({why}): auto keeps the "
                       "augmentation the run asks for")
    device_wait, _ = predict(costs, cache, "device", workers, machine.cores, device_step_s)
    device_margin_wait, _ = predict(costs, cache, "device", workers, machine.cores,
                                    device_step_s / WORKER_MARGIN)
    if (device_wait, device_margin_wait) >= (cpu_wait, margin_wait):
        return "cpu", (f"device augmentation would not help (data-wait {100 * device_wait:.0f}% against "
                       f"{100 * cpu_wait:.0f}%)")
    if cpu_wait <= DATA_WAIT_TARGET:
        return "device", (f"the CPU augmentation keeps the step fed only just (data-wait "
                          f"{100 * cpu_wait:.0f}%; {100 * margin_wait:.0f}% at twice the step's pace); on "
                          f"the device the loader only copies cached images (data-wait "
                          f"{100 * device_wait:.0f}%, {100 * device_margin_wait:.0f}%), {DEVICE_SAME}")
    return "device", (f"the CPU augmentation makes the step wait {100 * cpu_wait:.0f}%; on the device the "
                      f"loader only copies cached images (data-wait {100 * device_wait:.0f}%), {DEVICE_SAME}")


def _choose_workers(costs: ImageCosts, machine: Machine, cache: str, augment_on: str,
                    step_s: float) -> tuple[int, str]:
    most = machine.max_workers
    if most == 0:
        return 0, "one usable core: the main process loads"
    cost = costs.cost(cache, augment_on, most)
    needed = min(most, max(1, math.ceil(WORKER_MARGIN * cost / max(step_s, 1e-12))))
    if needed == most:
        return most, f"the usable cores - 1 ({machine.cores} usable)"
    return needed, (f"{needed} feed the step twice over ({1000 * cost:.1f} ms per image per core against "
                    f"{1000 * step_s:.2f} ms of step); the other cores stay free")


def advice(cache: str, augment_on: str, workers: int, machine: Machine, unsupported: str | None) -> str:
    """The setting that would help when the step waits for data more than predicted."""
    if cache == "none":
        fix = "--cache ram (or disk): decode each image once"
    elif augment_on != "device" and machine.device != "cpu" and unsupported is None:
        fix = "--augment-on device: the CPU only copies cached images"
    elif workers < machine.max_workers:
        fix = f"--workers {machine.max_workers}"
    else:
        fix = "a smaller --img-size, or a machine with more cores"
    return f"try {fix}; `turboyolo doctor --data ... --model ...` measures why"


def given_pipeline(requested: dict[str, tuple[object, str]]) -> PipelineChoice:
    """The pipeline as given (no ``auto`` among ``requested``): nothing measured, nothing predicted."""
    decisions = tuple(Decision(name, value, source, "given") for name, (value, source) in requested.items())
    values = {name: value for name, (value, _) in requested.items()}
    return PipelineChoice(str(values["cache"]), str(values["augment_on"]), int(values["workers"]), 0.0, 0.0,
                          decisions)


MEMORY_SHARE = 0.8  # a mini-batch may take this share of the device memory free at the start


def choose_subdivisions(batch: int, subdivisions: int, world_size: int, bytes_per_image: float,
                        fixed_bytes: float, free_bytes: float) -> tuple[int, str]:
    """CUDA, ``--subdivisions`` not given: the cfg's ``subdivisions`` when its mini-batch fits in the free
    device memory. Darknet's meaning: the mini-batch is what training batch norm normalises over (and
    moves its running statistics by), so another one learns other weights. When it does not fit, the
    fewest more subdivisions (a divisor of ``batch`` the processes share) whose mini-batch fits, with a
    reason that says it changes what is learned; the cfg's when none fits. ``bytes_per_image``: the step's
    activation memory per image; ``fixed_bytes``: the model, its gradients and the optimizer state."""
    room = MEMORY_SHARE * free_bytes - fixed_bytes
    wanted = batch // subdivisions
    memory = f"{_human(free_bytes)} free, ~{_human(bytes_per_image)} per image"
    if wanted * bytes_per_image <= room:
        return subdivisions, (f"the cfg's: its mini-batch of {wanted} fits in the free device memory "
                              f"({memory})")
    for candidate in range(subdivisions + 1, batch + 1):
        if batch % candidate or candidate % world_size:
            continue
        mini = batch // candidate
        if mini * bytes_per_image <= room:
            return candidate, (f"the cfg's mini-batch of {wanted} does not fit in the free device memory "
                               f"({memory}): mini-batches of {mini}, {candidate} instead of the cfg's "
                               f"{subdivisions}. This changes what is learned (batch norm normalises over "
                               f"{mini} images, not {wanted}); --subdivisions {subdivisions} keeps the cfg's")
    return subdivisions, f"the cfg's (no smaller mini-batch fits in the free device memory either: {memory})"

"""``turboyolo doctor``: from measured stage timings to a verdict, a bottleneck and settings to try.

Pure logic (no I/O): :func:`diagnose` takes :class:`StageTimings` (what
:mod:`turboyolo.doctor.measure` measured, or synthetic numbers in tests) and returns a
:class:`Verdict`; :func:`render_markdown` writes it up.

The throughput model is ``auto``'s (:mod:`turboyolo.train.auto`, wall-clock): a loader process spends
``cost`` CPU-seconds per image: ``source + augment + overhead``, where ``source`` is read + decode of the
original file (or the copy out of the prepared cache with ``--cache``), ``augment`` the CPU augmentation
(or, with ``--augment-on device``, only the canvas copy and the per-image numbers) and ``overhead``
the rest (collate). The doctor measures ``cost`` for each setting with the real loader on a sample
(:attr:`StageTimings.costs`; without it, the overhead is calibrated from the measured loader run).
``W >= 1`` workers on ``C`` cores supply ``min(W, C - 1) / cost`` images/s and at most what the main
process takes over (``1 / handoff``); the step consumes ``1 / step`` images/s and waits for the rest.
With ``W = 0`` loading and stepping take turns: ``cost / (cost + step)`` of the time is data-wait.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass, field

from turboyolo.data.cache import human_bytes as _human
from turboyolo.train.auto import ImageCosts, predict, rate_text, supply
from turboyolo.train.facts import ASSUMED_MFU, GPU_RATES, assumed_step_s  # noqa: F401  (re-exported)

DATA_WAIT_OK = 0.03  # below this share of step time the data pipeline is not the bottleneck
CHECKPOINT_STALL_OK = 0.05  # a per-epoch checkpoint stall above this share of an epoch is worth fixing
STARTUP_OK = 0.10  # a start (before the first step) above this share of the whole run is named

@dataclass
class StageTimings:
    """Measured (or assumed) costs; CPU-seconds per image unless the name says otherwise.

    Attributes:
        decode_s: read + decode of an original file to the training size.
        cache_read_s: copy of one decoded, pre-resized image (what ``--cache`` costs instead of decode).
        augment_s: CPU augmentation at the training size (warp + HSV + boxes).
        device_plan_s: CPU side of ``--augment-on device`` (canvas copy + per-image numbers).
        loader_cpu_s: CPU-seconds per image of all loader processes in the measured loader run
            (current ``--cache`` / ``--augment-on`` settings).
        loader_images_per_s: measured wall images/s by worker count (same settings).
        copy_s: host -> device copy per image (uint8).
        step_s: one training step (forward + backward + optimizer) on a mini-batch, seconds.
        step_source: "measured on <device>" or "assumed: ...".
        checkpoint_s: how long a full-state checkpoint save blocks training, seconds.
        checkpoint_write_s: until the file is on disk, seconds.
        batch, subdivisions, img_size: the configuration measured (mini-batch = batch / subdivisions).
        cores: CPU cores this process may use.
        workers: loader workers the configuration uses now.
        cached, augment_on: the current ``--cache`` (True = ram/disk) and ``--augment-on`` settings.
        dataset_images: images in the training split (for the per-epoch checkpoint share).
        cache_bytes: what the prepared cache of the split would take.
        device_augment_s: device seconds per image of the warp + colour of ``--augment-on device``
            (measured only when the step is; 0 for an assumed step).
        handoff_s: main-process CPU-seconds per image receiving a worker's batches (part of
            ``loader_cpu_s`` when that was measured with workers).
        costs: the loader's CPU-seconds per image for each setting, measured on a sample
            (:class:`turboyolo.train.auto.ImageCosts` fields); None: modelled from the stages.
        auto: what ``--cache auto --augment-on auto --workers auto`` would choose, one line each.
        startup_s: wall seconds of the parts of train's start that depend on the data set (scan, anchor
            check, pipeline measurement), as measured; None: not measured.
        startup_cold: the scan checked files (a first start) rather than reading its cache.
        planned_images: images the planned run trains on (epochs x training images, or its
            iterations x batch when those end it first).
    """

    decode_s: float
    cache_read_s: float
    augment_s: float
    device_plan_s: float
    loader_cpu_s: float
    loader_images_per_s: dict[int, float]
    copy_s: float
    step_s: float
    step_source: str
    checkpoint_s: float
    checkpoint_write_s: float
    batch: int
    subdivisions: int
    img_size: int
    cores: int
    workers: int
    cached: bool = False
    augment_on: str = "cpu"
    dataset_images: int = 0
    cache_bytes: int = 0
    device_augment_s: float = 0.0  # device time of augment_batch per image (measured with the step)
    handoff_s: float = 0.0  # main-process CPU-seconds per image receiving a worker's batches
    costs: dict | None = None  # ImageCosts fields measured with the real loader (cold_s, warm_s, ...)
    auto: list | None = None  # what `auto` would choose here: its lines (reasons, predicted data-wait)
    device_unsupported: str | None = None  # why the device path would not do this augmentation
    startup_s: dict[str, float] | None = None  # the data-dependent parts of the start, wall seconds
    startup_cold: bool = False
    planned_images: int = 0

    @property
    def mini_batch(self) -> int:
        return max(1, self.batch // max(1, self.subdivisions))


@dataclass
class Suggestion:
    setting: str  # command-line flags
    expected_images_per_s: float
    data_wait: float
    why: str


@dataclass
class Verdict:
    bottleneck: str  # "model step" | "decode" | "cache read" | "augment" | "hand-off" | "workers"
    sentence: str
    data_wait: float  # predicted share of wall time the step waits for data, current settings
    supply_images_per_s: float  # what the loader delivers with the current settings
    demand_images_per_s: float  # what the training step consumes
    expected_images_per_s: float
    cost_per_image_s: dict[str, float]  # source, augment, overhead (current settings)
    cache_factor: float  # predicted loader images/s with --cache over without (same workers)
    checkpoint_share: float  # one checkpoint stall per epoch as a share of the epoch
    suggestions: list[Suggestion] = field(default_factory=list)
    # predicted wall-clock images/s of the loader alone (no step), "workers W, cache C, augment A" -> rate:
    # what `turboyolo bench data` and bench/doctor_check.py measure
    loader_predictions: dict[str, float] = field(default_factory=dict)
    startup_share: float = 0.0  # the measured start's share of start + planned run at the expected rate
    startup: str = ""  # the sentence naming the start when its share is above STARTUP_OK

    def as_dict(self) -> dict:
        return asdict(self)


def _wait(rate: float, demand: float) -> float:
    return 0.0 if rate >= demand else 1.0 - rate / demand


@dataclass
class _Figures:
    """What the verdict reasons with, derived from the timings (seconds per image, images/s)."""

    source: float  # reading an image: the cache, or decoding the original
    aug: float  # the CPU augmentation (or the CPU side of --augment-on device)
    overhead: float  # the loader's remaining cost: mosaic parts and boxes, collating, handing over
    cost: float  # a loader core's seconds per image, all of the above
    demand: float  # images/s the step consumes
    supply: float  # images/s the loader delivers
    wait: float  # the step's predicted data-wait share
    expected: float
    usable: int  # cores the loader workers may use
    cost_cached: float
    cache_factor: float
    checkpoint_share: float


def image_costs(t: StageTimings) -> ImageCosts:
    """The loader's cost per image for each setting: measured (``t.costs``), else from the stages and
    the overhead of the measured loader run."""
    if t.costs is not None:
        return ImageCosts(**t.costs)
    aug = t.device_plan_s if t.augment_on == "device" else t.augment_s
    overhead = max(0.0, t.loader_cpu_s - t.handoff_s - (t.cache_read_s if t.cached else t.decode_s) - aug)
    return ImageCosts(t.decode_s + t.augment_s + overhead, t.cache_read_s + t.augment_s + overhead,
                      t.cache_read_s + t.device_plan_s + overhead, t.handoff_s)


def step_per_image(t: StageTimings, augment_on: str) -> float:
    """The step's seconds per image, with the copy and (device path) the device augmentation."""
    device_aug = t.device_augment_s if augment_on == "device" else 0.0
    return t.step_s / t.mini_batch + t.copy_s + device_aug


def _figures(t: StageTimings) -> _Figures:
    costs = image_costs(t)
    cache = "ram" if t.cached else "none"
    source = t.cache_read_s if t.cached else t.decode_s
    aug = t.device_plan_s if t.augment_on == "device" else t.augment_s
    cost = costs.cost(cache, t.augment_on, t.workers)
    overhead = max(0.0, cost - source - aug)
    step = step_per_image(t, t.augment_on)
    demand = 1.0 / max(step, 1e-12)
    rate = supply(costs, cache, t.augment_on, t.workers, t.cores)
    wait, expected = predict(costs, cache, t.augment_on, t.workers, t.cores, step)
    cache_factor = costs.cost("none", t.augment_on, t.workers) / max(costs.cost("ram", t.augment_on), 1e-12)
    epoch_s = t.dataset_images / max(expected, 1e-9) if t.dataset_images else 0.0
    checkpoint_share = t.checkpoint_s / (epoch_s + t.checkpoint_s) if epoch_s else 0.0
    return _Figures(source, aug, overhead, cost, demand, rate, wait, expected, max(1, t.cores - 1),
                    costs.cost("ram", t.augment_on), cache_factor, checkpoint_share)


def diagnose(t: StageTimings) -> Verdict:
    """The verdict for the measured configuration and what each change would give."""
    f = _figures(t)
    bottleneck, sentence = _bottleneck(t, f)
    parts = {"source": f.source, "augment": f.aug, "overhead": f.overhead}
    share, startup = startup_note(t, f.expected)
    return Verdict(bottleneck, sentence, f.wait, f.supply, f.demand, f.expected, parts, f.cache_factor,
                   f.checkpoint_share, _suggestions(t, f), loader_predictions(t), share, startup)


STARTUP_ADVICE = {
    "scan": "it is mostly the scan; {cold}",
    "anchor check": ("it is mostly the anchor check: its k-means fit is kept for the next start with the "
                     "same boxes and size; --no-autoanchor, or the fitted anchors in --anchors, skip it"),
    "pipeline measurement": ("it is mostly measuring the input pipeline for `auto`: give --cache, "
                             "--augment-on and --workers (what `auto` chose above) to skip it"),
}


def startup_note(t: StageTimings, expected_images_per_s: float) -> tuple[float, str]:
    """(the start's share of start + planned run, a sentence naming it when the share is above
    :data:`STARTUP_OK`; else "")."""
    if not t.startup_s or not t.planned_images:
        return 0.0, ""
    total = sum(t.startup_s.values())
    run_s = t.planned_images / max(expected_images_per_s, 1e-12)
    share = total / max(total + run_s, 1e-12)
    if share <= STARTUP_OK:
        return share, ""
    worst = max(t.startup_s, key=t.startup_s.get)
    cold = ("it checked every file, a first start's cost: the next start reads the scan cache"
            if t.startup_cold else "it read the scan cache: a longer run (more epochs) spreads it")
    parts = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in t.startup_s.items())
    return share, (f"start-up is {100 * share:.0f}% of the run: {total:.1f} s before the first step "
                   f"({parts}) against {run_s:,.0f} s of training ({t.planned_images:,} images at "
                   f"{rate_text(expected_images_per_s)} images/s); "
                   + STARTUP_ADVICE.get(worst, "{cold}").format(cold=cold) + ".")


def loader_key(workers: int, cache: str, augment_on: str) -> str:
    return f"workers {workers}, cache {cache}, augment {augment_on}"


def loader_predictions(t: StageTimings) -> dict[str, float]:
    """Wall-clock images/s the loader alone is predicted to deliver, for each of 0 and the configured
    workers x cache none / ram x augment cpu / device."""
    costs = image_costs(t)
    return {loader_key(w, cache, aug): supply(costs, cache, aug, w, t.cores)
            for w in sorted({0, 1, t.workers}) for cache in ("none", "ram") for aug in ("cpu", "device")
            if not (aug == "device" and costs.device_s is None)}


def _bottleneck(t: StageTimings, f: _Figures) -> tuple[str, str]:
    """The limiting stage and the verdict's sentence."""
    if f.wait < DATA_WAIT_OK:
        return "model step", (
            f"model-step-bound: the training step ({t.step_source}) consumes {rate_text(f.demand)} images/s "
            f"and the loader ({t.workers} workers) supplies {rate_text(f.supply)}, so the data pipeline "
            f"is not what limits training (data-wait {100 * f.wait:.0f}%).")
    parts = {"source": f.source, "augment": f.aug, "overhead": f.overhead}
    worst = max(parts, key=parts.get)
    bottleneck = {"source": "cache read" if t.cached else "decode", "augment": "augment",
                  "overhead": "hand-off"}[worst]
    cache = "ram" if t.cached else "none"
    if t.workers < f.usable and _wait(supply(image_costs(t), cache, t.augment_on, f.usable, t.cores),
                                      f.demand) < DATA_WAIT_OK:
        bottleneck = "workers"
    what = {"decode": "reading and decoding the original images",
            "cache read": "reading the prepared cache",
            "augment": "the CPU augmentation",
            "hand-off": ("the loader's work beyond reading and warping one sample (mosaic parts and "
                         "their boxes, collating, handing batches to the main process)"),
            "workers": "too few loader workers"}[bottleneck]
    share = f"{1000 * parts[worst]:.1f} ms of the {1000 * f.cost:.1f} ms each image costs a loader core"
    return bottleneck, (
        f"{bottleneck}-bound: {what} ({share}), so {t.workers} worker(s) on {t.cores} cores "
        f"supply {rate_text(f.supply)} images/s against the {rate_text(f.demand)} the training step consumes "
        f"(data-wait {100 * f.wait:.0f}%).")


def _suggestions(t: StageTimings, f: _Figures) -> list[Suggestion]:
    """Each setting worth trying with the wall-clock images/s and data-wait it is predicted to give."""
    suggestions, costs = [], image_costs(t)
    cost, demand, usable = f.cost, f.demand, f.usable
    cache_now = "ram" if t.cached else "none"

    def suggest(setting: str, why: str, cache: str = cache_now, augment_on: str = t.augment_on,
                workers: int | None = None, with_costs: ImageCosts = costs, step_scale: float = 1.0) -> None:
        new_workers = workers if workers is not None else min(usable, max(t.workers, 1))
        step = step_per_image(t, augment_on) * step_scale
        wait, expected = predict(with_costs, cache, augment_on, new_workers, t.cores, step)
        suggestions.append(Suggestion(setting, expected, wait, why))

    needed = min(usable, max(1, math.ceil(demand * cost)))
    if needed != t.workers:
        suggest(f"--workers {needed}", f"{cost * 1000:.1f} ms per image per core: {needed} worker(s) "
                f"{'cover' if needed * 1 / cost >= demand else 'are the most this machine has for'} "
                f"the step's {rate_text(demand)} images/s", workers=needed)
    if not t.cached:
        size = f" (or disk; {_human(t.cache_bytes)})" if t.cache_bytes else ""
        suggest(f"--cache ram{size}", f"decode once: {1000 * t.decode_s:.1f} ms -> "
                f"{1000 * t.cache_read_s:.2f} ms per image, loader images/s x{f.cache_factor:.1f}",
                cache="ram", workers=min(usable, needed))
    if t.augment_on != "device":
        if costs.device_s is None:  # not measured (the device path does not do this augmentation): modelled
            costs = dataclasses.replace(costs, device_s=t.cache_read_s + t.device_plan_s + f.overhead)
        device_cost = costs.cost("ram", "device")
        suggest("--cache ram --augment-on device",
                f"the CPU only copies canvases and draws numbers ({1000 * device_cost:.2f} ms per image); "
                "warp and colour run batched on the device"
                + (f" (+{1000 * t.device_augment_s:.3f} ms of device time per image)" if t.device_augment_s
                   else "")
                + (f"; but the device path {t.device_unsupported}" if t.device_unsupported else ""),
                cache="ram", augment_on="device", workers=min(usable, needed), with_costs=costs)
    if t.subdivisions > 1:
        suggest(f"--subdivisions 1 (mini-batch {t.batch})",
                "whole iterations in one mini-batch: fewer and larger steps (GPU efficiency; needs "
                "the memory); batch norm then normalises over the whole batch, which changes what is "
                "learned; the loader supply is unchanged")
    if t.img_size > 320:
        small = t.img_size - 96
        scale = (small / t.img_size) ** 2  # step and augmentation scale with pixels, decode does not
        saved = f.aug * (1 - scale)
        smaller = dataclasses.replace(costs, cold_s=costs.cold_s - saved, warm_s=costs.warm_s - saved)
        suggest(f"--img-size {small}", f"{100 * (1 - scale):.0f}% fewer pixels per step and per warp "
                "(costs accuracy)", with_costs=smaller, step_scale=scale)
    if f.checkpoint_share > CHECKPOINT_STALL_OK:
        suggestions.append(Suggestion(
            "--checkpoint-interval 0 (last.pt/best.pt only) or fewer evaluations", f.expected, f.wait,
            f"a checkpoint blocks {t.checkpoint_s:.2f} s, {100 * f.checkpoint_share:.0f}% of an epoch"))
    return suggestions


def render_markdown(t: StageTimings, v: Verdict, title: str = "turboyolo doctor") -> str:
    """The report: stages, verdict, suggestions (the same content as the JSON)."""
    mb = t.mini_batch
    startup = ["", f"**Start-up:** {v.startup}"] if v.startup else []
    if t.startup_s:
        total = sum(t.startup_s.values())
        parts = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in t.startup_s.items())
        start_row = [f"| start-up before the first step (data-dependent) | {total:.1f} s in all | {parts}; "
                     f"{100 * v.startup_share:.1f}% of the planned run |"]
    else:
        start_row = []
    lines = [f"# {title}", "", f"**Verdict:** {v.sentence}", *startup, "",
             f"Predicted data-wait {100 * v.data_wait:.1f}% of step time; "
             f"expected {rate_text(v.expected_images_per_s)} images/s "
             f"(loader {rate_text(v.supply_images_per_s)}, step {rate_text(v.demand_images_per_s)}).", "",
             "## Stages (median of repeats, after warm-up)", "",
             "| stage | per image | note |", "|---|---|---|",
             f"| read + decode (original files) | {1000 * t.decode_s:.2f} ms | CPU |",
             f"| read from the prepared cache | {1000 * t.cache_read_s:.3f} ms | CPU (decoded image copy) |",
             f"| augment (CPU path) | {1000 * t.augment_s:.2f} ms | warp + HSV + boxes at {t.img_size} |",
             f"| CPU side of --augment-on device | {1000 * t.device_plan_s:.3f} ms | canvas copy + numbers |",
             f"| loader, all processes ({'cache' if t.cached else 'no cache'}, augment on {t.augment_on}) | "
             f"{1000 * t.loader_cpu_s:.2f} ms | overhead {1000 * v.cost_per_image_s['overhead']:.2f} ms |",
             f"| host -> device copy | {1000 * t.copy_s:.3f} ms | uint8 |",
             f"| warp + colour on the device (--augment-on device) | {1000 * t.device_augment_s:.3f} ms | "
             f"{'measured' if t.device_augment_s else 'not measured (assumed step)'} |",
             f"| training step | {1000 * t.step_s / mb:.2f} ms | {1000 * t.step_s:.1f} ms per mini-batch "
             f"of {mb} ({t.step_source}) |",
             f"| checkpoint save | {t.checkpoint_s:.2f} s blocking | {t.checkpoint_write_s:.2f} s to disk |",
             *start_row,
             "", "Loader images/s by workers (measured, wall): "
             + ", ".join(f"{w}: {rate_text(r)}" for w, r in sorted(t.loader_images_per_s.items())),
             "", "Loader images/s predicted (wall-clock, the loader alone): "
             + "; ".join(f"{key} {rate_text(rate)}" for key, rate in v.loader_predictions.items()),
             *(["", "## What `auto` would choose (turboyolo train's defaults)", "",
                *[f"- {line}" for line in t.auto]] if t.auto else []),
             "", f"Predicted `--cache` gain on the loader: x{v.cache_factor:.2f} images/s at the same "
             "workers.", "", "## Settings to try", "",
             "| setting | expected images/s | data-wait | why |", "|---|---|---|---|"]
    for s in v.suggestions:
        lines.append(f"| `{s.setting}` | {rate_text(s.expected_images_per_s)} | {100 * s.data_wait:.0f}% "
                     f"| {s.why} |")
    if not v.suggestions:
        lines.append("| (none) | | | |")
    return "\n".join(lines) + "\n"

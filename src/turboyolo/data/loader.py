"""DataLoader wiring: dataset, multiscale batch sampler, collate in workers, pinning, device hand-off.

Batches are ``(images uint8 [B, 3, S, S], targets float32 [N, 6], metas)`` where a target row is
(batch index, cls, cx, cy, w, h) relative to the delivered image and ``metas[i]`` maps network pixels
back to the original: ``orig = (net - pad) / ratio`` (exact for validation; with augmentation use
``ImageMeta.matrix``). The images are laid out channels-last in memory (the augmentation's HWC
arrays stacked, a strided view, no transposing copy on the CPU). uint8 crosses the process boundary and
the bus; :func:`move_to_device` normalises on the device, and makes the layout contiguous there
(or keeps channels-last with ``channels_last=True``).

A sample that fails to load after the scan is replaced by another one in a training loader, so batches
keep their size; an evaluation loader (``drop_broken``) leaves it out, so each image is evaluated once or
not at all. Both are counted and named: ``DetectionLoader.replaced``, ``DetectionLoader.dropped`` and
their ``*_summary()`` lines (and the run's ``scan_report.txt``). The scan checks headers and structure
only; the first decode of each image in the run (here, or the prepared cache's build) decodes all of its
image data with the strict decoder, so a file whose data is damaged fails there, the first time it is
drawn. Each sample's verdict is kept in memory shared by the loader's processes
(:attr:`DetectionDataset.verdicts`): a refused file fails again wherever it is drawn (never trained on),
and only a file whose whole decode passed may later be decoded at 1/8 scale without the scans that
scale never reads (:func:`turboyolo.data.decode.decode_image` ``verified``).

Determinism: the batch sampler (:mod:`turboyolo.data.sampler`, in the main process) decides which
sample indices, epoch and output size every batch has, and whether mosaic and mixup are on
(``--close-mosaic`` turns them off for the last epochs: the sampler's key carries it, so persistent
workers need no message); each sample's augmentation rng is ``sample_rng(seed, epoch, index)``. So
batches do not depend on the number of workers, and all ranks agree on the size sequence.

Decodes: a training key carries its partner pool (the samples of its run of batches, see
:mod:`turboyolo.data.sampler`); mosaic and mixup partners come from that pool, and a worker makes a
whole run at once (with 0-1 workers an epoch's first batch is a request of its own, the rest of its run
the next), holding each decoded image of the pool until it has made the run. So without a cache
each original is decoded at most once per epoch (mosaic on or off; more only where ``image_weights``
draws it more than once, or a broken sample's replacement lies outside the pool), and with a prepared
cache (``--cache ram/disk``, decoded once when it is built) not at all. Every decode is counted:
``DetectionLoader.decoded`` / ``epoch_decoded`` (sample index -> decodes, from every worker).
"""

from __future__ import annotations

import functools
import signal
from collections import Counter
from collections.abc import Callable, Sequence
from multiprocessing.reduction import ForkingPickler

import cv2
import numpy as np
import torch
from torch.multiprocessing.reductions import reduce_tensor

from turboyolo.data.augment import (
    AugmentParams,
    augment_sample,
    letterbox_matrix,
    mixup,
    mixup_partner,
    mosaic_partners,
    mosaic_sample,
    sample_rng,
)
from turboyolo.data.batch import (  # MetaBatch and collate: importable from here, as before
    DroppedSample,
    ImageMeta,
    MetaBatch,  # noqa: F401
    collate,  # noqa: F401
    collate_group,
)
from turboyolo.data.decode import decode_image
from turboyolo.data.sampler import (
    BatchGroup,
    BatchGroups,
    EpochChain,
    MultiScaleBatchSampler,
    Requests,
    TailSampler,
    longest_pool,
)
from turboyolo.data.scan import Sample
from turboyolo.devices import usable_cpus
from turboyolo.errors import DataError, printable

MAX_REPLACEMENTS = 16  # tries before a batch slot gives up (only with an almost entirely broken data set)
UNCHECKED, VERIFIED, REFUSED = 0, 1, 2  # DetectionDataset.verdicts: what the run's decodes found so far
LOAD_ERRORS = (DataError, OSError, ValueError, cv2.error)


class DetectionDataset(torch.utils.data.Dataset):
    """Map-style dataset keyed by ``(index, epoch, size[, mix[, pool]])`` (what the batch sampler yields).

    ``size`` is the square side, or (width, height) for a rectangular validation batch; ``mix``
    (default True) allows mosaic and mixup for this sample; ``pool`` (a tuple of sample indices; default:
    all samples) is where its mosaic and mixup partners are drawn from.

    Never returns None. A sample that fails to load is replaced by another one chosen from
    (seed, epoch, index, attempt), and the slot's meta records the failure; with ``drop_broken`` (an
    evaluation set, where a substitute would be counted twice) it becomes a :class:`DroppedSample`.

    ``__getitems__`` of a :class:`~turboyolo.data.sampler.BatchGroup` makes its batches holding every
    image it decoded until the group is done, so an image (a sample or a partner) is decoded once per
    group. :attr:`decodes` counts this process's decodes (sample index -> count).
    """

    def __init__(self, samples: Sequence[Sample], augment: AugmentParams | None, decode_size: int,
                 seed: int = 0, cache=None, drop_broken: bool = False):
        self.samples = list(samples)
        self.augment = augment
        self.decode_size = decode_size
        self.seed = seed
        self.cache = cache
        self.drop_broken = drop_broken
        self.decodes: Counter[int] = Counter()  # in this process (a worker counts its own)
        # per sample: UNCHECKED, VERIFIED (its whole decode passed) or REFUSED, in memory the loader's
        # worker processes share (a forked or spawned worker sees the same tensor)
        self.verdicts = torch.zeros(len(self.samples), dtype=torch.uint8).share_memory_()
        self._refused: dict[int, str] = {}  # this process's refusals, raised again without a decode
        self._held: dict[int, tuple[np.ndarray, tuple[int, int]]] | None = None  # a partner pool's images
        self._held_for: tuple | None = None  # (epoch, partner pool) whose decoded images are held
        self._held_left = 0  # samples of that pool not yet made in this process
        self._decoded_now: list[int] = []  # decodes since the last batch was handed out

    def __len__(self) -> int:
        return len(self.samples)

    def load(self, index: int) -> tuple[np.ndarray, tuple[int, int]]:
        """Decoded image (longer side ``decode_size``) and original (h, w) of sample ``index``: from the
        cache, from the images the current group already decoded, or decoded now (and counted)."""
        if self.cache is not None:
            return self.cache.get(index)
        if self._held is not None and index in self._held:
            return self._held[index]
        loaded = self._decode(index)
        self.decodes[index] += 1
        if self._held is not None:
            self._held[index] = loaded
            self._decoded_now.append(index)
        return loaded

    def _decode(self, index: int) -> tuple[np.ndarray, tuple[int, int]]:
        """Decode sample ``index``, whole unless a decode in this run verified it; record the verdict."""
        if index in self._refused:  # refused before in this process: the same error, no decode
            raise DataError(self._refused[index])
        verified = int(self.verdicts[index]) == VERIFIED
        try:
            loaded = decode_image(self.samples[index].image, self.decode_size, verified=verified)
        except LOAD_ERRORS as err:
            self.verdicts[index] = REFUSED
            if isinstance(err, DataError):
                self._refused[index] = str(err)
            raise
        if not verified:
            self.verdicts[index] = VERIFIED
        return loaded

    def __getitems__(self, keys):
        """A :class:`BatchGroup`: its batches as lists of items, each image of their partner pool decoded
        at most once in this process, whether the pool's batches come in one request or several
        (:meth:`_hold`); the first item's meta of each batch lists what was decoded for the batch. Else:
        the items of ``keys``."""
        if not isinstance(keys, BatchGroup):
            return [self[key] for key in keys]
        out = []
        for batch in keys:
            if self.cache is None:
                self._hold(batch)
            try:
                items = [self[key] for key in batch]
            except BaseException:
                self._release(done=True)  # nothing half-counted carries over
                raise
            kept = [item for item in items if not isinstance(item, DroppedSample)]
            if kept:
                kept[0][2].decoded = tuple(self._decoded_now)
            self._decoded_now = []
            out.append(items)
            if self.cache is None:
                self._release()
        return out

    def _hold(self, keys) -> None:
        """Without a cache, before a batch is made: the images decoded for its partner pool stay in hand
        until this process has made the whole pool or a batch of another pool (or epoch) comes (a pool's
        batches are consecutive in the sampler), so a sample and its mosaic and mixup partners are
        decoded once per pool in each process, in one request or several; with partners from the whole
        set (no pool), once per batch. With several workers a pool's batches may be made by different
        workers, each decoding what its own batches draw."""
        epoch, pool = keys[0][1], (keys[0][4] if len(keys[0]) > 4 else None)
        if pool is None or (epoch, pool) != self._held_for:
            self._held, self._held_for, self._held_left = {}, (epoch, pool), len(pool or ())
        self._held_left -= len(keys)
        self._decoded_now = []

    def _release(self, done: bool = False) -> None:
        """After a batch is made: let go of the held images once this process has made its pool
        (``done``: now, e.g. a new iteration or a batch that failed)."""
        if done or self._held_left <= 0:
            self._held, self._held_for, self._held_left = None, None, 0

    def _load_robust(self, index: int, epoch: int, failures: list[tuple[str, str]]
                     ) -> tuple[np.ndarray, tuple[int, int], int]:
        """Load ``index``, or replacements chosen from (seed, epoch, index, attempt) when it breaks."""
        chosen = index
        for attempt in range(MAX_REPLACEMENTS):
            try:
                image, orig_hw = self.load(chosen)
                return image, orig_hw, chosen
            except LOAD_ERRORS as err:
                failures.append((str(self.samples[chosen].image), _reason(err, self.samples[chosen].image)))
                chosen = int(sample_rng(self.seed, epoch, index * MAX_REPLACEMENTS + attempt + 1)
                             .integers(len(self.samples)))
        first, why = failures[0]
        raise DataError(f"{MAX_REPLACEMENTS} samples in a row failed to load (the first: {printable(first)}: "
                        f"{printable(why)}); see the scan report for the files that fail, and fix or remove "
                        "them")

    def __getitem__(self, key: tuple):
        index, epoch, size, *rest = key
        mix = rest[0] if rest else True
        pool = rest[1] if len(rest) > 1 else None
        failures: list[tuple[str, str]] = []
        if self.drop_broken:
            try:
                image, orig_hw = self.load(index)
            except LOAD_ERRORS as err:
                return DroppedSample(str(self.samples[index].image), _reason(err, self.samples[index].image))
            loaded = (image, orig_hw, index)
        else:
            loaded = self._load_robust(index, epoch, failures)
        out, boxes, matrix = self._compose(loaded, index, epoch, size, mix, failures, pool=pool)
        params = self.augment
        if mix and params is not None and params.mixup > 0:
            blend = mixup_partner(self.seed, epoch, index, len(self.samples), params.mixup, pool)
            if blend is not None:
                partner, ratio = blend
                partner_loaded = self._load_robust(partner, epoch, failures)
                other = self._compose(partner_loaded, partner, epoch, size, mix, failures, 1, pool)
                out, boxes = mixup((out, boxes), (other[0], other[1]), ratio)
        _, orig_hw, chosen = loaded
        _, ratio, pad = letterbox_matrix(orig_hw, size)
        meta = ImageMeta(self.samples[chosen].image, orig_hw, ratio, pad, matrix, tuple(failures))
        return out, boxes, meta

    def _compose(self, loaded: tuple[np.ndarray, tuple[int, int], int], index: int, epoch: int, size,
                 mix: bool, failures: list[tuple[str, str]], stream: int = 0,
                 pool: tuple[int, ...] | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Sample ``index`` (``loaded``: its image, original size and the sample actually read) as the
        network sees it, a mosaic (partners drawn from ``pool``) when drawn so; ``stream`` > 0 draws anew
        (a mixup partner is not the copy of its own sample in this epoch)."""
        image, orig_hw, chosen = loaded
        labels = self.samples[chosen].labels
        params = self.augment
        partners = None
        if mix and params is not None:
            partners = mosaic_partners(self.seed, epoch, index, len(self.samples), params.mosaic,
                                       stream, pool)
        rng = sample_rng(self.seed, epoch, index, stream) if params is not None else None
        if partners is not None:
            parts = [(image, labels, orig_hw)]
            for other in partners:
                o_image, o_hw, o_chosen = self._load_robust(int(other), epoch, failures)
                parts.append((o_image, self.samples[o_chosen].labels, o_hw))
            out, boxes, matrix = mosaic_sample(parts, size, params, rng)
        else:
            out, boxes, matrix = augment_sample(image, labels, orig_hw, size, params, rng)
        return out, boxes, matrix


def _reason(err: Exception, path) -> str:
    """The error's text without the file name it starts with (the report names the file already)."""
    return str(err).removeprefix(f"{path}: ")


def default_workers(world_size: int = 1) -> int:
    """Loader workers per process: the CPUs this process may use, shared by ranks, minus one for the
    main process (0 on a one-core machine), at most 16."""
    return max(0, min(16, usable_cpus() // max(1, world_size) - 1))


SMALL_TENSOR_BYTES = 256 << 10  # a worker sends tensors up to this size inside the pickle
_NUMPY_DTYPES = {torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.float32,
                 torch.float64, torch.bool}


def _rebuild_small(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(array)


def _reduce_tensor_from_worker(tensor: torch.Tensor):
    """How a loader worker pickles a tensor for the main process: a small one as bytes in the pickle.
    PyTorch's own reduction moves every tensor to shared memory and sends its file descriptor, which
    costs the receiving main process a socket round trip and a mapping per tensor (~0.7 ms here): with
    a batch's targets, affine and colour numbers and mosaic layout that was ~1 ms of the main process's
    time per image on the device path, more than the worker's own work. Large tensors (the images) still
    travel through shared memory."""
    if (type(tensor) is torch.Tensor and tensor.device.type == "cpu" and not tensor.requires_grad
            and tensor.layout == torch.strided and tensor.dtype in _NUMPY_DTYPES
            and tensor.numel() * tensor.element_size() <= SMALL_TENSOR_BYTES):
        return _rebuild_small, (tensor.numpy(),)
    return reduce_tensor(tensor)


def _worker_init(_: int) -> None:
    # One thread per worker: parallelism comes from the workers, not from nested thread pools.
    cv2.setNumThreads(0)
    torch.set_num_threads(1)
    # Ctrl-C reaches the whole process group: the main process decides (training saves its exact
    # position first); a worker that died of it would fail the batch being loaded.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    ForkingPickler.register(torch.Tensor, _reduce_tensor_from_worker)


class DetectionLoader:
    """Iterable over batches with ``set_epoch`` and the broken samples: ``replaced`` (training) and
    ``dropped`` (evaluation), each (path, reason), all epochs; ``epoch_*`` for the current one. A batch
    whose samples were all dropped is not yielded."""

    def __init__(self, dataset: DetectionDataset, batch_sampler: MultiScaleBatchSampler, workers: int,
                 prefetch_factor: int = 4, pin_memory: bool | None = None):
        self.dataset, self.batch_sampler, self.workers = dataset, batch_sampler, workers
        self.pin_memory = torch.cuda.is_available() if pin_memory is None else pin_memory
        self.group = group_batches(batch_sampler.pool_batches, len(batch_sampler), workers,
                                   dataset.cache is not None)
        kwargs = {}
        if workers > 0:
            # a worker makes a group of batches per request: as many batches in flight as before
            groups = -(-prefetch_factor // self.group)
            kwargs = dict(persistent_workers=True, prefetch_factor=groups, worker_init_fn=_worker_init)
            if "fork" in torch.multiprocessing.get_all_start_methods():
                kwargs["multiprocessing_context"] = "fork"
        # what the DataLoader requests for one epoch of a sampler: its groups of batches (no reference
        # to this loader: the stream holds it, and a cycle would keep dead workers until a collection);
        # made in one process (0-1 workers), an epoch's first batch is a request of its own, so the step
        # does not wait for a whole pool (the rest of the pool, the next request, reuses its images)
        self._requests_of = functools.partial(BatchGroups, size=self.group,
                                              first=1 if workers <= 1 else None)
        self._requests = Requests(self._requests_of(batch_sampler))
        self._loader = torch.utils.data.DataLoader(dataset, batch_sampler=self._requests, num_workers=workers,
                                                   collate_fn=collate_group, pin_memory=self.pin_memory,
                                                   **kwargs)
        self._init_state()

    @staticmethod
    def _flat(delivered):
        """The batches in what the DataLoader delivers (a list of batches per request)."""
        for group in delivered:
            yield from group

    def _init_state(self) -> None:
        """At construction: the epoch stream's state (see set_epoch) and the broken-sample reports."""
        self._plan = _MixPlan(self.batch_sampler)
        self._stream: _Stream | None = None
        self.replaced: list[tuple[str, str]] = []  # (path, reason) of every replacement, all epochs
        self.epoch_replaced: list[tuple[str, str]] = []  # the current/last epoch only
        self.dropped: list[tuple[str, str]] = []  # (path, reason) of every sample left out, all epochs
        self.epoch_dropped: list[tuple[str, str]] = []
        self.decoded: Counter[int] = Counter()  # sample index -> decodes of its original, all epochs
        self.epoch_decoded: Counter[int] = Counter()  # the current/last epoch only

    @property
    def replaced_count(self) -> int:
        return len(self.replaced)

    def set_epoch(self, epoch: int, start: int = 0, mix: bool = True,
                  upcoming: Callable[[int], bool | None] | None = None) -> None:
        """Select the epoch (and its start, see the sampler); ``mix=False``: no mosaic or mixup in it.

        ``upcoming(e)``: for an epoch ``e`` after this one, whether the run mixes in it, None where the
        run plans no epoch ``e``. Given (and with workers), the workers go on into the next epoch's
        first batches while this epoch's last ones are consumed (:class:`EpochChain`): an epoch's first
        batch is not waited for. Each batch is the same either way; an iteration that does not follow on
        from a whole previous epoch (a stop in the middle, a resume, another mix than the one the
        workers assumed) starts the stream anew.
        """
        self.batch_sampler.set_epoch(epoch, start)
        self.batch_sampler.mix = mix
        self._plan.upcoming = upcoming

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def __iter__(self):
        if self._loader is None:
            raise RuntimeError("this loader was closed: it makes no more batches")
        if self.workers == 0:  # made here, anew: nothing held over from an iteration left unfinished
            self.dataset._release(done=True)
        if self._plan.upcoming is None or self.workers == 0 or self.batch_sampler.start:
            self._stream = None
            self._requests.source = self._requests_of(self.batch_sampler)
            return self._tracked(self._flat(self._loader))
        return self._tracked(self._streamed())

    def start(self) -> None:
        """Have the workers start on the current epoch's first batches now, so they are being made while
        the caller does other work (a run's start fits the anchors, builds the model); the iteration that
        follows takes them: the same batches. Nothing where an iteration starts its own loader (no workers, no
        stream across epochs, a start inside the epoch) or the stream already stands at this epoch."""
        if self.workers == 0 or self._plan.upcoming is None or self.batch_sampler.start:
            return
        epoch, mix = self.batch_sampler.epoch, self.batch_sampler.mix
        if self._stream is None or not self._stream.at(epoch, mix):
            self._new_stream(epoch).next_epoch = epoch

    def close(self) -> None:
        """End the workers now: a start that failed after :meth:`start` (they would otherwise live as long
        as anything holds this loader, such as a traceback kept in a notebook). The loader makes no batch
        after this. Its DataLoader and iteration are dropped (nothing else refers to them, no cycle: see
        ``_requests_of``), which is how a DataLoader's workers end."""
        self._stream = None
        self._loader = None

    def _new_stream(self, epoch: int) -> _Stream:
        """A stream across epochs from ``epoch``'s start; its DataLoader iteration begins now (the workers
        are sent their first requests)."""
        chain = EpochChain(self.batch_sampler, epoch, self._plan, self._requests_of)
        self._requests.source = chain
        self._stream = _Stream(chain, self._flat(iter(self._loader)))
        return self._stream

    def _streamed(self):
        """The current epoch's batches from the stream across epochs (started anew when it does not
        stand at this epoch's start with this epoch's mix)."""
        epoch, mix, count = self.batch_sampler.epoch, self.batch_sampler.mix, len(self.batch_sampler)
        stream = self._stream
        if stream is None or not stream.at(epoch, mix):
            stream = self._new_stream(epoch)
        stream.next_epoch = None  # until this epoch's last batch is taken
        for taken in range(1, count + 1):
            batch = next(stream.batches, None)
            if batch is None:  # cannot happen while the chain's epochs are the sampler's
                raise RuntimeError(f"the loader's stream ended inside epoch {epoch + 1}")
            if taken == count:
                # before the yield: the training loop takes exactly the epoch's batches and never asks
                # for one more, so nothing after the last yield would run
                stream.next_epoch = epoch + 1
            yield batch

    def remaining(self, skip: int):
        """The batches of the current epoch after the first ``skip`` (mid-epoch resume).

        Every batch derives from (seed, epoch, index, its partner pool), so skipping in the sampler
        yields exactly the batches the interrupted run would have seen; no image of the skipped part is
        decoded except as a partner of the rest.
        """
        self._stream = None
        return self._tracked(self._flat(self._tail_loader(TailSampler(self.batch_sampler, skip))))

    def _tail_loader(self, sampler) -> torch.utils.data.DataLoader:
        # a one-off loader: at most one non-persistent worker for the rest of one epoch
        return torch.utils.data.DataLoader(self.dataset, batch_sampler=BatchGroups(sampler, first=1),
                                           num_workers=min(self.workers, 1), collate_fn=collate_group,
                                           pin_memory=self.pin_memory,
                                           worker_init_fn=_worker_init if self.workers else None)

    def _tracked(self, batches):
        self.epoch_replaced, self.epoch_dropped, self.epoch_decoded = [], [], Counter()
        for images, targets, metas in batches:
            for _, failures in sorted(metas.failures.items()):
                self.epoch_replaced.extend(failures)
                self.replaced.extend(failures)
            dropped = getattr(metas, "dropped", ())
            self.epoch_dropped.extend(dropped)
            self.dropped.extend(dropped)
            decoded = getattr(metas, "decoded", ())
            self.epoch_decoded.update(decoded)
            self.decoded.update(decoded)
            if len(metas):
                yield images, targets, metas

    def dropped_summary(self) -> str | None:
        """One line after an evaluation, or None when no sample was left out."""
        if not self.epoch_dropped:
            return None
        return (f"{len(self.epoch_dropped)} image(s) failed to load and were left out of this evaluation: "
                + "; ".join(f"{printable(p)}: {printable(r)}" for p, r in self.epoch_dropped)[:2000])

    def replaced_summary(self) -> str | None:
        """One line for the end of an epoch, or None when nothing was replaced."""
        if not self.epoch_replaced:
            return None
        files = sorted({p for p, _ in self.epoch_replaced})
        named = "; ".join(f"{printable(p)}: {printable(r)}" for p, r in dict(self.epoch_replaced).items())
        return (f"{len(self.epoch_replaced)} sample(s) failed to load and were replaced this epoch: "
                + named[:2000]
                + ("" if len(files) < 2 else f" ({len(files)} files)"))


def group_batches(pool_batches: int, epoch_batches: int, workers: int, cached: bool) -> int:
    """Batches one worker makes per request: a whole partner pool (each original decoded once per
    epoch; the longest pool, an epoch's last, included), unless that leaves workers idle (fewer pools in
    an epoch than workers: the pools are cut so every worker has work, an image then decoded up to once
    per piece), or nothing is decoded (a prepared cache: one batch per request)."""
    if cached or pool_batches <= 1:
        return 1
    if workers <= 1:
        return longest_pool(pool_batches)
    return max(1, min(longest_pool(pool_batches), -(-epoch_batches // workers)))


class _MixPlan:
    """The mix of an epoch as the run plans it now (what :class:`EpochChain` asks): the sampler's for its
    current epoch, ``upcoming``'s for a later one (see :meth:`DetectionLoader.set_epoch`)."""

    def __init__(self, sampler):
        self.sampler = sampler
        self.upcoming: Callable[[int], bool | None] | None = None

    def __call__(self, epoch: int) -> bool | None:
        if epoch == self.sampler.epoch:
            return self.sampler.mix
        return None if self.upcoming is None else self.upcoming(epoch)


class _Stream:
    """A loader's batches across epochs (one iteration of its DataLoader over an :class:`EpochChain`) and
    the epoch whose first batch comes next (None: in the middle of one)."""

    def __init__(self, chain: EpochChain, delivered):
        self.chain, self.next_epoch = chain, None  # DetectionLoader._streamed moves it
        self.batches = iter(delivered)

    def at(self, epoch: int, mix: bool) -> bool:
        """Whether the next batch is ``epoch``'s first, made (or to be made) with ``mix``."""
        if self.next_epoch != epoch:
            return False
        if epoch in self.chain.made:
            return self.chain.made[epoch] == mix
        return not self.chain.ended


def move_to_device(images: torch.Tensor, device: torch.device | str, dtype: torch.dtype = torch.float32,
                   channels_last: bool = False) -> torch.Tensor:
    """uint8 [B, 3, H, W] -> ``dtype`` in [0, 1] on ``device`` (non-blocking copy; layout and divide
    there): contiguous, or channels-last with ``channels_last``. Float images (the Darknet loader's,
    already in [0, 1]: data/darknet_loader.py) are only copied and laid out.

    A :class:`turboyolo.data.device_loader.CanvasBatch` (``--augment-on device``) is copied and then
    augmented on the device.
    """
    if hasattr(images, "to_device"):
        return images.to_device(device, dtype, channels_last)
    if images.is_floating_point():  # the Darknet loader's float [0, 1] images
        images = images.to(device, dtype, non_blocking=True)
        return images.contiguous(memory_format=torch.channels_last) if channels_last else images
    images = images.to(device, non_blocking=True)
    layout = torch.channels_last if channels_last else torch.contiguous_format
    images = images.contiguous(memory_format=layout)
    return images.to(dtype).div_(255.0)

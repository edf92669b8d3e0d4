"""Prepared cache: every image decoded once, pre-resized to the largest training size, as uint8.

On disk it is one flat file ``images.u8`` (memory-mapped, so forked loader workers share the page
cache) plus ``index.json`` written last (its presence means the build finished). The index records,
per image, the byte offset, stored (h, w), original (h, w), the source file's path, size and mtime,
and a CRC-32 of the stored pixels; and the prepare parameters. Opening checks the parameters, every
source key (stale -> rebuild), the layout (offsets and sizes; an index that does not describe the data
-> rebuild) and, by default, every entry's CRC: an entry whose pixels were damaged on disk is decoded
again from its source image into its slot, with a warning naming it, so training never reads corrupted
pixels. Opening, repairing and building hold a lock file beside the cache: two processes preparing the
same cache at once end with one valid cache that both use (the second waits, then opens it).
``memory="ram"`` builds the same thing in an anonymous array (the training command's ``--cache ram``).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import mmap
import multiprocessing
import os
import shutil
import signal
import zlib
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from turboyolo.assets import cache_dir
from turboyolo.data.decode import decode_image, probe_image, target_size
from turboyolo.data.scan import REPORT_NAME, Sample, scan_dataset, write_scan_report
from turboyolo.errors import DataError, OutputError, printable, writable_folder
from turboyolo.formats.datasets import load_data_config
from turboyolo.rundir import same_file

CACHE_VERSION = 1
HEADROOM = 0.9  # use at most this fraction of the free RAM / disk
# A folder that refuses writes (a read-only mount, no permission): its valid cache is used as it is.
READ_ONLY_ERRNOS = (errno.EROFS, errno.EACCES, errno.EPERM)


@dataclass
class CacheEntry:
    offset: int
    hw: tuple[int, int]  # stored (h, w); (0, 0) when the image failed to decode at build time
    orig_hw: tuple[int, int]
    path: str
    file_size: int
    mtime_ns: int
    crc: int
    error: str = ""


def _source_key(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns


def _planned_hw(sample: Sample, size: int) -> tuple[int, int]:
    hw = sample.hw if sample.hw is not None else probe_image(sample.image)[:2]
    w, h = target_size(hw[1], hw[0], size)
    return h, w


def estimate_bytes(samples: Sequence[Sample], size: int) -> int:
    """Bytes the cache of ``samples`` at ``size`` will take (exact when the samples carry ``hw``: then
    computed for all of them at once, :func:`~turboyolo.data.decode.target_size`'s arithmetic)."""
    known = np.array([s.hw for s in samples if s.hw is not None], np.float64).reshape(-1, 2)
    scale = size / known.max(1) if len(known) else known[:, 0]
    width = np.maximum(1, np.round(known[:, 1] * scale))  # round half to even, as Python's round()
    height = np.maximum(1, np.round(known[:, 0] * scale))
    total = int((width * height).sum()) * 3
    for sample in samples:
        if sample.hw is None:
            h, w = _planned_hw(sample, size)
            total += h * w * 3
    return total


def available_bytes(memory: str, where: Path) -> int:
    """Free RAM (MemAvailable) or free disk space at ``where``."""
    if memory == "ram":
        try:
            for line in Path("/proc/meminfo").read_text().splitlines():
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            pass
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    probe = where
    while not probe.exists():
        probe = probe.parent
    return shutil.disk_usage(probe).free


class PreparedCache:
    """Decoded, pre-resized images by sample index: ``get(i) -> (uint8 [h, w, 3], orig_hw)``."""

    def __init__(self, root: Path | None, size: int, entries: list[CacheEntry], data: np.ndarray):
        self.root, self.size, self.entries, self.data = root, size, entries, data
        self.damaged: list[int] = []  # entries whose pixels do not match their CRC (found by open)

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def nbytes(self) -> int:
        return int(self.data.size)

    @property
    def failed(self) -> list[tuple[str, str]]:
        """(path, reason) of images that could not be decoded when the cache was built."""
        return [(e.path, e.error) for e in self.entries if e.error]

    def get(self, index: int) -> tuple[np.ndarray, tuple[int, int]]:
        entry = self.entries[index]
        if entry.error:
            raise DataError(f"{entry.path}: {entry.error} (at prepare time)")
        h, w = entry.hw
        return self.data[entry.offset:entry.offset + h * w * 3].reshape(h, w, 3), entry.orig_hw

    # ----------------------------------------------------------------- open / build

    @staticmethod
    def _params(size: int) -> dict:
        return {"version": CACHE_VERSION, "size": size, "decode": "reduced-jpeg+area/linear"}

    @classmethod
    def open(cls, root: Path, samples: Sequence[Sample], size: int, verify: bool = True
             ) -> tuple[PreparedCache | None, str]:
        """The valid cache at ``root`` for exactly these samples, or (None, why it is not usable)."""
        index_path, data_path = root / "index.json", root / "images.u8"
        if not index_path.is_file() or not data_path.is_file():
            return None, "no cache yet"
        try:
            index = json.loads(index_path.read_text(encoding="utf-8"))
            entries = [CacheEntry(e["offset"], tuple(e["hw"]), tuple(e["orig_hw"]), e["path"], e["file_size"],
                                  e["mtime_ns"], e["crc"], e.get("error", "")) for e in index["entries"]]
        except (ValueError, KeyError, TypeError) as err:
            return None, f"index unreadable ({err!r})"
        if index.get("params") != cls._params(size):
            return None, f"built with other parameters {index.get('params')}"
        if len(entries) != len(samples):
            return None, f"{len(entries)} images cached, data set has {len(samples)}"
        for entry, sample in zip(entries, samples, strict=True):
            try:
                key = _source_key(sample.image)
            except OSError:
                key = None
            if entry.path != str(sample.image) or key != (entry.file_size, entry.mtime_ns):
                return None, f"stale: {sample.image} changed since the cache was built"
        if data_path.stat().st_size != index.get("total_bytes"):
            return None, "corrupt: the data file has the wrong size (truncated or overwritten)"
        layout = _layout_problem(entries, samples, size, int(index["total_bytes"]))
        if layout:
            return None, f"corrupt index: {layout}"
        cache = cls(root, size, entries, np.memmap(data_path, dtype=np.uint8, mode="r"))
        if verify:
            cache.damaged = [i for i, e in enumerate(entries) if not e.error and cache._crc(i) != e.crc]
        return cache, "ok"

    def _crc(self, index: int) -> int:
        entry = self.entries[index]
        h, w = entry.hw
        return zlib.crc32(self.data[entry.offset:entry.offset + h * w * 3])

    def repair(self) -> None:
        """Decode the :attr:`damaged` entries again from their source images, into their own slots."""
        data = np.memmap(self.root / "images.u8", dtype=np.uint8, mode="r+")
        for index in self.damaged:
            entry = self.entries[index]
            orig_hw, entry.crc, entry.error = _decode_into((None, len(data), (entry.path, self.size,
                                                                              entry.offset, entry.hw)), data)
            entry.orig_hw = orig_hw
        data.flush()
        del data
        _write_index(self.root, self.size, self.entries, int(self.data.size))
        self.data = np.memmap(self.root / "images.u8", dtype=np.uint8, mode="r")
        self.damaged = []

    @classmethod
    def build(cls, root: Path | None, samples: Sequence[Sample], size: int, workers: int | None = None
              ) -> PreparedCache:
        """Decode every sample into a new cache at ``root`` (``None``: in RAM)."""
        plans = [_planned_hw(s, size) for s in samples]
        offsets = np.concatenate([[0], np.cumsum([h * w * 3 for h, w in plans])]).astype(np.int64)
        total = int(offsets[-1])
        if root is None:
            # shared anonymous memory: forked decode workers write into it, forked loader workers read it
            buffer = mmap.mmap(-1, max(total, 1))
            data = np.frombuffer(buffer, np.uint8, count=total)
            target = None
        else:
            root.mkdir(parents=True, exist_ok=True)
            (root / "index.json").unlink(missing_ok=True)  # invalid until the build completes
            target = root / f"images.u8.{os.getpid()}.part"
            with open(target, "wb") as handle:
                handle.truncate(total)
            data = np.memmap(target, dtype=np.uint8, mode="r+", shape=(total,))
        jobs = [(str(s.image), size, int(offsets[i]), plans[i]) for i, s in enumerate(samples)]
        workers = workers if workers is not None else (os.cpu_count() or 1)
        if workers > 1 and len(jobs) > 1 and _fork_context() is not None:
            global _RAM_TARGET
            _RAM_TARGET = data if root is None else None  # inherited by the forked workers
            try:
                with ProcessPoolExecutor(workers, mp_context=_fork_context(),
                                         initializer=_ignore_sigint) as pool:
                    chunk = max(1, len(jobs) // (workers * 8))
                    specs = [(str(target) if target else None, total, job) for job in jobs]
                    results = list(pool.map(_decode_into, specs, chunksize=chunk))
            finally:
                _RAM_TARGET = None
        else:
            results = [_decode_into((None, total, job), data) for job in jobs]
        entries = []
        for (path, _, offset, plan), (orig_hw, crc, error) in zip(jobs, results, strict=True):
            try:
                file_size, mtime_ns = _source_key(Path(path))
            except OSError:
                file_size, mtime_ns = 0, 0
            entries.append(CacheEntry(offset, (0, 0) if error else plan, orig_hw, path, file_size, mtime_ns,
                                      crc, error))
        if root is None:
            return cls(None, size, entries, data)
        data.flush()
        del data
        os.replace(target, root / "images.u8")
        _write_index(root, size, entries, total)
        return cls(root, size, entries, np.memmap(root / "images.u8", dtype=np.uint8, mode="r"))


def _write_index(root: Path, size: int, entries: list[CacheEntry], total: int) -> None:
    """``index.json``, written last and atomically: its presence means the data file is complete."""
    index = {"params": PreparedCache._params(size), "total_bytes": total,
             "entries": [vars(e) | {"hw": list(e.hw), "orig_hw": list(e.orig_hw)} for e in entries]}
    tmp = root / f"index.json.{os.getpid()}.part"
    tmp.write_text(json.dumps(index), encoding="utf-8")
    os.replace(tmp, root / "index.json")


def _layout_problem(entries: list[CacheEntry], samples: Sequence[Sample], size: int, total: int
                    ) -> str | None:
    """What is wrong with the index's layout: each entry's slot must be where the build put it (one after
    the other, sized for the sample's planned (h, w)), so no repair can write over another image."""
    offset = 0
    for entry, sample in zip(entries, samples, strict=True):
        plan = _planned_hw(sample, size)
        if entry.offset != offset or (not entry.error and tuple(entry.hw) != plan):
            return f"the entry of {entry.path} does not describe its slot"
        offset += plan[0] * plan[1] * 3
    return None if offset == total else "the entries do not cover the data file"


@contextmanager
def _building(root: Path, log) -> Iterator[str]:
    """Held while the cache at ``root`` is opened, repaired or built (a lock file beside it): a second
    process preparing the same cache waits, then opens the cache the first one built. Yields '' , or why
    the folder cannot be written (read-only, no permission): then no lock is taken, and the cache can
    only be used as it is."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: no lock
        yield ""
        return
    try:
        root.parent.mkdir(parents=True, exist_ok=True)
        handle = open(root.parent / f".{root.name}.lock", "a+b")  # noqa: SIM115 - closed below
    except OSError as err:
        if err.errno not in READ_ONLY_ERRNOS:
            writable_folder(root.parent, "--out (turboyolo prepare) or TURBOYOLO_CACHE")  # names a file
            raise
        yield err.strerror or str(err)
        return
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"prepared cache {root}: another process is preparing it; waiting for it")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield ""
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


_RAM_TARGET: np.ndarray | None = None


def _fork_context():
    return multiprocessing.get_context("fork") if "fork" in multiprocessing.get_all_start_methods() else None


def _decode_into(job_spec, data: np.ndarray | None = None) -> tuple[tuple[int, int], int, str]:
    """Decode one image into its slot; returns (orig_hw, crc32, error). Runs in a worker process."""
    target, total, (path, size, offset, plan) = job_spec
    try:
        image, orig_hw = decode_image(path, size)
    except DataError as err:
        return (0, 0), 0, str(err).removeprefix(f"{path}: ")
    if image.shape[:2] != tuple(plan):
        return orig_hw, 0, f"decoded size {image.shape[:2]} differs from the scanned size {tuple(plan)}"
    flat = image.reshape(-1)
    if data is None:
        data = _RAM_TARGET if target is None else np.memmap(target, dtype=np.uint8, mode="r+", shape=(total,))
    data[offset:offset + flat.size] = flat
    return orig_hw, zlib.crc32(flat), ""


def _ignore_sigint() -> None:
    """Decode workers leave Ctrl-C to the main process, which stops the build and says so."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def human_bytes(count: float) -> str:
    """``1536`` -> ``1.5 KiB``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.1f} {unit}" if unit != "B" else f"{int(count)} B"
        count /= 1024
    return f"{count:.1f} GiB"


def default_cache_root(data_path: str | Path, split: str, size: int) -> Path:
    """``$TURBOYOLO_CACHE/prepared/<data stem>-<split>-<size>-<hash of the data path>``."""
    digest = hashlib.sha1(str(Path(data_path).resolve()).encode()).hexdigest()[:12]
    return cache_dir() / "prepared" / f"{Path(data_path).stem}-{split}-{size}-{digest}"


def prepare_cache(samples: Sequence[Sample], size: int, root: Path | None = None, *, memory: str = "disk",
                  workers: int | None = None, verify: bool = True, log=print) -> PreparedCache:
    """Open the valid cache at ``root`` or (re)build it; ``memory="ram"`` builds in RAM instead.

    Entries whose pixels fail their checksum are decoded again (a warning names them); an index that
    cannot be read or does not describe the data means a rebuild (a warning says why). Another process
    preparing the same ``root`` is waited for. Before a build the size is estimated and printed; when
    free RAM or disk cannot hold it, refuse.

    Raises:
        DataError: not enough space (with the numbers), or ``root`` missing for a disk cache.
    """
    if memory not in ("disk", "ram"):
        raise DataError(f"--cache {memory!r}: use ram or disk")
    if memory == "ram":
        return _build(samples, size, None, "ram", workers, log)
    if root is None:
        raise DataError("a disk cache needs a folder (default_cache_root gives one)")
    with _building(root, log) as unwritable:
        cache, why = PreparedCache.open(root, samples, size, verify=verify)
        if unwritable and (cache is None or cache.damaged):
            problem = why if cache is None else f"{len(cache.damaged)} image(s) fail their checksums"
            raise DataError(f"prepared cache {root}: {problem}, and its folder cannot be written "
                            f"({unwritable}) to build or repair it: make the folder writable, or give a "
                            "writable one (TURBOYOLO_CACHE, `turboyolo prepare --out`), or use --cache ram")
        if cache is None:
            if why != "no cache yet":
                log(f"warning: prepared cache {root}: {why}; rebuilding it from the source images")
            return _build(samples, size, root, "disk", workers, log)
        if cache.damaged:
            named = ", ".join(printable(cache.entries[i].path) for i in cache.damaged[:10])
            more = f" and {len(cache.damaged) - 10} more" if len(cache.damaged) > 10 else ""
            log(f"warning: prepared cache {root}: the stored pixels of {len(cache.damaged)} image(s) do not "
                f"match their checksums (damaged on disk); decoding them again from the source images: "
                f"{named}{more}")
            cache.repair()
        read_only = f" (its folder is read-only: {unwritable}; used as it is)" if unwritable else ""
        log(f"prepared cache {root}: {len(cache)} images, {human_bytes(cache.nbytes)}, valid{read_only}")
        return cache


def _build(samples: Sequence[Sample], size: int, root: Path | None, memory: str, workers: int | None,
           log) -> PreparedCache:
    """Build a cache after checking that RAM or disk can hold it."""
    need = estimate_bytes(samples, size)
    where = root if root is not None else Path.cwd()
    free = available_bytes(memory, where)
    log(f"prepared cache: {len(samples)} images at {size} px need {human_bytes(need)} "
        f"({memory}, {human_bytes(free)} free)")
    if need > HEADROOM * free:
        raise DataError(f"the prepared cache needs {human_bytes(need)} but only {human_bytes(free)} of "
                        f"{memory} is free; use a smaller --img-size, the other --cache kind, or free space")
    cache = PreparedCache.build(root, samples, size, workers)
    if cache.failed:
        log(f"prepared cache: {len(cache.failed)} image(s) failed to decode; training replaces them, "
            "evaluation leaves them out:")
        for path, reason in cache.failed:
            log(f"  {printable(path)}: {printable(reason)}")
    return cache


def run_prepare(data: str | Path, img_size: int, splits: Sequence[str] = ("train", "val"),
                out: str | Path | None = None, workers: int | None = None,
                log: Callable[[str], object] = lambda _: None) -> dict[str, PreparedCache]:
    """``turboyolo prepare``: decode every image of ``splits`` once into its prepared (disk) cache; ``log``
    receives each split's scan summary and progress.

    Args:
        data: a .data, data.yaml or image folder.
        img_size: the largest training size (the longer side stored).
        splits: which splits to prepare, each into its own cache.
        out: cache folder (``<out>/<split>``); default: :func:`default_cache_root`, the folder
            ``turboyolo train --cache disk`` reads.
        workers: decode processes (default: all CPUs).
    Returns:
        The opened cache of each split.
    Raises:
        DataError: a split cannot be scanned, or its cache does not fit on the disk.
    """
    caches = {}
    for split in splits:
        root = Path(out) / split if out else default_cache_root(data, split, img_size)
        if out and any(same_file(folder, root) for folder in load_data_config(data).folders()):
            raise OutputError(f"--out {printable(out)}: the {split} cache folder {printable(root)} is an "
                              "image folder of the data set (the output rule: outputs never go where the "
                              "inputs are); choose a folder outside the data set")
        result = scan_dataset(data, split, report_path=root / REPORT_NAME)
        log(result.console_text())
        result.require_samples()
        cache = prepare_cache(result.samples, img_size, root, memory="disk", workers=workers, log=log)
        failed = cache.failed  # what only the build's strict decode found: named in the report too
        if failed:
            with contextlib.suppress(OSError):
                write_scan_report(root, [result], load_failures=failed)
        left_out = (f" ({len(failed)} failed to decode and are left out; see {printable(root / REPORT_NAME)})"
                    if failed else "")
        log(f"{split}: {len(cache) - len(failed)} images -> {cache.root}{left_out}")
        caches[split] = cache
    return caches

"""The prepared cache on disk: damaged pixels are found by their checksums and decoded again from the
sources (only those entries, with a warning naming them); a damaged or truncated index or data file means
a rebuild, never a repair that writes over another image; two processes preparing the same cache at once
end with one valid cache that both use."""

from __future__ import annotations

import json
import multiprocessing
import os

import numpy as np
import pytest

from synth import make_image_folder
from turboyolo.data.cache import PreparedCache, prepare_cache
from turboyolo.data.decode import decode_image
from turboyolo.data.scan import scan_dataset


@pytest.fixture
def samples(tmp_path, isolated_cache):
    make_image_folder(tmp_path, count=6)
    return scan_dataset(tmp_path / "images", "train").samples


def _flip(path, offset: int) -> None:
    with open(path, "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 0x5A]))


def test_flipped_pixels_are_decoded_again_and_named(samples, tmp_path):
    root = tmp_path / "prep"
    built = prepare_cache(samples, 64, root, workers=1, log=lambda *_: None)
    expected = [np.array(built.get(i)[0]) for i in range(len(built))]
    for index in (1, 4):  # a byte in the middle of two images
        entry = built.entries[index]
        _flip(root / "images.u8", entry.offset + entry.hw[0] * entry.hw[1])
    untouched = (root / "images.u8").read_bytes()
    logs: list[str] = []
    cache = prepare_cache(samples, 64, root, workers=1, log=logs.append)
    warning = next(line for line in logs if "do not match their checksums" in line)
    assert "2 image(s)" in warning and str(samples[1].image) in warning and str(samples[4].image) in warning
    assert not any("rebuilding" in line for line in logs)  # only those two were decoded again
    for index, pixels in enumerate(expected):
        assert np.array_equal(cache.get(index)[0], pixels)
    repaired = (root / "images.u8").read_bytes()
    changed = np.flatnonzero(np.frombuffer(repaired, np.uint8) != np.frombuffer(untouched, np.uint8))
    assert len(changed) == 2  # the two flipped bytes, nothing else
    assert PreparedCache.open(root, samples, 64)[0].damaged == []
    assert np.array_equal(expected[1], decode_image(samples[1].image, 64)[0])


@pytest.mark.parametrize("damage", ["truncated index", "shifted offset", "truncated data", "wrong hw"])
def test_a_damaged_index_or_data_file_means_a_rebuild(samples, tmp_path, damage):
    root = tmp_path / "prep"
    built = prepare_cache(samples, 64, root, workers=1, log=lambda *_: None)
    expected = [np.array(built.get(i)[0]) for i in range(len(built))]
    index_path, text = root / "index.json", (root / "index.json").read_text()
    if damage == "truncated index":
        index_path.write_text(text[: len(text) // 2])
    elif damage == "truncated data":
        os.truncate(root / "images.u8", (root / "images.u8").stat().st_size - 100)
    else:  # valid JSON that no longer describes the data: a repair there would overwrite another image
        index = json.loads(text)
        if damage == "shifted offset":
            index["entries"][2]["offset"] += 3
        else:
            index["entries"][2]["hw"] = [index["entries"][2]["hw"][0] - 1, index["entries"][2]["hw"][1]]
        index_path.write_text(json.dumps(index))
    logs: list[str] = []
    cache = prepare_cache(samples, 64, root, workers=1, log=logs.append)
    warned = f"warning: prepared cache {root}: "
    assert any(line.startswith(warned) and "rebuilding it" in line for line in logs)
    for index, pixels in enumerate(expected):
        assert np.array_equal(cache.get(index)[0], pixels)
    assert PreparedCache.open(root, samples, 64)[1] == "ok"


def _prepare_at_once(barrier, samples, root, queue):
    import time

    import turboyolo.data.cache as cache_module

    original = cache_module.decode_image

    def slow(path, size):  # widen the window in which a second build would interleave with the first
        time.sleep(0.05)
        return original(path, size)

    cache_module.decode_image = slow
    logs: list[str] = []
    barrier.wait()
    try:
        cache = prepare_cache(samples, 64, root, workers=1, log=logs.append)
        queue.put((os.getpid(), [np.array(cache.get(i)[0]).sum() for i in range(len(cache))], logs))
    except BaseException as err:  # noqa: BLE001 - reported to the test
        queue.put((os.getpid(), repr(err), logs))


def test_two_processes_preparing_one_cache_end_with_one_valid_cache(samples, tmp_path):
    context = multiprocessing.get_context("fork")
    barrier, queue, root = context.Barrier(2), context.Queue(), tmp_path / "prep"
    args = (barrier, samples, root, queue)
    workers = [context.Process(target=_prepare_at_once, args=args) for _ in range(2)]
    for worker in workers:
        worker.start()
    results = [queue.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
    sums = [result[1] for result in results]
    assert all(isinstance(s, list) for s in sums), results
    assert sums[0] == sums[1]
    builds = [any("need" in line for line in logs) for _, _, logs in results]
    assert sorted(builds) == [False, True]  # one built it, the other waited and opened it
    waited = next(logs for _, _, logs in results if not any("need" in line for line in logs))
    assert any("waiting" in line for line in waited) and any("valid" in line for line in waited)
    cache, why = PreparedCache.open(root, samples, 64)
    assert why == "ok" and cache.damaged == [] and not list(root.glob("*.part"))

"""Loader: same batches with 0/1/2 workers and with the prepared cache; multiscale; ranks; device."""

import numpy as np
import pytest
import torch

from synth import make_image_folder as make_dataset
from turboyolo.data.augment import AugmentParams
from turboyolo.data.cache import PreparedCache, prepare_cache
from turboyolo.data.loader import move_to_device
from turboyolo.data.pipeline import build_loader
from turboyolo.data.sampler import MultiScaleBatchSampler
from turboyolo.data.scan import scan_dataset


@pytest.fixture
def samples(tmp_path, isolated_cache):
    make_dataset(tmp_path, count=11)
    return scan_dataset(tmp_path / "images", "train").samples


def _epochs(loader, epochs=(0, 1)):
    out = []
    for epoch in epochs:
        loader.set_epoch(epoch)
        for images, targets, metas in loader:
            out.append((images.clone(), targets.clone(), [str(m.path) for m in metas]))
    return out


def _assert_same(a, b):
    assert len(a) == len(b)
    for (ia, ta, pa), (ib, tb, pb) in zip(a, b, strict=True):
        assert pa == pb
        assert torch.equal(ia, ib)
        assert torch.equal(ta, tb)


def test_batches_do_not_depend_on_workers_or_cache(samples, tmp_path):
    kwargs = dict(img_size=64, batch_size=4, augment=AugmentParams.from_net(angle=5), shuffle=True, seed=3,
                  multiscale=(64, 128))
    reference = _epochs(build_loader(samples, workers=0, **kwargs))
    images, targets, _ = reference[0][:3]
    assert images.dtype == torch.uint8 and images.shape[1] == 3
    # channels-last in memory (no transposing copy in the loader); on the device: contiguous, same values
    assert images.is_contiguous(memory_format=torch.channels_last)
    moved = move_to_device(images, "cpu")
    assert moved.is_contiguous() and torch.equal(moved, images.float() / 255)
    assert move_to_device(images, "cpu", channels_last=True).is_contiguous(memory_format=torch.channels_last)
    assert targets.dtype == torch.float32 and targets.shape[1] == 6
    assert set(targets[:, 0].long().tolist()) <= set(range(images.shape[0]))
    for workers in (1, 2):
        _assert_same(reference, _epochs(build_loader(samples, workers=workers, **kwargs)))
    cache = prepare_cache(samples, 128, tmp_path / "prep", workers=2, log=lambda *_: None)
    assert isinstance(cache, PreparedCache) and cache.root is not None
    _assert_same(reference, _epochs(build_loader(samples, workers=0, cache=cache, **kwargs)))
    _assert_same(reference, _epochs(build_loader(samples, workers=2, cache=cache, **kwargs)))
    ram = prepare_cache(samples, 128, None, memory="ram", workers=2, log=lambda *_: None)
    ram_serial = prepare_cache(samples, 128, None, memory="ram", workers=1, log=lambda *_: None)
    assert np.array_equal(ram.data, ram_serial.data) and np.array_equal(ram.data, np.asarray(cache.data))
    _assert_same(reference, _epochs(build_loader(samples, workers=0, cache=ram, **kwargs)))
    # epochs differ from each other, and a different seed gives different batches
    assert not torch.equal(reference[0][0], reference[3][0]) or reference[0][2] != reference[3][2]


def test_multiscale_uniform_and_shared_by_ranks(samples):
    loader = build_loader(samples, img_size=96, batch_size=2, augment=AugmentParams(), workers=0,
                          shuffle=True, multiscale=(64, 160))
    sizes = set()
    for images, _, metas in loader:
        assert images.shape[2] == images.shape[3] and images.shape[2] % 32 == 0
        assert 64 <= images.shape[2] <= 160
        sizes.add(images.shape[2])
        assert len(metas) == images.shape[0]
    assert len(sizes) > 1
    ranks = [MultiScaleBatchSampler(11, 2, 96, shuffle=True, seed=5, multiscale=(64, 160), rank=r,
                                    world_size=2) for r in range(2)]
    batches = [list(s) for s in ranks]
    assert len(batches[0]) == len(batches[1]) == len(ranks[0])
    assert [b[0][2] for b in batches[0]] == [b[0][2] for b in batches[1]]  # same size sequence
    seen = [i for b in batches[0] + batches[1] for i, _, _ in b]
    assert set(seen) == set(range(11)) and len(seen) == 12  # padded to a multiple of world_size
    ranks[0].set_epoch(1)
    assert [i for b in ranks[0] for i, _, _ in b] != [i for b in batches[0] for i, _, _ in b]


def test_validation_metas_map_back(samples):
    loader = build_loader(samples, img_size=64, batch_size=3, augment=None, workers=0, shuffle=False)
    images, targets, metas = next(iter(loader))
    meta = metas[1]
    rows = targets[targets[:, 0] == 1][:, 2:].numpy() * 64
    orig = (rows[:, :2] - np.array(meta.pad)) / meta.ratio
    expected = samples[1].labels[:, 1:3] * [meta.orig_hw[1], meta.orig_hw[0]]
    np.testing.assert_allclose(orig, expected, atol=0.05)
    assert meta.path == samples[1].image
    assert len(loader) == 4


def test_drop_last_and_move_to_device(samples):
    loader = build_loader(samples, img_size=64, batch_size=4, augment=None, workers=0, shuffle=False,
                          drop_last=True)
    assert len(loader) == 2 and all(len(m) == 4 for _, _, m in loader)
    images = torch.tensor([[[[0, 255]]]], dtype=torch.uint8)
    out = move_to_device(images, "cpu")
    assert out.dtype == torch.float32 and out.flatten().tolist() == [0.0, 1.0]


def test_stale_and_corrupt_cache_rebuilt(samples, tmp_path):
    root = tmp_path / "prep"
    prepare_cache(samples, 64, root, workers=1, log=lambda *_: None)
    assert PreparedCache.open(root, samples, 64)[0] is not None
    assert "parameters" in PreparedCache.open(root, samples, 96)[1]
    with open(root / "images.u8", "r+b") as handle:
        handle.seek(100)
        byte = handle.read(1)
        handle.seek(100)
        handle.write(bytes([byte[0] ^ 0xFF]))
    cache, why = PreparedCache.open(root, samples, 64)
    assert why == "ok" and cache.damaged == [0]  # the damaged entry is found (and repaired on prepare)
    logs = []
    repaired = prepare_cache(samples, 64, root, workers=1, log=logs.append)
    assert any("do not match their checksums" in line for line in logs) and len(repaired) == len(samples)
    samples[0].image.write_bytes(samples[0].image.read_bytes() + b"\0")
    assert "stale" in PreparedCache.open(root, samples, 64)[1]


def test_cache_refuses_when_space_is_short(samples, tmp_path, monkeypatch):
    import turboyolo.data.cache as cache_module

    monkeypatch.setattr(cache_module, "available_bytes", lambda memory, where: 1000)
    with pytest.raises(cache_module.DataError, match="KiB"):
        prepare_cache(samples, 64, tmp_path / "p", log=lambda *_: None)


def test_mosaic_option_deterministic_and_counts_failures(samples):
    kwargs = dict(img_size=64, batch_size=4, augment=AugmentParams.from_net(mosaic=0.5), shuffle=True, seed=2)
    reference = _epochs(build_loader(samples, workers=0, **kwargs))
    _assert_same(reference, _epochs(build_loader(samples, workers=2, **kwargs)))
    assert AugmentParams.from_net().mosaic == 0.0  # outside the default
    samples[4].image.write_bytes(b"")
    loader = build_loader(samples, workers=0, **{**kwargs, "augment": AugmentParams(mosaic=1.0)})
    assert all(len(m) == 4 for _, _, m in list(loader)[:-1])
    assert loader.replaced_count >= 1 and all(p == str(samples[4].image) for p, _ in loader.replaced)


def test_metas_survive_pinning_and_pickling(samples):
    import pickle

    from torch.utils.data._utils.pin_memory import pin_memory

    from turboyolo.data.loader import ImageMeta, MetaBatch

    metas = [ImageMeta(samples[i].image, (10, 20), 0.5, (1.0, 2.0), np.eye(2, 3), (("a", "b"),) if i else ())
             for i in range(3)]
    batch = MetaBatch.from_metas(metas)
    assert pin_memory(batch) is batch
    again = pickle.loads(pickle.dumps(batch))
    assert len(again) == 3 and [m.path for m in again] == [m.path for m in metas]
    assert again[1].replaced == ("a", "b") and again[0].replaced is None and again[-1].orig_hw == (10, 20)
    np.testing.assert_array_equal(again[2].matrix, np.eye(2, 3))


def test_a_worker_sends_small_tensors_in_the_pickle_and_large_ones_through_shared_memory():
    """Small tensors (targets, affine and colour numbers) travel as bytes: a shared-memory handle costs the
    main process a socket round trip and a mapping each. Values and dtypes arrive unchanged."""
    import pickle

    from turboyolo.data.loader import _rebuild_small, _reduce_tensor_from_worker

    small = torch.arange(12, dtype=torch.float32).reshape(3, 4)[:, 1:]  # a strided view
    rebuild, args = _reduce_tensor_from_worker(small)
    assert rebuild is _rebuild_small
    back = rebuild(*pickle.loads(pickle.dumps(args)))
    assert back.dtype == small.dtype and torch.equal(back, small)
    for tensor in (torch.zeros(1 << 20, dtype=torch.uint8), torch.zeros(3, dtype=torch.bfloat16),
                   torch.zeros(3, requires_grad=True)):
        assert _reduce_tensor_from_worker(tensor)[0] is not _rebuild_small

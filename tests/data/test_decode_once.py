"""Each original decoded at most once per epoch without a cache (mosaic and mixup partners come from the
images a worker has in hand) and once per run with ``--cache ram/disk``; the batches stay a function of
(seed, epoch, index, pool): the same with 0 or 2 workers, after a mid-epoch resume, with or without cache."""

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from synth import make_image_folder as make_dataset
from turboyolo.data import decode
from turboyolo.data.augment import AugmentParams, mosaic_rng, partner_draw
from turboyolo.data.cache import prepare_cache
from turboyolo.data.loader import group_batches
from turboyolo.data.pipeline import PARTNER_POOL_ENV, build_loader
from turboyolo.data.sampler import default_pool_batches
from turboyolo.data.scan import scan_dataset
from turboyolo.errors import DataError

MIXING = AugmentParams.from_net(mosaic=1.0)


@pytest.fixture
def samples(tmp_path, isolated_cache):
    make_dataset(tmp_path, count=23, size=(80, 140), num_classes=3)
    return scan_dataset(tmp_path / "images", "train").samples


def _epoch(loader, epoch):
    loader.set_epoch(epoch)
    return [(images.clone(), targets.clone(), [str(m.path) for m in metas])
            for images, targets, metas in loader]


def _same(a, b):
    assert len(a) == len(b)
    for (ia, ta, pa), (ib, tb, pb) in zip(a, b, strict=True):
        assert pa == pb and torch.equal(ia, ib) and torch.equal(ta, tb)


@pytest.mark.parametrize("augment", [MIXING, AugmentParams(mosaic=0.5, mixup=0.5)])
def test_cold_epoch_decodes_each_original_at_most_once(samples, augment):
    kwargs = dict(img_size=64, batch_size=3, augment=augment, shuffle=True, seed=5, partner_pool=2)
    loader = build_loader(samples, workers=0, **kwargs)
    before = decode.DECODES.copy()
    for epoch in (0, 1):
        batches = _epoch(loader, epoch)
        assert sum(len(p) for _, _, p in batches) == len(samples)
        assert set(loader.epoch_decoded) == set(range(len(samples)))  # every sample, its pool's partners
        assert max(loader.epoch_decoded.values()) == 1
        assert any(t.shape[0] > len(p) for _, t, p in batches)  # mosaics (several images' boxes) were made
    assert loader.decoded == Counter({i: 2 for i in range(len(samples))})
    per_path = decode.DECODES - before  # the process-wide count agrees (workers=0: all in this process)
    assert per_path == Counter({str(s.image): 2 for s in samples})
    # the same batches from 2 worker processes (each makes whole pools), counted there the same way
    two = build_loader(samples, workers=2, **kwargs)
    paths = [str(s.image) for s in samples]
    for epoch in (0, 1):
        alone = _epoch(build_loader(samples, workers=0, **kwargs), epoch)
        _same(alone, _epoch(two, epoch))
        assert len(two.epoch_decoded) == len(samples)
        # the run's first batch is a request of its own: the worker making the rest of its pool decodes its
        # images again as partners (in the run's first epoch only, once more at most)
        twice = {i for i, n in two.epoch_decoded.items() if n > 1}
        first = {paths.index(path) for path in alone[0][2]} if epoch == 0 else set()
        assert twice <= first and max(two.epoch_decoded.values()) <= 2


@pytest.mark.parametrize("workers", [0, 1])
@pytest.mark.parametrize("augment", [MIXING, AugmentParams(mosaic=0.5, mixup=0.5)])
def test_device_path_without_a_cache_decodes_each_original_once_per_epoch(samples, augment, workers):
    """--augment-on device --cache none: a mosaic's partners come from the images held for its pool (they
    were decoded again for every mosaic, 4-5 decodes per sample); the same batches as before."""
    kwargs = dict(img_size=64, batch_size=3, augment=augment, shuffle=True, seed=5, partner_pool=2,
                  augment_on="device")
    loader = build_loader(samples, workers=workers, **kwargs)
    before = decode.DECODES.copy()
    for epoch in (0, 1):
        loader.set_epoch(epoch)
        batches = [(batch.to_device("cpu"), targets.clone()) for batch, targets, _ in loader]
        assert set(loader.epoch_decoded) == set(range(len(samples)))
        assert max(loader.epoch_decoded.values()) == 1, loader.epoch_decoded
        assert any(len(t) > 3 for _, t in batches)  # mosaics were made
        if workers == 0:  # all in this process: the process-wide count agrees
            assert decode.DECODES - before == Counter({str(s.image): epoch + 1 for s in samples})
    if workers == 0:  # a whole pool planned in this process: its images let go
        assert loader.dataset._held is None
    # the images and targets do not depend on what was held: a fresh loader per epoch holds nothing
    fresh = build_loader(samples, workers=0, **kwargs)
    fresh.set_epoch(1)
    for (images, targets), (batch, fresh_targets, _) in zip(batches, fresh, strict=True):
        assert torch.equal(images, batch.to_device("cpu")) and torch.equal(targets, fresh_targets)


def test_device_path_holds_nothing_over_from_the_last_epoch(samples):
    """Unshuffled, one pool: the next epoch's pool is the same tuple; its images are decoded again."""
    loader = build_loader(samples, workers=0, img_size=64, batch_size=3, augment=MIXING, shuffle=False,
                          seed=5, partner_pool=100, augment_on="device")
    for epoch in (0, 1):
        loader.set_epoch(epoch)
        for _ in loader:
            pass
        assert loader.epoch_decoded == Counter(range(len(samples)))
    # an epoch left unfinished, then run again: nothing held over from the first try
    loader.set_epoch(2)
    for taken, _ in enumerate(loader):
        if taken == 2:
            break
    for _ in loader:
        pass
    assert loader.epoch_decoded == Counter(range(len(samples)))


def test_partners_from_the_whole_set_decode_again(samples):
    # partner_pool=0 is the behaviour before pools: partners from the whole data set, so a mosaic decodes
    # its 3 partners again (an image a batch already holds excepted): the counter sees it
    loader = build_loader(samples, workers=0, img_size=64, batch_size=3, augment=MIXING, shuffle=True,
                          seed=5, partner_pool=0)
    _epoch(loader, 0)
    assert sum(loader.epoch_decoded.values()) > 2.5 * len(samples)
    assert max(loader.epoch_decoded.values()) > 2


def test_test_only_switch_draws_partners_from_the_whole_set(samples, monkeypatch):
    """TURBOYOLO_PARTNER_POOL (what bench/defaults_250.py --partner-pool sets) is the default of every
    loader built without ``partner_pool``: 0 gives the batches and decodes of independent draws."""
    kwargs = dict(workers=0, img_size=64, batch_size=3, augment=MIXING, shuffle=True, seed=5)
    pooled = build_loader(samples, **kwargs)
    monkeypatch.setenv(PARTNER_POOL_ENV, "0")
    switched = build_loader(samples, **kwargs)
    assert pooled.batch_sampler.pool_batches > 0 and switched.batch_sampler.pool_batches == 0
    batches = _epoch(switched, 0)
    _same(batches, _epoch(build_loader(samples, partner_pool=0, **kwargs), 0))
    _epoch(pooled, 0)
    assert sum(pooled.epoch_decoded.values()) == len(samples)
    assert sum(switched.epoch_decoded.values()) > 2.5 * len(samples)
    monkeypatch.setenv(PARTNER_POOL_ENV, "2")  # any pool size
    assert build_loader(samples, **kwargs).batch_sampler.pool_batches == 2
    monkeypatch.setenv(PARTNER_POOL_ENV, "all")
    with pytest.raises(DataError, match=PARTNER_POOL_ENV):
        build_loader(samples, **kwargs)


@pytest.mark.parametrize("memory", ["ram", "disk"])
def test_cache_decodes_each_image_once_per_run(samples, tmp_path, memory):
    before = decode.DECODES.copy()
    cache = prepare_cache(samples, 64, tmp_path / "prep" if memory == "disk" else None, memory=memory,
                          workers=1, log=lambda *_: None)
    kwargs = dict(img_size=64, batch_size=3, augment=MIXING, shuffle=True, seed=5)
    loader = build_loader(samples, workers=0, cache=cache, **kwargs)
    cached = [_epoch(loader, epoch) for epoch in (0, 1, 2)]
    assert decode.DECODES - before == Counter({str(s.image): 1 for s in samples})  # the build, nothing else
    assert not loader.decoded
    # and the cache changes nothing the network sees
    cold = build_loader(samples, workers=0, **kwargs)
    for epoch, batches in enumerate(cached):
        _same(_epoch(cold, epoch), batches)


def test_mid_epoch_resume_gives_the_same_mosaics(samples):
    kwargs = dict(img_size=64, batch_size=3, augment=AugmentParams(mosaic=0.7, mixup=0.3), shuffle=True,
                  seed=1, partner_pool=3)
    full = _epoch(build_loader(samples, workers=0, **kwargs), 1)
    for workers in (0, 1):
        loader = build_loader(samples, workers=workers, **kwargs)
        loader.set_epoch(1)
        tail = [(i.clone(), t.clone(), [str(m.path) for m in ms]) for i, t, ms in loader.remaining(4)]
        _same(full[4:], tail)  # batch 4 starts inside the second pool: its pool is still the whole run


def test_partners_come_from_the_pool_and_cover_the_set(samples):
    """Mosaic statistics: every sample stays a partner about as often as before (3 per mosaic, spread
    over the data set), only drawn from the images of its run of batches."""
    loader = build_loader(samples, workers=0, img_size=64, batch_size=3, augment=MIXING, shuffle=True,
                          seed=2, partner_pool=2)
    sampler, dataset = loader.batch_sampler, loader.dataset
    sampler.set_epoch(0)
    chosen = Counter()
    for batch in sampler:
        for index, epoch, _size, mix, pool in batch:
            assert mix is True and index in pool and len(pool) >= 3
            draw = mosaic_rng(dataset.seed, epoch, index)
            draw.random()  # the loader's first draw: mosaic or not
            partners = partner_draw(draw, pool, len(samples), size=3)
            assert set(partners) <= set(pool)
            chosen.update(partners)
    assert sum(chosen.values()) == 3 * len(samples) and len(chosen) > len(samples) // 2


def test_workers_share_small_epochs_and_a_cache_needs_no_groups(samples, tmp_path):
    # 23 samples, batch 3: 8 batches in one pool of 8; with 2 workers the pool is cut in 2 groups of 4
    # batches so both workers have work (an image then decoded up to once per group), same batches;
    # a request holds the longest pool (an epoch's last run of fewer than 4 batches joins the one before)
    assert group_batches(8, 8, 0, False) == 11 and group_batches(8, 8, 1, False) == 11
    assert group_batches(8, 8, 4, False) == 2 and group_batches(8, 80, 4, False) == 11
    assert group_batches(8, 8, 0, True) == 1 and group_batches(0, 8, 0, False) == 1
    kwargs = dict(img_size=64, batch_size=3, augment=MIXING, shuffle=True, seed=4, partner_pool=8)
    alone = build_loader(samples, workers=0, **kwargs)
    shared = build_loader(samples, workers=2, **kwargs)
    assert alone.group == 11 and shared.group == 4
    _same(_epoch(alone, 0), _epoch(shared, 0))
    assert max(alone.epoch_decoded.values()) == 1
    assert max(shared.epoch_decoded.values()) <= 2 and len(shared.epoch_decoded) == len(samples)
    cache = prepare_cache(samples, 64, None, memory="ram", workers=1, log=lambda *_: None)
    assert build_loader(samples, workers=0, cache=cache, **kwargs).group == 1


@pytest.mark.parametrize("workers", [0, 1])
def test_an_epochs_joined_last_pool_is_decoded_once(samples, workers):
    """23 samples, batch 3, pools of 6 batches: the last 2 batches join the first run (one pool of 8);
    one request makes all 8, so its images are decoded once, as in any other pool."""
    loader = build_loader(samples, workers=workers, img_size=64, batch_size=3, augment=MIXING, shuffle=True,
                          seed=3, partner_pool=6)
    loader.batch_sampler.set_epoch(0)
    pools = {id(batch[0][4]) for batch in loader.batch_sampler}
    assert len(pools) == 1 and loader.group >= 8
    for epoch in (0, 1):
        _epoch(loader, epoch)
        assert loader.epoch_decoded == Counter(range(len(samples)))


def test_default_pool_size():
    assert default_pool_batches(8) == 8 and default_pool_batches(1) == 64
    assert default_pool_batches(64) * 64 == 256 and default_pool_batches(3) * 3 >= 64
    assert np.all([default_pool_batches(b) >= 1 for b in range(1, 300)])


@pytest.mark.slow
def test_turboyolo_train_decodes_each_training_image_once_per_epoch(tmp_path, isolated_cache):
    """Through `turboyolo train` with its defaults (mosaic 1 where the cfg says none, --cache none),
    in-process loaders: 2 epochs decode each training image at most twice; with --cache ram the training
    loader decodes none (the cache build decoded each once, in its decode processes)."""
    from synth import make_dataset as make_train_set
    from synth import micro_cfg
    from turboyolo.cli import main as cli

    data = make_train_set(tmp_path / "data", 8, 2)
    cfg = micro_cfg(tmp_path / "micro.cfg", batch=4)
    train_images = [line for line in (tmp_path / "data" / "train.txt").read_text().split() if line]
    # every loader flag given: auto's start-of-run measurement (a fixed sample of 8 images, decoded a few
    # times whatever the data set's size) does not run, so the count is the training loader's alone
    common = ["train", "--cfg", str(cfg), "--data", str(data), "--epochs", "2", "--workers", "0",
              "--augment-on", "cpu", "--evaluation-interval", "0", "--checkpoint-interval", "0"]
    for cache, most in (("none", 2), ("ram", 0)):
        before = decode.DECODES.copy()
        assert cli([*common, "--cache", cache, "--project", str(tmp_path / cache)]) == 0
        counts = decode.DECODES - before
        per_image = [counts[str(Path(p))] for p in train_images]
        assert max(per_image) == most, (cache, per_image)
        config = (next((tmp_path / cache).iterdir()) / "config.yaml").read_text()
        assert "mosaic: 1.0" in config  # the default run made mosaics


@pytest.mark.parametrize("workers", [0, 1])
def test_an_epochs_first_batch_does_not_wait_for_its_whole_pool(samples, workers):
    """With 0-1 workers an epoch's first batch is a request of its own (its pool's other batches the
    next): it arrives after its own decodes, not the whole pool's, and the epoch still decodes each
    original once, the same batches as two workers making whole pools."""
    kwargs = dict(img_size=64, batch_size=3, augment=MIXING, shuffle=True, seed=5, partner_pool=8)
    loader = build_loader(samples, workers=workers, **kwargs)
    loader.set_epoch(0)
    requests = [len(group) for group in loader._requests]
    assert requests == [1, len(loader) - 1]  # 8 batches, one pool: [1, 7]
    for epoch in (0, 1):
        loader.set_epoch(epoch)
        before = decode.DECODES.copy()
        batches = iter(loader)
        images, targets, metas = next(batches)
        if workers == 0:  # in this process: nothing decoded yet but what the first batch drew
            first = decode.DECODES - before
            assert sum(first.values()) == len(metas.decoded) < len(samples)
        rest = [(i.clone(), t.clone(), [str(m.path) for m in ms]) for i, t, ms in batches]
        assert max(loader.epoch_decoded.values()) == 1 and len(loader.epoch_decoded) == len(samples)
        whole = _epoch(build_loader(samples, workers=2, **kwargs), epoch)
        _same(whole, [(images, targets, [str(m.path) for m in metas]), *rest])

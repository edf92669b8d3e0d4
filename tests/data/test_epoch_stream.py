"""The training loader's stream across epochs: the workers make the next epoch's first batches while the
current epoch's last ones are consumed, and every batch is the one its epoch gives when iterated alone."""

import dataclasses
import gc
import weakref

import pytest
import torch

from synth import make_image_folder
from turboyolo.data.augment import AugmentParams
from turboyolo.data.cache import prepare_cache
from turboyolo.data.loader import move_to_device
from turboyolo.data.pipeline import build_loader
from turboyolo.data.scan import scan_dataset

EPOCHS = 4


@pytest.fixture
def samples(tmp_path, isolated_cache):
    make_image_folder(tmp_path, count=19, seed=5)
    return scan_dataset(tmp_path / "images", "train").samples


def _closing(epoch):
    """A 4-epoch run whose last epoch has mosaic off (--close-mosaic 1); None past the end."""
    return None if epoch >= EPOCHS else epoch < EPOCHS - 1


def _run(loader, streamed: bool, epochs=range(EPOCHS)):
    """Each epoch's batches taken as the trainer takes them (exactly ``len(loader)``, no extra ask), and
    its decodes; a streamed run must go on in one stream after its first epoch."""
    out, first_stream = [], None
    for epoch in epochs:
        loader.set_epoch(epoch, mix=_closing(epoch), upcoming=_closing if streamed else None)
        batches = []
        iterator = iter(loader)
        for _ in range(len(loader)):
            images, targets, metas = next(iterator)
            # what training sees (a device batch's canvases hold only what the warp reads)
            images = move_to_device(images, "cpu") if hasattr(images, "to_device") else images.clone()
            batches.append((images, targets.clone(), [str(m.path) for m in metas]))
        out.append((batches, dict(loader.epoch_decoded)))
        if streamed and loader.workers:
            first_stream = first_stream or loader._stream
            assert loader._stream is first_stream, "the stream started anew"
    return out


def _same(a, b, decodes_equal=True, first_again=()):
    """``first_again``: samples ``b`` may decode once more in its first epoch (the run's first batch's
    images, when another worker makes the rest of its pool)."""
    assert len(a) == len(b)
    for epoch, ((batches_a, decoded_a), (batches_b, decoded_b)) in enumerate(zip(a, b, strict=True)):
        assert len(batches_a) == len(batches_b)
        for (ia, ta, pa), (ib, tb, pb) in zip(batches_a, batches_b, strict=True):
            assert pa == pb
            assert torch.equal(ia, ib)
            assert torch.equal(ta, tb)
        if decodes_equal and epoch == 0 and first_again:
            again = {i: n - decoded_a.get(i, 0) for i, n in decoded_b.items() if n != decoded_a.get(i, 0)}
            assert set(decoded_a) == set(decoded_b) and set(again) <= set(first_again)
            assert all(n == 1 for n in again.values())
        elif decodes_equal:
            assert decoded_a == decoded_b
        else:  # the same images decoded, some more than once
            assert set(decoded_a) == set(decoded_b) and all(decoded_b[i] >= n for i, n in decoded_a.items())


def _loader(samples, workers, augment_on="cpu", cache=None):
    augment = dataclasses.replace(AugmentParams.from_net(angle=5, mosaic=1.0), mixup=0.3)
    return build_loader(samples, img_size=64, batch_size=3, augment=augment, workers=workers, shuffle=True,
                        seed=7, cache=cache, augment_on=augment_on, drop_last=True, partner_pool=2)


@pytest.mark.parametrize("augment_on", ["cpu", "device"])
def test_streamed_epochs_are_the_epochs_alone(samples, augment_on):
    reference = _run(_loader(samples, 0, augment_on), streamed=False)
    assert any(reference[0][1].values()) and all(n == 1 for n in reference[0][1].values())  # once each
    paths = [str(s.image) for s in samples]
    first_batch = {paths.index(path) for path in reference[0][0][0][2]}
    for workers in (1, 2):
        # the device path's pools may spread over two workers, each decoding what its batches draw; with
        # two, the run's first batch is a request of its own and the rest of its pool another worker's
        _same(reference, _run(_loader(samples, workers, augment_on), streamed=True),
              decodes_equal=augment_on == "cpu" or workers == 1,
              first_again=first_batch if workers > 1 else ())
    # the closed last epoch has no mosaic: its batches differ from what a mixing epoch would give
    mixing = _loader(samples, 0, augment_on)
    mixing.set_epoch(EPOCHS - 1, mix=True)
    first = next(iter(mixing))[0]
    first = move_to_device(first, "cpu") if hasattr(first, "to_device") else first
    assert not torch.equal(first, reference[-1][0][0][0])


def test_with_a_cache_too(samples, tmp_path):
    cache = prepare_cache(samples, 64, None, memory="ram", workers=1, log=lambda *_: None)
    _same(_run(_loader(samples, 0, cache=cache), streamed=False),
          _run(_loader(samples, 2, cache=cache), streamed=True))


def _as_the_trainer_takes(loader):
    """Exactly the epoch's batches, as engine.train_one_epoch takes them: it never asks for one more."""
    iterator = iter(loader)
    return [next(iterator) for _ in range(len(loader))]


@pytest.mark.parametrize("take", [list, _as_the_trainer_takes])
def test_the_next_epoch_is_requested_before_it_starts(samples, take):
    loader = _loader(samples, 1)
    loader.set_epoch(0, mix=True, upcoming=_closing)
    assert len(take(loader)) == len(loader)
    stream = loader._stream
    assert stream is not None and stream.next_epoch == 1
    assert stream.chain.made.get(1) is True  # epoch 1's first requests went to the worker already
    loader.set_epoch(1, mix=True, upcoming=_closing)
    assert len(take(loader)) == len(loader)
    assert loader._stream is stream  # the same stream went on: no new start
    # the last planned epoch: nothing is made past it
    for epoch in (2, 3):
        loader.set_epoch(epoch, mix=_closing(epoch), upcoming=_closing)
        assert len(take(loader)) == len(loader)
    assert loader._stream is stream and stream.chain.ended and max(stream.chain.made) == EPOCHS - 1


def test_a_stream_that_does_not_fit_starts_anew(samples):
    """A stop in the middle of an epoch, or another mix than planned: the batches are still the epoch's."""
    reference = _run(_loader(samples, 0), streamed=False)
    loader = _loader(samples, 1)
    loader.set_epoch(0, mix=True, upcoming=_closing)
    iterator = iter(loader)
    next(iterator)  # an epoch left after one batch
    del iterator
    _same(reference[1:2], _run(loader, streamed=True, epochs=[1]))
    # epoch 2 was made ahead with mosaic on; the run closes mosaic there after all
    loader.set_epoch(1, mix=True, upcoming=_closing)
    list(loader)
    loader.set_epoch(2, mix=False, upcoming=lambda e: None)
    alone = _loader(samples, 0)
    alone.set_epoch(2, mix=False)
    _same([(list(_plain(alone)), {})], [(list(_plain(loader)), {})])


def _plain(loader):
    for images, targets, metas in loader:
        yield images.clone(), targets.clone(), [str(m.path) for m in metas]


@pytest.mark.parametrize("augment_on", ["cpu", "device"])
def test_a_streaming_loader_is_freed_with_its_last_reference(samples, augment_on):
    """No reference cycle through the stream: a dropped loader's workers end now, not at some later
    garbage collection (which may run in a forked child, where it cannot stop them)."""
    gc.disable()
    try:
        loader = _loader(samples, 1, augment_on)
        loader.set_epoch(0, mix=True, upcoming=_closing)
        next(iter(loader))
        workers = loader._loader._iterator._workers
        alive = weakref.ref(loader)
        del loader
        assert alive() is None
    finally:
        gc.enable()
    for worker in workers:
        worker.join(timeout=30)
        assert not worker.is_alive()


def test_turboyolo_train_keeps_one_stream_across_its_epochs(tmp_path, isolated_cache, monkeypatch):
    """Through the command: 3 epochs with a loader worker build one chain of epochs, not one per epoch
    (the training loop takes exactly an epoch's batches; the stream must carry on all the same), and the
    chain ends at the run's planned end."""
    from synth import make_dataset as make_train_set
    from synth import micro_cfg
    from turboyolo.cli import main as cli
    from turboyolo.data import sampler

    chains = []
    real = sampler.EpochChain.__init__

    def counted(self, *args, **kwargs):
        real(self, *args, **kwargs)
        chains.append(self)

    monkeypatch.setattr(sampler.EpochChain, "__init__", counted)
    data = make_train_set(tmp_path / "data", 8, 2)
    cfg = micro_cfg(tmp_path / "micro.cfg", batch=4)
    assert cli(["train", "--cfg", str(cfg), "--data", str(data), "--epochs", "3", "--workers", "1",
                "--cache", "none", "--augment-on", "cpu", "--evaluation-interval", "1",
                "--project", str(tmp_path / "runs")]) == 0
    assert len(chains) == 1, f"{len(chains)} streams for 3 epochs"
    assert sorted(chains[0].made) == [0, 1, 2] and chains[0].ended


def test_a_started_epoch_gives_the_epochs_batches(samples):
    """``start()`` (the run's first epoch, before labels.jpg is drawn) sends the first requests at once;
    the iteration that follows takes them from that stream: the same batches and decodes as without."""
    reference = _run(_loader(samples, 0), streamed=False)
    loader = _loader(samples, 1)
    loader.set_epoch(0, mix=True, upcoming=_closing)
    loader.start()
    stream = loader._stream
    assert stream is not None and stream.next_epoch == 0 and stream.chain.made.get(0) is True
    loader.start()  # again: the stream stands at the epoch already
    assert loader._stream is stream
    _same(reference, _run(loader, streamed=True))
    assert loader._stream is stream  # the started stream went on through every epoch
    unstarted = _loader(samples, 0)  # no workers: nothing to start
    unstarted.set_epoch(0, mix=True, upcoming=_closing)
    unstarted.start()
    assert unstarted._stream is None

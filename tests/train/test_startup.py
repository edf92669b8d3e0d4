"""What a run's start costs at any data-set size: each split scanned once, the pipeline measurement's
inputs computed without a per-image loop, its prediction printed readably at CPU speeds."""

from __future__ import annotations

import os

import numpy as np

from synth import make_dataset, micro_cfg
from turboyolo.cli import main as cli
from turboyolo.data import scan as scan_module
from turboyolo.data.cache import _planned_hw, estimate_bytes
from turboyolo.data.scan import Sample
from turboyolo.train.auto import ImageCosts, Machine, PipelineChoice, choose_pipeline, rate_text


def test_a_start_scans_each_split_once(tmp_path, monkeypatch, isolated_cache):
    data = make_dataset(tmp_path / "data", 8, 3)
    cfg = micro_cfg(tmp_path / "m.cfg", batch=4)
    scanned = []
    scan_images = scan_module.scan_images
    monkeypatch.setattr(scan_module, "scan_images",
                        lambda images, *a, split="", **k: scanned.append(split) or
                        scan_images(images, *a, split=split, **k))
    code = cli(["train", "--cfg", str(cfg), "--data", str(data), "--project", str(tmp_path / "runs"),
                "--epochs", "1", "--evaluation-interval", "0", "--checkpoint-interval", "0",
                "--max-batches", "1"])  # --cache, --augment-on, --workers auto: the pipeline is measured
    assert code == 0
    assert sorted(scanned) == ["train", "val"]  # the measurement and the loaders share one scan each


def test_the_cache_estimate_is_target_sizes_arithmetic_for_every_sample():
    rng = np.random.default_rng(0)
    samples = [Sample(None, np.zeros((0, 5), np.float32), (int(h), int(w)))
               for h, w in rng.integers(1, 5000, (500, 2))]
    samples += [Sample(None, np.zeros((0, 5), np.float32), hw) for hw in ((1, 1), (3, 7000), (416, 416))]
    for size in (32, 320, 416, 1280):
        assert estimate_bytes(samples, size) == sum(3 * np.prod(_planned_hw(s, size)) for s in samples)
    assert estimate_bytes([], 416) == 0


def test_a_slow_cpu_step_prints_its_rate_not_zero():
    assert [rate_text(r) for r in (0, 0.0004, 0.4, 3.14, 9.96, 10, 1234.5)] == [
        "0", "0.0004", "0.4", "3.1", "10", "10", "1,234"]
    machine = Machine(cores=2, free_ram=2**36, free_disk=2**40, device="cpu")
    from turboyolo.train.auto import ImageCosts

    choice = choose_pipeline({"cache": ("auto", "default"), "augment_on": ("auto", "default"),
                              "workers": (None, "default")}, ImageCosts(cold_s=0.002, warm_s=0.001),
                             machine, 2.5, 2**30, None)  # 2.5 s of CPU step per image
    assert isinstance(choice, PipelineChoice)
    assert choice.lines()[-1].endswith("0.4 images/s")


def test_the_first_step_does_not_wait_for_the_first_batch_picture(tmp_path, isolated_cache):
    """train_batch0.jpg is drawn after the first optimizer step, and still written by a run that stops
    after that step."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    data = make_dataset(tmp_path / "data", 6, 3)
    cfg = micro_cfg(tmp_path / "m.cfg", batch=4)
    run = tmp_path / "runs" / "first"
    at_first_step = []
    handle = register_optimizer_step_post_hook(
        lambda *_: at_first_step.append((run / "train_batch0.jpg").exists()))
    try:
        code = cli(["train", "--cfg", str(cfg), "--data", str(data), "--project", str(tmp_path / "runs"),
                    "--name", "first", "--epochs", "1", "--evaluation-interval", "0", "--max-batches", "1",
                    "--workers", "0", "--cache", "none", "--augment-on", "cpu"])
    finally:
        handle.remove()
    assert code == 0
    assert at_first_step == [False]
    assert (run / "train_batch0.jpg").exists() and not (run / "train_batch1.jpg").exists()


def _measured_with_a_cache(tmp_path, monkeypatch, name, step_s, *flags):
    """Train ``name`` (one batch) with the start's real measurement; whether it measured a cache."""
    from turboyolo.train import facts

    built = []
    prepare = facts.prepare_cache
    monkeypatch.setattr(facts, "prepare_cache", lambda *a, **k: built.append(1) or prepare(*a, **k))
    monkeypatch.setattr(facts, "estimate_step_s", lambda spec, size, device: (step_s, "injected"))
    monkeypatch.setattr(facts, "machine_facts",
                        lambda device, folder: Machine(2, 2**36, 2**40, "cpu"))
    data = make_dataset(tmp_path / name, 8, 3)
    cfg = micro_cfg(tmp_path / f"{name}.cfg", batch=4)
    code = cli(["train", "--cfg", str(cfg), "--data", str(data), "--project", str(tmp_path / "runs"),
                "--name", name, "--epochs", "1", "--evaluation-interval", "0", "--max-batches", "1", *flags])
    assert code == 0
    return bool(built)


def test_the_start_measures_a_cache_only_where_the_choice_can_use_it(tmp_path, monkeypatch, capsys,
                                                                     isolated_cache):
    """A step that the files keep fed: no cache is measured (nor chosen); a step the files cannot keep
    fed, or a cache given by flag: it is."""
    assert not _measured_with_a_cache(tmp_path, monkeypatch, "slow", 10.0)
    out = capsys.readouterr().out
    assert "a cache not measured (this run reads the files)" in out and "--cache none (auto)" in out
    assert _measured_with_a_cache(tmp_path, monkeypatch, "fast", 1e-7)
    out = capsys.readouterr().out
    assert "ms from a cache" in out and "--cache ram (auto)" in out
    assert _measured_with_a_cache(tmp_path, monkeypatch, "given", 10.0, "--cache", "ram")


def test_a_choice_that_reads_the_files_is_the_same_whatever_a_cache_would_cost():
    machine = Machine(cores=8, free_ram=2**36, free_disk=2**40, device="cuda")
    requested = {"cache": ("auto", "default"), "augment_on": ("auto", "default"),
                 "workers": (None, "default")}
    for cold, step in ((0.002, 0.5), (0.02, 0.01), (0.05, 0.1)):
        unmeasured = choose_pipeline(requested, ImageCosts(cold, None), machine, step, 2**30, None)
        assert unmeasured.cache == "none" and unmeasured.augment_on == "cpu"
        for warm, device in ((cold / 10, cold / 100), (cold, None), (cold / 2, cold / 3)):
            assert choose_pipeline(requested, ImageCosts(cold, warm, device), machine, step, 2**30,
                                   None) == unmeasured


def test_the_first_step_waits_for_its_own_batch_only(tmp_path, isolated_cache):
    """Through `turboyolo train`: the first optimizer step comes after the decodes of its own batch's
    images (epoch 1's first partner pool fills as it goes), not of a whole pool's; labels.jpg and
    train_batch0.jpg are drawn after that step, and both are there at the end."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    from turboyolo.data import decode

    data = make_dataset(tmp_path / "data", 40, 3)  # one pool of 10 batches of 4: 40 images
    cfg = micro_cfg(tmp_path / "m.cfg", batch=4)
    run = tmp_path / "runs" / "first"
    before = decode.DECODES.copy()
    at_first_step = []
    handle = register_optimizer_step_post_hook(lambda *_: at_first_step.append(
        (sum((decode.DECODES - before).values()), (run / "labels.jpg").exists(),
         (run / "train_batch0.jpg").exists())))
    try:  # the pipeline given (no start-of-run measurement) and in this process (its decodes counted)
        code = cli(["train", "--cfg", str(cfg), "--data", str(data), "--project", str(tmp_path / "runs"),
                    "--name", "first", "--epochs", "1", "--evaluation-interval", "0", "--max-batches", "3",
                    "--workers", "0", "--cache", "none", "--augment-on", "cpu", "--mosaic", "1"])
    finally:
        handle.remove()
    assert code == 0
    assert at_first_step[0] == (4, False, False)
    assert (run / "labels.jpg").exists() and (run / "train_batch0.jpg").exists()


def test_a_second_start_takes_the_first_starts_pipeline_measurement(tmp_path, monkeypatch, capsys,
                                                                      isolated_cache):
    """The start-of-run measurement is kept for the next start on the same images with the same flags on
    this machine; a changed image, another size, a damaged cache file or another OpenCV measures again."""
    from turboyolo.train import facts

    measured = []
    measure = facts.measure_costs
    monkeypatch.setattr(facts, "measure_costs", lambda *a, **k: measured.append(1) or measure(*a, **k))
    data = make_dataset(tmp_path / "data", 8, 3)
    cfg = micro_cfg(tmp_path / "m.cfg", batch=4)

    def start(*flags) -> str:
        code = cli(["train", "--cfg", str(cfg), "--data", str(data), "--project", str(tmp_path / "runs"),
                    "--epochs", "1", "--evaluation-interval", "0", "--max-batches", "1", *flags])
        assert code == 0
        return next(line for line in capsys.readouterr().out.splitlines()
                    if line.startswith("input pipeline: measured"))

    first = start()
    assert len(measured) == 1 and "earlier start" not in first
    second = start()
    assert len(measured) == 1
    assert "(an earlier start's measurement of the same images, from the cache)" in second
    def costs(line: str) -> str:  # the loader's figures (the step's rate is measured at every start)
        return line.rsplit("images", 1)[1].split(": ", 1)[1].split("; step", 1)[0]

    assert costs(second) == costs(first)
    start("--img-size", "96")
    assert len(measured) == 2
    kept = sorted((isolated_cache / "pipeline").glob("*.json"))
    assert len(kept) == 2
    for path in kept:
        path.write_text('{"cold_s": "fast"}')
    start()
    assert len(measured) == 3
    images = sorted((tmp_path / "data" / "images" / "train").glob("*"))  # any may be in the sample
    for image in images:
        os.utime(image, ns=(image.stat().st_atime_ns, image.stat().st_mtime_ns + 10**9))
    start()
    assert len(measured) == 4
    monkeypatch.setattr(facts.cv2, "__version__", "0.0.1")  # another OpenCV decodes and warps
    start()
    assert len(measured) == 5


def test_a_start_that_fails_after_the_loader_started_ends_its_workers(tmp_path, isolated_cache, monkeypatch):
    """The training loader's workers start before the model is built; a start that then fails (here:
    weights of another model) ends them at once, even while the caller keeps the error and its
    traceback (a notebook does), and leaves no run directory."""
    import multiprocessing

    import pytest

    import turboyolo
    from turboyolo.train import fit as fit_module

    data = make_dataset(tmp_path / "data", 8, 3)
    cfg = micro_cfg(tmp_path / "m.cfg", batch=4)
    wrong = tmp_path / "other.weights"
    wrong.write_bytes(np.arange(64, dtype=np.int32).tobytes())
    before = set(multiprocessing.active_children())
    started = []
    start_first = fit_module.start_first_batches

    def starting(run, data, close_mosaic):  # the workers are alive at the start's end, before the model
        start_first(run, data, close_mosaic)
        started.append(set(multiprocessing.active_children()) - before)

    monkeypatch.setattr(fit_module, "start_first_batches", starting)
    with pytest.raises(Exception) as held:
        turboyolo.train(cfg=cfg, data=data, weights=wrong, project=str(tmp_path / "runs"), epochs=1,
                        workers=1, cache="none", augment_on="cpu", evaluation_interval=0, quiet=True)
    assert started and started[0], "the loader's workers should have started before the weights were read"
    assert str(wrong) in str(held.value)
    for worker in started[0]:
        worker.join(timeout=30)
    assert not any(worker.is_alive() for worker in started[0])
    assert held.value.__traceback__ is not None  # still held: the workers ended anyway
    assert not list((tmp_path / "runs").glob("*/*"))

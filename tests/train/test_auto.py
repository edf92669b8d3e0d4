"""``auto``: the input pipeline a run chooses (``--cache``, ``--augment-on``, ``--workers``), decided from
injected measurements (the rules) and through ``turboyolo train`` (the start lines, config.yaml, a rerun
of config.yaml and ``--resume`` keep the choice; every value in config.yaml is what the run used)."""

from __future__ import annotations

import pytest
import torch
import yaml

from synth import make_dataset, micro_cfg
from turboyolo.cli import main as cli
from turboyolo.data.augment import AugmentParams
from turboyolo.data.device_loader import device_augment_unsupported
from turboyolo.train import facts
from turboyolo.train.auto import (
    DATA_WAIT_TARGET,
    ImageCosts,
    Machine,
    choose_pipeline,
    choose_subdivisions,
    predict,
)

GIB = 2**30
AUTO = {"cache": ("auto", "default"), "augment_on": ("auto", "default"), "workers": (None, "default")}
# 16 camera photos of 2.5-20 MP at 416: decode 35 ms per image and core, a cached copy 0.2 ms + 4 ms of
# CPU augmentation, the CPU side of device augmentation 0.4 ms; an H100 consumes ~1,400 images/s
PHOTOS = ImageCosts(cold_s=0.040, warm_s=0.0045, device_s=0.0007, handoff_s=0.0001)
H100_STEP = 1 / 1400
GPU_MACHINE = Machine(cores=2, free_ram=64 * GIB, free_disk=500 * GIB, device="cuda", cache_folder="/c")


def choose(requested=None, costs=PHOTOS, machine=GPU_MACHINE, step_s=H100_STEP, cache_bytes=GIB,
           unsupported=None):
    return choose_pipeline({**AUTO, **(requested or {})}, costs, machine, step_s, cache_bytes, unsupported)


def test_large_photos_on_a_gpu_choose_the_ram_cache_and_device_augmentation():
    choice = choose()
    assert (choice.cache, choice.augment_on) == ("ram", "device")
    assert choice.data_wait <= DATA_WAIT_TARGET
    old, _ = predict(PHOTOS, "none", "cpu", GPU_MACHINE.max_workers, 2, H100_STEP)
    assert old > 0.9  # the old defaults (--cache none --augment-on cpu): the GPU mostly waits
    lines = choice.lines()
    assert lines[0].startswith("--cache ram (auto): decoding makes the step wait")
    assert lines[1].startswith("--augment-on device (auto)") and "the same augmentation draws" in lines[1]
    assert "pixels differ" in lines[1]  # what the device path does not keep, said where it is chosen
    assert lines[-1].startswith("input pipeline: predicted data-wait")
    # on 16 cores, 13 workers (twice the need) augment 2,900 cached images/s: no device path needed
    many = choose(machine=Machine(16, 64 * GIB, 500 * GIB, "cuda"))
    assert (many.cache, many.augment_on, many.workers) == ("ram", "cpu", 13) and many.data_wait == 0


def test_device_augmentation_only_where_the_device_path_does_the_same_augmentation():
    # the device path builds the CPU path's mosaics and mixups: train's default augmentation may go there
    assert device_augment_unsupported(AugmentParams(mosaic=1.0, mixup=0.5)) is None
    assert device_augment_unsupported(AugmentParams(mosaic=0.0)) is None
    why = "the device path does not do mosaic=1.0"  # what the predicate said before the device built mosaics
    choice = choose(unsupported=why)
    assert (choice.cache, choice.augment_on) == ("ram", "cpu")
    assert "keeps the augmentation the run asks for" in choice.lines()[1] and "mosaic" in choice.lines()[1]
    assert choose(costs=ImageCosts(0.040, 0.0045, None)).augment_on == "cpu"  # device side not measured
    cpu_device = Machine(16, 64 * GIB, 500 * GIB, device="cpu")
    assert choose(machine=cpu_device, step_s=1e-4).augment_on == "cpu"  # the step's own cores


def test_a_cpu_path_that_only_just_keeps_up_goes_to_the_device():
    """The CPU augmentation supplies 1.5x the step's demand: predicted 0% wait, but without the workers'
    margin (2x) it waits in practice (the simulated device measured 10% where 0% was predicted): on a GPU
    the device path is chosen; with the step on the CPU nothing changes."""
    step = PHOTOS.warm_s * 1.5  # seconds per image: one worker (2 cores) supplies 1.5x what the step takes
    assert predict(PHOTOS, "ram", "cpu", 1, 2, step)[0] == 0
    assert choose(step_s=step).augment_on == "device"
    assert choose(step_s=PHOTOS.warm_s * 2.01).augment_on == "cpu"  # fed with the margin
    cpu_machine = Machine(2, 64 * GIB, 500 * GIB, device="cpu")
    assert choose(machine=cpu_machine, step_s=step).augment_on == "cpu"


def test_data_only_on_disk_chooses_the_disk_cache():
    machine = Machine(16, free_ram=8 * GIB, free_disk=500 * GIB, device="cuda", cache_folder="/c")
    choice = choose(machine=machine, cache_bytes=20 * GIB)
    assert choice.cache == "disk" and "on disk" in choice.lines()[0]


def test_neither_ram_nor_disk_warns_and_takes_the_cold_path():
    machine = Machine(16, free_ram=8 * GIB, free_disk=10 * GIB, device="cuda", cache_folder="/c")
    choice = choose(machine=machine, cache_bytes=20 * GIB)
    assert (choice.cache, choice.augment_on) == ("none", "cpu")
    [warning] = choice.warnings
    assert warning.startswith("warning: --cache auto:") and "fits neither" in warning
    assert "original files" in warning and "--img-size" in warning
    assert choice.data_wait > 0.5 and warning in choice.lines()


def test_a_cpu_step_that_dominates_spends_no_ram_or_disk():
    machine = Machine(cores=2, free_ram=64 * GIB, free_disk=500 * GIB, device="cpu")
    choice = choose(machine=machine, step_s=0.5)  # a YOLOv3 step on a CPU: 0.5 s per image
    assert (choice.cache, choice.augment_on, choice.workers) == ("none", "cpu", 1)
    assert "no RAM or disk" in choice.lines()[0] and choice.data_wait == 0
    many = choose(machine=Machine(16, 64 * GIB, 500 * GIB, "cpu"), step_s=0.5)
    assert many.workers == 1 and "the other cores stay free" in many.lines()[2]


def test_explicit_flags_win():
    choice = choose({"cache": ("none", "flag"), "augment_on": ("cpu", "flag"), "workers": (3, "flag")})
    assert (choice.cache, choice.augment_on, choice.workers) == ("none", "cpu", 3)
    assert all(d.source == "flag" for d in choice.decisions) and choice.data_wait > 0.9
    assert "--cache ram" in choice.advice
    partly = choose({"cache": ("disk", "recipe")})
    assert partly.cache == "disk" and partly.augment_on == "device"


def test_device_path_without_a_cache_decodes_once_per_pool_with_one_worker_at_most():
    """A pool's batches made by one process decode each original once; spread over several workers, each
    decodes what its batches draw (up to a mosaic's 4 parts per sample): the model says which."""
    costs = ImageCosts(cold_s=0.010, warm_s=0.001, device_s=0.0005, device_spread_decodes=4.0)
    assert costs.cost("none", "device") == costs.cost("none", "device", 1) == pytest.approx(0.0095)
    assert costs.cost("none", "device", 4) == pytest.approx(4 * 0.009 + 0.0005)
    assert costs.cost("ram", "device", 4) == costs.cost("ram", "device") == 0.0005
    assert costs.cost("none", "cpu", 4) == 0.010  # the CPU path: a whole pool per worker request
    one, four = (predict(costs, "none", "device", w, 8, 1e-4)[1] for w in (1, 4))
    assert four < 4 * one  # four workers deliver less than four times one


def test_workers_zero_adds_load_and_step():
    wait, rate = predict(ImageCosts(0.01, 0.001), "none", "cpu", 0, 8, 0.01)
    assert wait == pytest.approx(0.5) and rate == pytest.approx(50.0)
    wait, rate = predict(ImageCosts(0.01, 0.001, handoff_s=0.004), "ram", "cpu", 4, 8, 0.001)
    assert rate == pytest.approx(250.0) and wait == pytest.approx(0.75)  # the main process limits


# ------------------------------------------------------------------------------------- through train
def _inject(monkeypatch, costs: ImageCosts, machine: Machine, step_s: float):
    calls = []

    def measured(*args, **kwargs):
        calls.append(args)
        return costs

    monkeypatch.setattr(facts, "measure_costs", measured)
    monkeypatch.setattr(facts, "machine_facts", lambda device, folder: machine)
    monkeypatch.setattr(facts, "estimate_step_s", lambda spec, size, device: (step_s, "injected"))
    return calls


def _train(tmp_path, data, cfg, name, *flags):
    return cli(["train", "--cfg", str(cfg), "--data", str(data), "--project", str(tmp_path / "runs"),
                "--name", name, "--epochs", "1", "--evaluation-interval", "0", "--checkpoint-interval", "0",
                *flags])


def test_train_chooses_the_disk_cache_and_config_yaml_reruns_and_resumes_with_it(
        tmp_path, monkeypatch, capsys, isolated_cache):
    data = make_dataset(tmp_path / "data", 8, 2)
    cfg = micro_cfg(tmp_path / "m.cfg", batch=4)
    machine = Machine(cores=2, free_ram=1 * GIB, free_disk=100 * GIB, device="cpu", cache_folder="/c")
    calls = _inject(monkeypatch, ImageCosts(cold_s=0.05, warm_s=0.001), machine, step_s=0.001)
    assert _train(tmp_path, data, cfg, "a") == 0
    out = capsys.readouterr().out
    assert "--cache disk (auto): decoding makes the step wait" in out and "on disk" in out
    assert "--augment-on cpu (auto):" in out and "--workers 1 (auto):" in out
    assert "input pipeline: predicted data-wait" in out and len(calls) == 1
    saved = yaml.safe_load((tmp_path / "runs" / "a" / "config.yaml").read_text())
    assert (saved["data_args"]["cache"], saved["data_args"]["augment_on"], saved["data_args"]["workers"]) \
        == ("disk", "cpu", 1)
    assert saved["sources"]["cache"].startswith("auto: decoding makes the step wait")
    assert saved["pipeline"]["cache"] == "disk" and saved["pipeline"]["predicted_data_wait"] >= 0
    assert any((isolated_cache / "prepared").iterdir())  # the loader read the disk cache auto chose
    # a rerun of config.yaml: the frozen choice, nothing measured again
    assert cli(["train", "--config", str(tmp_path / "runs" / "a" / "config.yaml"), "--name", "b"]) == 0
    rerun = yaml.safe_load((tmp_path / "runs" / "b" / "config.yaml").read_text())
    assert rerun["data_args"] == saved["data_args"] and rerun["sources"]["cache"] == "recipe"
    assert len(calls) == 1
    # --resume keeps the choice too (a run stopped after its first iteration)
    from turboyolo.train.config import TrainConfig
    from turboyolo.train.fit import fit

    config = TrainConfig.build(str(cfg), str(data), epochs=2, evaluation_interval=0, project=str(
        tmp_path / "runs"), name="c", checkpoint_interval=0)
    fit(config, stop_at_iteration=1, quiet=True)  # the same images and flags: run a's measurement, kept
    assert len(calls) == 1
    last = tmp_path / "runs" / "c" / "weights" / "last.pt"
    assert cli(["train", "--resume", str(last)]) == 0
    assert len(calls) == 1
    resumed = yaml.safe_load((tmp_path / "runs" / "c" / "config.yaml").read_text())
    assert resumed["data_args"]["cache"] == "disk" and resumed["sources"]["cache"].startswith("auto:")


def test_train_with_a_dominating_cpu_step_spends_no_cache(tmp_path, monkeypatch, capsys, isolated_cache):
    data = make_dataset(tmp_path / "data", 4, 2)
    cfg = micro_cfg(tmp_path / "m.cfg", batch=2)
    machine = Machine(cores=2, free_ram=64 * GIB, free_disk=100 * GIB, device="cpu")
    _inject(monkeypatch, ImageCosts(cold_s=0.002, warm_s=0.001), machine, step_s=0.5)
    assert _train(tmp_path, data, cfg, "a", "--workers", "0") == 0
    out = capsys.readouterr().out
    assert "--cache none (auto): the step dominates" in out and "--workers 0 (flag): given" in out
    assert not (isolated_cache / "prepared").exists()


def test_every_value_in_config_yaml_is_what_the_run_used(tmp_path, monkeypatch):
    """The loaders, the optimizer, the loss and the evaluation are spied on; config.yaml must name what
    each of them was given."""
    from turboyolo.train import fit as fit_module
    from turboyolo.train import loaders as loaders_module
    from turboyolo.train import setup as setup_module

    seen = {"loaders": [], "loss": [], "optimizer": [], "evaluate": []}

    def spy(kind, real):
        def call(*args, **kwargs):
            seen[kind].append((args, kwargs))
            return real(*args, **kwargs)
        return call

    monkeypatch.setattr(loaders_module, "build_loader", spy("loaders", loaders_module.build_loader))
    monkeypatch.setattr(setup_module, "YoloLoss", spy("loss", setup_module.YoloLoss))
    monkeypatch.setattr(setup_module, "build_optimizer", spy("optimizer", setup_module.build_optimizer))
    monkeypatch.setattr(fit_module, "evaluate", spy("evaluate", fit_module.evaluate))
    data = make_dataset(tmp_path / "data", 6, 3, num_classes=2)
    cfg = micro_cfg(tmp_path / "m.cfg", batch=4, num_classes=2)
    assert cli(["train", "--cfg", str(cfg), "--data", str(data), "--project", str(tmp_path / "runs"),
                "--name", "spy", "--epochs", "1", "--checkpoint-interval", "0", "--val-img-size", "96",
                "--mosaic", "0.5", "--box-loss", "ciou", "--lr", "0.004", "--conf-thres", "0.2"]) == 0
    saved = yaml.safe_load((tmp_path / "runs" / "spy" / "config.yaml").read_text())
    data_args, schedule, aug = saved["data_args"], saved["schedule"], saved["augment"]
    (_, train), (_, val) = seen["loaders"]
    mini = schedule["batch"] // schedule["subdivisions"]
    assert (train["img_size"], train["batch_size"], train["workers"], train["augment_on"]) == (
        data_args["img_size"], mini, data_args["workers"], data_args["augment_on"])
    assert (train["cache"] is None) == (data_args["cache"] == "none")
    params = train["augment"]
    assert (params.mosaic, params.mixup, params.flip, params.degrees, params.hue, params.jitter) == (
        aug["mosaic"], aug["mixup"], aug["fliplr"], aug["degrees"], aug["hue"], aug["jitter"])
    assert (val["img_size"], val["batch_size"], val["rect"]) == (
        saved["eval"]["val_img_size"], saved["eval"]["eval_batch"], saved["eval"]["rect"])
    [(_, loss)] = seen["loss"]
    assert (loss["box_loss"], loss["iou_thresh"], loss["obj_iou"], loss["label_smoothing"]) == (
        saved["loss"]["box_loss"], saved["loss"]["assign_iou_thres"], saved["loss"]["obj_iou"],
        saved["loss"]["label_smoothing"])
    [((_, settings), _)] = seen["optimizer"]
    optim = saved["optim"]
    assert (settings.name, settings.lr, settings.momentum, settings.weight_decay) == (
        optim["optimizer"], optim["lr"], optim["momentum"], optim["weight_decay"]) == (
        saved["plan"]["optimizer"]["name"], 0.004, 0.9, 0.0005)
    [(_, evaluated)] = seen["evaluate"]
    assert (evaluated["conf_thres"], evaluated["iou_thres"], evaluated["nms_thres"]) == (
        saved["eval"]["conf_thres"], saved["eval"]["iou_thres"], saved["eval"]["nms_thres"]) == (
        0.2, 0.5, 0.5)
    optional = {"drop_suspect"}  # an input the run was not given (no audit): null says so
    assert None not in [value for group in ("data_args", "schedule", "optim", "eval")
                        for key, value in saved[group].items() if key not in optional]
    assert data_args["drop_suspect"] is None
    assert "auto" not in (data_args["cache"], data_args["augment_on"])
    ckpt = torch.load(tmp_path / "runs" / "spy" / "weights" / "last.pt", weights_only=False)
    assert ckpt["config"]["data_args"] == data_args  # the checkpoint holds the same resolved values


def test_test_reads_the_evaluation_settings_a_checkpoint_was_trained_with():
    from turboyolo.train.metrics import EVAL_CONF_THRES, EVAL_NMS_THRES
    from turboyolo.train.testing import TestArgs, eval_settings

    saved = {"conf_thres": 0.2, "nms_thres": 0.45, "val_img_size": 96, "iou_thres": None}
    state = {"config": {"eval": saved}}
    assert eval_settings(state) == {"conf_thres": 0.2, "nms_thres": 0.45, "val_img_size": 96}
    assert eval_settings(None) == {} and eval_settings({"config": {"val_img_size": 320}}) == {
        "val_img_size": 320}
    assert (TestArgs().conf_thres, TestArgs().nms_thres) == (None, None)  # a checkpoint's, else these:
    assert (EVAL_CONF_THRES, EVAL_NMS_THRES) == (0.1, 0.5)  # the same as train's evaluations


def test_cuda_subdivisions_keep_the_cfgs_mini_batch_unless_it_does_not_fit():
    """Darknet's meaning of subdivisions: the mini-batch is what batch norm normalises over, so auto keeps
    the cfg's (even where a larger one would fit) and changes it only when it does not fit, saying that
    this changes what is learned."""
    # yolov3.cfg: batch 64 in 16 subdivisions; ~300 MiB of activations per image at 416, 1 GiB of state
    per_image, fixed = 300 * 2**20, 1 * GIB
    subdivisions, why = choose_subdivisions(64, 16, 1, per_image, fixed, free_bytes=78 * GIB)
    assert subdivisions == 16 and why.startswith("the cfg's: its mini-batch of 4 fits")
    assert choose_subdivisions(64, 16, 4, per_image, fixed, free_bytes=78 * GIB)[0] == 16  # 4 processes
    # 64/2: a mini-batch of 32 needs ~9.4 GiB; with 10 GiB free (8 usable, less the state) 23 images fit
    subdivisions, why = choose_subdivisions(64, 2, 1, per_image, fixed, free_bytes=10 * GIB)
    assert subdivisions == 4 and "mini-batch of 32 does not fit" in why and "mini-batches of 16" in why
    assert "changes what is learned" in why and "--subdivisions 2 keeps the cfg's" in why
    assert choose_subdivisions(64, 2, 1, per_image, fixed, free_bytes=4 * GIB)[0] == 16  # 7 images fit
    assert choose_subdivisions(64, 2, 4, per_image, fixed, free_bytes=4 * GIB)[0] == 16  # a multiple of 4
    assert choose_subdivisions(64, 2, 3, per_image, fixed, free_bytes=10 * GIB)[0] == 2  # none shares 3 ways
    subdivisions, why = choose_subdivisions(64, 16, 1, per_image, fixed, free_bytes=1 * GIB)
    assert subdivisions == 16 and why.startswith("the cfg's (no smaller mini-batch fits")


def test_auto_changes_speed_not_what_is_learned(tmp_path, monkeypatch, isolated_cache):
    """A run whose settings auto chose trains the same weights as the same settings given as flags."""
    data = make_dataset(tmp_path / "data", 6, 2)
    cfg = micro_cfg(tmp_path / "m.cfg", batch=2)
    machine = Machine(cores=1, free_ram=64 * GIB, free_disk=100 * GIB, device="cpu")
    calls = _inject(monkeypatch, ImageCosts(cold_s=0.001, warm_s=0.001), machine, step_s=0.5)
    assert _train(tmp_path, data, cfg, "auto", "--max-batches", "4") == 0
    assert _train(tmp_path, data, cfg, "flags", "--max-batches", "4", "--cache", "none", "--augment-on",
                  "cpu", "--workers", "0") == 0
    assert len(calls) == 1  # only the first measured
    auto, flags = (torch.load(tmp_path / "runs" / name / "weights" / "last.pt", weights_only=False)
                   for name in ("auto", "flags"))
    assert auto["config"]["data_args"] == flags["config"]["data_args"]
    assert all(torch.equal(auto["model"][key], flags["model"][key]) for key in flags["model"])


@pytest.mark.slow
def test_the_loader_choices_auto_makes_leave_the_weights_as_they_are(tmp_path, isolated_cache):
    """What auto chooses for the loader (--workers, --cache; --augment-on stays cpu on the CPU) changes
    speed only: the same run from the originals in the main process and from a RAM cache with two
    workers trains the same weights, bit for bit."""
    data = make_dataset(tmp_path / "data", 6, 2)
    cfg = micro_cfg(tmp_path / "m.cfg", batch=2)
    for name, cache, workers in (("plain", "none", "0"), ("cached", "ram", "2")):
        assert _train(tmp_path, data, cfg, name, "--max-batches", "4", "--cache", cache, "--augment-on",
                      "cpu", "--workers", workers) == 0
    plain, cached = (torch.load(tmp_path / "runs" / name / "weights" / "last.pt", weights_only=False)["model"]
                     for name in ("plain", "cached"))
    assert plain.keys() == cached.keys() and all(torch.equal(plain[key], cached[key]) for key in plain)

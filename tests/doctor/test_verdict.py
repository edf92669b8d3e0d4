"""The doctor's verdict logic on synthetic stage timings (no measuring, no torch)."""

from __future__ import annotations

import math

import pytest

from turboyolo.doctor.verdict import StageTimings, assumed_step_s, diagnose, render_markdown


def timings(**changes) -> StageTimings:
    """A large-photo data set on 16 cores feeding a fast GPU: decode dominates."""
    values = dict(decode_s=0.080, cache_read_s=0.0002, augment_s=0.004, device_plan_s=0.0004,
                  loader_cpu_s=0.086, loader_images_per_s={15: 170.0}, copy_s=0.00002, step_s=0.012,
                  step_source="assumed 12 ms", checkpoint_s=0.05, checkpoint_write_s=1.0, batch=16,
                  subdivisions=1, img_size=416, cores=16, workers=15, dataset_images=100_000,
                  cache_bytes=50 * 2**30)
    values.update(changes)
    return StageTimings(**values)


def by_setting(verdict, prefix):
    return next(s for s in verdict.suggestions if s.setting.startswith(prefix))


def test_decode_bound_predicts_the_cache_factor():
    v = diagnose(timings())
    assert v.bottleneck == "decode"
    assert v.sentence.startswith("decode-bound:")
    # cost 86 ms/image on 15 workers: 174 images/s against 16 / 12.3 ms = 1,300 consumed
    assert v.supply_images_per_s == pytest.approx(15 / 0.086)
    assert v.data_wait == pytest.approx(1 - (15 / 0.086) / (16 / (0.012 + 16 * 0.00002)))
    # overhead 2 ms: (80 + 4 + 2) / (0.2 + 4 + 2)
    assert v.cost_per_image_s["overhead"] == pytest.approx(0.002)
    assert v.cache_factor == pytest.approx(0.086 / 0.0062)
    cache = by_setting(v, "--cache ram")
    assert cache.expected_images_per_s == pytest.approx(15 / 0.0062) or cache.data_wait == 0
    device = by_setting(v, "--cache ram --augment-on device")
    assert device.expected_images_per_s >= cache.expected_images_per_s
    assert device.data_wait < 0.03  # 0.2 + 0.4 + 2 ms per image on 15 cores covers the step
    assert "50.0 GiB" in cache.setting


def test_step_bound_when_the_loader_keeps_up():
    v = diagnose(timings(step_s=20.0))  # a CPU step of 20 s per mini-batch
    assert v.bottleneck == "model step" and v.data_wait == 0
    assert v.expected_images_per_s == pytest.approx(16 / (20.0 + 16 * 0.00002))
    assert v.sentence.startswith("model-step-bound")


def test_augment_bound_with_cache_suggests_device_augmentation():
    v = diagnose(timings(cached=True, loader_cpu_s=0.0102, augment_s=0.009, cores=4, workers=3,
                         loader_images_per_s={}))
    assert v.bottleneck == "augment"
    assert not any(s.setting.startswith("--cache ram (") for s in v.suggestions)  # already cached
    device = by_setting(v, "--cache ram --augment-on device")
    assert device.expected_images_per_s > 2.5 * v.expected_images_per_s


def test_hand_off_bound():
    v = diagnose(timings(cached=True, augment_on="device", loader_cpu_s=0.01, cores=4, workers=3,
                         loader_images_per_s={}))
    assert v.bottleneck == "hand-off"
    assert not any("augment-on device" in s.setting for s in v.suggestions)


def test_workers_bound_names_the_worker_count():
    v = diagnose(timings(cached=True, loader_cpu_s=0.006, workers=1, loader_images_per_s={}))
    assert v.bottleneck == "workers"
    needed = math.ceil(v.demand_images_per_s * 0.006)
    workers = by_setting(v, "--workers")
    assert workers.setting == f"--workers {needed}" and workers.data_wait < 0.03


def test_one_core_machine_uses_the_main_process():
    v = diagnose(timings(cores=1, workers=0, loader_images_per_s={0: 5.0}))
    assert v.supply_images_per_s == pytest.approx(1 / 0.086)


def test_checkpoint_stall_suggestion_only_when_it_matters():
    assert not any("checkpoint" in s.setting for s in diagnose(timings()).suggestions)
    v = diagnose(timings(dataset_images=200, checkpoint_s=3.0))
    assert v.checkpoint_share > 0.05
    assert any("--checkpoint-interval" in s.setting for s in v.suggestions)


def test_smaller_image_size_and_subdivisions():
    v = diagnose(timings(step_s=20.0, subdivisions=4, batch=64))
    smaller = by_setting(v, "--img-size 320")
    assert smaller.expected_images_per_s == pytest.approx(v.demand_images_per_s / (320 / 416) ** 2, rel=1e-6)
    assert by_setting(v, "--subdivisions 1")


def test_assumed_gpu_step():
    # YOLOv3-416: 65.86 GFLOP forward; 3x for training; 790 TFLOP/s at MFU 0.35
    step = assumed_step_s("h200", 65.86e9, 16)
    assert step == pytest.approx(3 * 65.86e9 * 16 / (790e12 * 0.35))
    assert 16 / step == pytest.approx(1399, rel=0.01)


def test_markdown_has_the_verdict_and_every_suggestion():
    t = timings()
    v = diagnose(t)
    text = render_markdown(t, v)
    assert v.sentence in text
    for s in v.suggestions:
        assert f"`{s.setting}`" in text
    assert "read + decode" in text and "checkpoint save" in text


def test_device_augmentation_time_counts_against_the_step():
    free = by_setting(diagnose(timings(step_s=0.016)), "--cache ram --augment-on device")
    costly = by_setting(diagnose(timings(step_s=0.016, device_augment_s=0.0005)),
                        "--cache ram --augment-on device")
    # 16 images: 16 ms step + 0.3 ms copy; + 8 ms of device augmentation
    assert free.expected_images_per_s == pytest.approx(16 / (0.016 + 16 * 0.00002))
    assert costly.expected_images_per_s == pytest.approx(16 / (0.016 + 16 * 0.00052))
    assert "device time" in costly.why


def test_a_start_that_is_a_large_share_of_a_short_run_is_named():
    # a short run of 20,000 images at the expected 174 images/s: ~115 s of training
    start = {"scan": 4.0, "anchor check": 50.0, "pipeline measurement": 3.0}
    short = diagnose(timings(startup_s=start, planned_images=20_000))
    run_s = 20_000 / short.expected_images_per_s
    assert short.startup_share == pytest.approx(57.0 / (57.0 + run_s)) and short.startup_share > 0.10
    assert short.startup.startswith(f"start-up is {100 * short.startup_share:.0f}% of the run")
    assert "57.0 s before the first step" in short.startup and "anchor check 50.0 s" in short.startup
    assert "--no-autoanchor" in short.startup  # the advice of the part that dominates
    text = render_markdown(timings(startup_s=start, planned_images=20_000), short)
    assert f"**Start-up:** {short.startup}" in text and "| start-up before the first step" in text
    long = diagnose(timings(startup_s=start, planned_images=300 * 100_000))  # 300 epochs: a small share
    assert long.startup == "" and 0 < long.startup_share < 0.01
    assert "**Start-up:**" not in render_markdown(timings(startup_s=start), long)
    cold = diagnose(timings(startup_s={"scan": 90.0, "anchor check": 1.0}, startup_cold=True,
                            planned_images=20_000))
    assert "the next start reads the scan cache" in cold.startup
    assert diagnose(timings()).startup == ""  # not measured: nothing said


def test_rates_below_ten_images_per_second_are_not_rounded_to_zero():
    v = diagnose(timings(step_s=40.0))  # a CPU step of 40 s per mini-batch of 16: 0.4 images/s
    assert "consumes 0.4 images/s" in v.sentence
    assert "(loader 174, step 0.4)" in render_markdown(timings(step_s=40.0), v)

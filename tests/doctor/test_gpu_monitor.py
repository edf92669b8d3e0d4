"""GpuMonitor on the CPU: a no-op that passes batches through; the data-wait warning logic."""

from __future__ import annotations

from turboyolo.train.gpu_monitor import GpuMonitor, data_wait_advice


def test_cpu_monitor_is_a_pass_through_no_op():
    monitor = GpuMonitor("cpu")
    assert not monitor.enabled
    assert list(monitor.wrap(iter([1, 2, 3]))) == [1, 2, 3]
    assert monitor.read() == {}
    monitor.close()


def test_warning_after_patience_then_once():
    monitor = GpuMonitor("cpu", patience=3)
    advice = data_wait_advice("none", "cpu", 1, 8)
    assert "--cache ram" in advice and "turboyolo doctor" in advice
    assert monitor.data_wait_warning(0.5, advice) is None
    assert monitor.data_wait_warning(0.05, advice) is None  # a good interval resets the count
    assert monitor.data_wait_warning(0.2, advice) is None
    assert monitor.data_wait_warning(0.3, advice) is None
    line = monitor.data_wait_warning(0.4, advice)
    assert line is not None and "40%" in line and "--cache ram" in line
    assert monitor.data_wait_warning(0.9, advice) is None  # once per run


def test_advice_follows_the_settings():
    assert "--augment-on device" in data_wait_advice("ram", "cpu", 3, 8)
    assert "--workers 7" in data_wait_advice("ram", "device", 3, 8)
    assert "--img-size" in data_wait_advice("disk", "device", 7, 8)


def test_the_warning_compares_with_the_prediction_of_auto():
    advice = data_wait_advice("ram", "cpu", 1, 2)
    monitor = GpuMonitor("cpu", patience=2)
    assert monitor.data_wait_warning(0.25, advice, predicted=0.1) is None  # within 0.2 of the prediction
    assert monitor.data_wait_warning(0.25, advice, predicted=0.1) is None
    assert monitor.data_wait_warning(0.4, advice, predicted=0.1) is None
    line = monitor.data_wait_warning(0.5, advice, predicted=0.1)
    assert "50%" in line and "predicted at the start: 10%" in line and advice in line

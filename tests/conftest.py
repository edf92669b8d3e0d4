"""Shared fixtures (the official yolov3-tiny weights, fetched once into the user cache; one trained run for
the whole session) and the suite's two tiers.

The tiers (README "Tests"):

* ``make test`` runs every test not marked ``full``: each promise is checked at least once, through the
  command where the promise is the command's (one Darknet scene against the binary, one browser run, one
  DDP run included), in a few minutes on two cores (``pytest -m "not full" -n auto``).
* ``make test-all`` runs everything (``.ci/run`` runs it).

A new test is in both tiers: that is the default and needs no marker. Mark it
``@pytest.mark.full(covered_by="tests/<file>.py::<test>")`` (or a ``pytest.param(..., marks=...)`` of one
case) only when the test it names, which stays in ``make test``, checks the same promise; collection
fails when the named test does not exist or is ``full`` itself. ``slow`` (more than a few seconds) is
informational: slow tests stay in ``make test`` unless they are ``full``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
sys.path.insert(0, str(TESTS))  # shared helpers such as fidelity.py

if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):  # pytest-xdist: its workers share the cores; one thread each
    # (before torch is imported: its thread pools read this once), also in the processes the tests start
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1)
                                                     // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))))


@pytest.fixture
def one_thread():
    """One intra-op thread for the test (then torch's count again): on a shared 2-core machine two spinning
    threads run several times slower. Folders whose tests all want it use it autouse in their conftest."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# What `make test` always runs through the command (issue 43): never `full`.
ALWAYS = (
    "tests/train/test_darknet_command.py::test_command_matches_darknet[dog0_256]",  # a scene vs the binary
    "tests/review/test_review_browser.py::test_a_person_draws_moves_relabels_deletes_saves_and_meets_a_conflict",
    "tests/distributed/test_ddp.py::test_two_processes_equal_one_and_resume_in_one",  # two processes
)


@pytest.hookimpl(tryfirst=True)  # before `-m "not full"` deselects: every covering test is still listed
def pytest_collection_modifyitems(config, items):
    """Each ``full`` test names, in ``covered_by``, a test of ``make test`` that checks the same promise; the
    tests of :data:`ALWAYS` are not ``full``. Checked where the named test's file is collected (and a named
    file that no longer exists is an error: a moved test takes its name along)."""
    plain = {item.nodeid.split("[")[0] for item in items if item.get_closest_marker("full") is None}
    plain |= {item.nodeid for item in items if item.get_closest_marker("full") is None}
    files = {item.nodeid.split("::")[0] for item in items}
    named = [(item.nodeid, item.get_closest_marker("full").kwargs.get("covered_by")) for item in items
             if item.get_closest_marker("full") is not None]
    named += [("tests/conftest.py ALWAYS", test) for test in ALWAYS]
    for nodeid, covered in named:
        if not covered:
            raise pytest.UsageError(f"{nodeid}: @pytest.mark.full needs covered_by=\"tests/...::test\", "
                                    "the test of `make test` that checks the same promise")
        path = covered.split("::")[0]
        if not (config.rootpath / path).is_file():
            raise pytest.UsageError(f"{nodeid}: {covered!r}: no such test file (moved? name it anew)")
        if path in files and covered not in plain:
            raise pytest.UsageError(f"{nodeid}: {covered!r} is not a test of `make test` (no such test, or "
                                    "it is marked full)")

DARKNET_CFG_DIR = Path("/usr/share/darknet/cfg")
DARKNET_DATA_DIR = Path("/usr/share/darknet/data")


@pytest.fixture(scope="session")
def tiny_weights() -> Path:
    """The official yolov3-tiny.weights, verified by sha256 (downloaded on first use)."""
    from turboyolo import assets
    from turboyolo.errors import AssetError

    try:
        return assets.fetch("yolov3-tiny", verbose=False)
    except AssetError as err:  # no network and no cache: say so rather than fail obscurely
        pytest.skip(f"yolov3-tiny weights unavailable: {err}")



@pytest.fixture
def isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TURBOYOLO_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def boxes_dataset(tmp_path, isolated_cache) -> Path:
    from synth import make_image_folder

    make_image_folder(tmp_path / "ds", count=6, size=(96, 128), ext=".png", num_classes=1)
    return tmp_path / "ds"


@pytest.fixture(scope="session")
def tiny_cfg(tmp_path_factory) -> Path:
    """A 1-class yolov3-tiny cfg at 64 px (random weights are enough to exercise the plumbing)."""
    from turboyolo.formats.darknet_cfg import write_cfg
    from turboyolo.model.zoo import make_spec

    path = tmp_path_factory.mktemp("cfg") / "tiny-1c.cfg"
    write_cfg(make_spec("yolov3-tiny", 1, 64, 64, batch=1, subdivisions=1), path)
    return path


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory):
    """One finished training run for the whole session (each xdist worker makes its own), for tests that
    need *a* trained run or checkpoint rather than a training of their own: ``(run dir, cfg, data)`` of
    ``turboyolo train`` on a micro cfg, 4 + 2 synthetic images, one epoch of 2 iterations. Read it; to
    change or resume it, take :func:`trained_run_copy`."""
    from synth import make_dataset, micro_cfg
    from turboyolo.cli import main

    root = tmp_path_factory.mktemp("trained_run")
    data = make_dataset(root / "data", 4, 2)
    cfg = micro_cfg(root / "micro.cfg", batch=2)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TURBOYOLO_CACHE", str(root / "cache"))
        assert main(["train", "--cfg", str(cfg), "--data", str(data), "--workers", "0", "--project",
                     str(root / "runs"), "--epochs", "1", "--evaluation-interval", "0",
                     "--checkpoint-interval", "0"]) == 0
    return root / "runs" / "exp", cfg, data


@pytest.fixture
def trained_run_copy(trained_run, tmp_path):
    """:func:`trained_run` copied to ``tmp_path/runs/exp``, the test's own: ``(run dir, cfg, data)``."""
    import shutil

    run_dir, cfg, data = trained_run
    copy = tmp_path / "runs" / "exp"
    shutil.copytree(run_dir, copy)
    return copy, cfg, data

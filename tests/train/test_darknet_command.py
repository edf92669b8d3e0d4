"""``turboyolo train --config darknet`` as a user runs it, against ``darknet detector train`` on the same
images, cfg and weights (the real command, the real loader: nothing replaced).

The scenes (tests/darknet_scenes.py) are left-right symmetric images cut from Darknet's sample photos
with mirrored boxes, so Darknet's run is deterministic (its flip changes nothing) and one image per list
makes its random list draws irrelevant. Each is listed once and twice (turboyolo must draw ``batch``
entries per iteration as Darknet does, whatever the list's length). Compared: every tensor of the
``.weights`` file, max |our update - Darknet's| over its elements as a share of the tensor's largest
Darknet update (less one float32 spacing of the weight), after 1 and 10 iterations.

With the recipe's ``--arithmetic darknet`` the whole step is Darknet's float operations
(exact/step.py): on this machine every element of every tensor is equal to the binary's after 1
and after 10 iterations on every scene (docs/DARKNET_TRAINING.md). The bars below allow a difference of
float rounding (one float32 spacing of a weight is not counted) and its growth over ten iterations,
should a C library round one ``exp`` or ``logf`` differently: 1000x and 100x under the issue's. Where
the binary is not installed, the committed fixture (tests/fixtures/darknet_train/scenes) stands in for
it, compared at 16 elements of each tensor.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from darknet_scenes import PHOTOS, SCENE_PHOTOS, make_scene, write_scene
from darknet_training import FIXTURE, tensor_layout
from turboyolo.formats.darknet_weights import read_weights

# Issue 30 asks <= 1e-3 after 1 iteration and <= 1e-2 after 10; the step is Darknet's to the bit (0 here).
ONE_ITERATION, TEN_ITERATIONS = 1e-6, 1e-4
SCENE_FIXTURE = FIXTURE / "scenes"  # make_scene_reference.py: the scenes' halves and Darknet's weights
pytestmark = pytest.mark.slow
live = [pytest.mark.darknet,
        pytest.mark.skipif(shutil.which("darknet") is None or not PHOTOS.exists(),
                           reason="darknet binary (and its sample photos) not installed")]


def write_run(work, images: list, iterations: int):
    """t.data, train.cfg (the fixture's, max_batches = iterations) and the list of ``images``."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "train.txt").write_text("".join(f"{path}\n" for path in images))
    (work / "backup").mkdir(exist_ok=True)
    (work / "t.data").write_text(f"classes=80\ntrain={work}/train.txt\nvalid={work}/train.txt\n"
                                 f"names=/usr/share/darknet/data/coco.names\nbackup={work}/backup\n")
    cfg = (FIXTURE / "train.cfg").read_text().replace("max_batches=10", f"max_batches={iterations}")
    (work / "train.cfg").write_text(cfg)


def darknet_weights(work, image, iterations: int, weights) -> np.ndarray:
    write_run(work, [image], iterations)
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    subprocess.run(["darknet", "detector", "train", "t.data", "train.cfg", str(weights), "-clear"],
                   cwd=work, env=env, capture_output=True, check=False)  # it segfaults on exit here
    return read_weights(work / "backup" / "train_final.weights")[1]


def start_turboyolo(work, images: list, iterations: int, weights) -> subprocess.Popen:
    """``turboyolo train --config darknet`` on ``images`` in a process of its own (one thread), so that
    the runs on a list with the image once and twice go side by side on two cores."""
    write_run(work, images, iterations)
    command = [sys.executable, "-m", "turboyolo", "train", "--config", "darknet", "--cfg",
               str(work / "train.cfg"), "--data", str(work / "t.data"), "--weights", str(weights),
               "--max-batches", str(iterations),
               # where the run goes, no evaluation, every epoch's weights: nothing that changes the training
               "--device", "cpu", "--project", str(work), "--name", "run", "--evaluation-interval", "0",
               "--checkpoint-interval", "1", "--workers", "0"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with open(work / "train.log", "w") as log:  # a file, not a pipe that could fill while the other runs
        return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)


def turboyolo_weights(work, run: subprocess.Popen, iterations: int) -> dict[int, np.ndarray]:
    """The command's weights after each iteration (one image listed once or twice at batch 2: an epoch is
    one iteration, and ``--checkpoint-interval 1`` keeps every epoch's)."""
    from turboyolo.formats.darknet_cfg import parse_cfg
    from turboyolo.model.darknet import Darknet
    from turboyolo.model.loading import checkpoint_model_state, read_checkpoint

    assert run.wait() == 0, (work / "train.log").read_text()[-4000:]
    model = Darknet(parse_cfg(work / "train.cfg"))
    found = {}
    for epoch in range(1, iterations + 1):
        model.load_state_dict(checkpoint_model_state(read_checkpoint(
            work / "run" / "weights" / f"epoch{epoch}.pt"), prefer_ema=False))
        found[epoch] = model.flat_weights()
    assert np.array_equal(found[iterations], read_weights(work / "run" / "weights" / "last.weights")[1])
    return found


def update_errors(ours: np.ndarray, start: np.ndarray, theirs: np.ndarray) -> dict[str, float]:
    errors, offset = {}, 0
    for name, size in tensor_layout():
        part = slice(offset, offset + size)
        offset += size
        base = start[part].astype(np.float64)
        mine, dk = ours[part] - base, theirs[part] - base
        scale = np.abs(dk).max()
        spacing = np.spacing(np.maximum(np.abs(start[part]), np.abs(theirs[part]))).astype(np.float64)
        gap = np.maximum(np.abs(mine - dk) - spacing, 0)
        errors[name] = float(gap.max() / scale) if scale > 0 else 0.0
    return errors


SCENES = [(photo, seed, 512 if photo == "person" else 256) for seed, photo in enumerate(SCENE_PHOTOS)]
RUNS = (1, 10)  # iterations compared
# `make test` compares the first scene; `make test-all` every one (tests/conftest.py: the tiers)
FIRST = "tests/train/test_darknet_command.py::test_command_matches_darknet[dog0_256]"
FIRST_FIXTURE = "tests/train/test_darknet_command.py::test_command_matches_darknet_fixture[dog0_256]"


def _later(scene_id: str, first: str) -> list:
    return [] if first.endswith(f"[{scene_id}]") else [pytest.mark.full(covered_by=first)]


def _scene_id(scene) -> str:
    return f"{scene[0]}{scene[1]}_{scene[2]}"


@pytest.mark.parametrize("scene", [pytest.param(scene, id=_scene_id(scene),
                                                marks=[*live, *_later(_scene_id(scene), FIRST)])
                                   for scene in SCENES])
def test_command_matches_darknet(tmp_path, tiny_weights, scene):
    """Live: the installed binary and turboyolo on each scene, every element of every tensor."""
    photo, seed, size = scene
    image = make_scene(photo, seed, tmp_path / "scene", size)
    theirs = {run: darknet_weights(tmp_path / f"darknet{run}", image, run, tiny_weights) for run in RUNS}

    def errors(ours, start, run):
        print(f"{image.name}, {run} iteration(s): {int(np.sum(ours != theirs[run]))} of {ours.size} floats "
              "differ from the binary's")
        return update_errors(ours, start, theirs[run])

    _assert_agrees(tmp_path, tiny_weights, image, errors)


def _fixture_cases():
    return sorted(path.stem for path in SCENE_FIXTURE.glob("*.png"))


@pytest.mark.skipif(shutil.which("darknet") is not None and PHOTOS.exists(),
                    reason="the live comparison runs instead (test_command_matches_darknet)")
@pytest.mark.parametrize("name", [pytest.param(name, marks=_later(name, FIRST_FIXTURE))
                                  for name in _fixture_cases()])
def test_command_matches_darknet_fixture(tmp_path, tiny_weights, name):
    """Without the binary: the same comparison at the elements the fixture keeps (make_scene_reference.py:
    each tensor's 4 largest Darknet updates and 12 random elements, and its largest update)."""
    import cv2

    half = cv2.imread(str(SCENE_FIXTURE / f"{name}.png"))[:, :, ::-1]
    image = write_scene(np.ascontiguousarray(half), (SCENE_FIXTURE / f"{name}.txt").read_text(),
                        tmp_path / "scene", name, int(name.rsplit("_", 1)[1]))
    with np.load(SCENE_FIXTURE / "scenes.npz") as data:
        stored = {run: (data[f"{name}/{run}/scale"], data[f"{name}/{run}/index"], data[f"{name}/{run}/value"])
                  for run in RUNS}

    def errors(ours, start, run):
        scales, indices, values = stored[run]
        result, offset = {}, 0
        for row, (tensor, count) in enumerate(tensor_layout()):
            index, value = indices[row], values[row]
            base = start[offset:offset + count][index]
            mine = ours[offset:offset + count][index]
            spacing = np.spacing(np.maximum(np.abs(base), np.abs(value))).astype(np.float64)  # float32's
            base, value = base.astype(np.float64), value.astype(np.float64)
            gap = np.maximum(np.abs((mine - base) - (value - base)) - spacing, 0)
            result[tensor] = float(gap.max() / scales[row]) if scales[row] > 0 else 0.0
            offset += count
        return result

    _assert_agrees(tmp_path, tiny_weights, image, errors)


def _assert_agrees(tmp_path, tiny_weights, image, errors_of) -> None:
    """turboyolo on ``image`` listed once and twice: the same weights, and within the bar of Darknet's
    after 1 and 10 iterations (``errors_of(ours, start, iterations)``: per tensor)."""
    _, start = read_weights(tiny_weights)
    started = {}
    try:
        for listed in (1, 2):
            started[listed] = start_turboyolo(tmp_path / f"ours{listed}", [image] * listed, max(RUNS),
                                              tiny_weights)
        runs = {listed: turboyolo_weights(tmp_path / f"ours{listed}", process, max(RUNS))
                for listed, process in started.items()}
    finally:
        for process in started.values():  # a failed run leaves none behind
            process.kill()
            process.wait()
    # `batch` draws per iteration whatever the list's length: the same batches
    assert all(np.array_equal(runs[1][run], runs[2][run]) for run in RUNS), "listed twice: changed"
    for listed in (1, 2):
        for run in RUNS:
            bar = ONE_ITERATION if run == 1 else TEN_ITERATIONS
            errors = errors_of(runs[listed][run], start, run)
            worst = sorted(errors.items(), key=lambda item: -item[1])[:3]
            print(f"{image.name} listed {listed}x, {run} iteration(s): worst {worst}")
            assert worst[0][1] <= bar, (f"{image.name} listed {listed}x: after {run} iteration(s) "
                                        f"{worst[0][0]} differs by {worst[0][1]:.2e} of its largest update")

from __future__ import annotations

import cv2
import numpy as np
import pytest

from turboyolo.cli import main
from turboyolo.infer.video import split_video_sources


def _write_video(path, frames=10, size=(96, 128)):
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 10.0, (size[1], size[0]))
    rng = np.random.default_rng(0)
    for _ in range(frames):
        writer.write(rng.integers(0, 255, (*size, 3), np.uint8))
    writer.release()
    return path


def test_sources_split_into_images_and_videos(tmp_path):
    (tmp_path / "a.jpg").write_bytes(b"")
    (tmp_path / "b.mp4").write_bytes(b"")
    images, videos = split_video_sources([str(tmp_path / "*"), "rtsp://cam/1", "0", str(tmp_path / "c.MOV")])
    assert images == [str(tmp_path / "*")]
    assert videos == [str(tmp_path / "b.mp4"), "rtsp://cam/1", "0", str(tmp_path / "c.MOV")]


@pytest.mark.slow
def test_detect_on_video_with_stride(tiny_cfg, tmp_path):
    from turboyolo.model.loading import build_model, save_darknet_weights

    video = _write_video(tmp_path / "clip.mp4")
    weights = save_darknet_weights(build_model(tiny_cfg), tmp_path / "tiny.weights")
    args = [
        "detect",
        str(video),
        "--cfg",
        str(tiny_cfg),
        "--weights",
        str(weights),
        "--vid-stride",
        "3",
        "--save-txt",
        "--conf-thres",
        "0.3",
        "--device",
        "cpu",
        "--project",
        str(tmp_path / "runs"),
    ]
    assert main(args) == 0
    out = tmp_path / "runs" / "exp"
    assert sorted(p.name for p in (out / "labels").glob("*.txt")) == [f"clip_{i}.txt" for i in (0, 3, 6, 9)]
    capture = cv2.VideoCapture(str(out / "clip.mp4"))
    assert int(capture.get(cv2.CAP_PROP_FRAME_COUNT)) == 4
    assert capture.get(cv2.CAP_PROP_FPS) == pytest.approx(10 / 3, rel=0.01)
    capture.release()
    missing = [
        "detect",
        str(tmp_path / "nope.mp4"),
        "--cfg",
        str(tiny_cfg),
        "--weights",
        str(weights),
        "--project",
        str(tmp_path / "runs"),
    ]
    assert main(missing) == 0  # an unreadable video is reported and skipped, like an unreadable image

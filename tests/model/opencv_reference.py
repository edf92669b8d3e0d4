"""OpenCV 4.x's Darknet importer (``cv2.dnn.readNetFromDarknet``) as an independent reference.

Imports only numpy and cv2, so it also runs as a script under another interpreter (one with OpenCV 4.x
when the test's own OpenCV is 5.x, which dropped the importer):

    python opencv_reference.py CFG WEIGHTS BLOB.npy OUT.npz

writes, per ``[yolo]`` layer, OpenCV's output ``[B, H * W * A, 5 + C]``: cx, cy, w, h relative to the
network input, objectness, objectness x class probability (rows: cell y, cell x, anchor).

OpenCV's ``[yolo]`` layer also zeroes class scores at or below ``thresh`` (default 0.2) and runs its own
NMS (``nms_threshold``, default 0.4); :func:`opencv_cfg_text` sets both to 0 so the raw decoded values
come back. Those two keys are OpenCV's, Darknet ignores them.
"""

from __future__ import annotations

import sys

import numpy as np


def has_darknet_importer() -> bool:
    try:
        import cv2
    except ImportError:
        return False
    return hasattr(cv2, "dnn") and hasattr(cv2.dnn, "readNetFromDarknet")


def opencv_cfg_text(cfg_text: str) -> str:
    """The cfg with OpenCV's own score threshold and NMS switched off in every ``[yolo]``."""
    return cfg_text.replace("[yolo]\n", "[yolo]\nthresh=0\nnms_threshold=0\n")


def opencv_outputs(cfg: str, weights: str, blob: np.ndarray) -> dict[str, np.ndarray]:
    """Run ``blob`` (float32 ``[B, 3, H, W]``, RGB in [0, 1]) through OpenCV's Darknet importer.

    Returns ``{"yolo_<layer index>": [B, H * W * A, 5 + C]}``.
    """
    import cv2

    net = cv2.dnn.readNetFromDarknet(cfg, weights)
    net.setPreferableBackend(cv2.dnn.DNN_BACKEND_OPENCV)
    net.setPreferableTarget(cv2.dnn.DNN_TARGET_CPU)
    if hasattr(net, "enableWinograd"):
        net.enableWinograd(False)  # Winograd 3x3 convolutions trade accuracy for speed
    names = list(net.getUnconnectedOutLayersNames())
    net.setInput(np.ascontiguousarray(blob, np.float32))
    outputs = net.forward(names)
    batch = blob.shape[0]
    return {name: out.reshape(batch, -1, out.shape[-1]) for name, out in zip(names, outputs)}


def main(argv: list[str]) -> None:
    cfg, weights, blob_path, out_path = argv
    outputs = opencv_outputs(cfg, weights, np.load(blob_path))
    import cv2

    np.savez(out_path, __version__=np.array(cv2.__version__), **outputs)


if __name__ == "__main__":
    main(sys.argv[1:])

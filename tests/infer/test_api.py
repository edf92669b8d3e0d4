from __future__ import annotations

import subprocess
import sys

import numpy as np


def test_import_turboyolo_is_light():
    code = "import sys, turboyolo; assert callable(turboyolo.__getattr__); print('torch' in sys.modules)"
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"
    )


def test_load_and_detect_on_arrays_and_paths(tiny_cfg, tmp_path):
    import cv2

    import turboyolo
    from turboyolo.model.loading import build_model, save_darknet_weights

    weights = save_darknet_weights(build_model(tiny_cfg), tmp_path / "tiny.weights")
    model = turboyolo.load(weights, tiny_cfg, device="cpu")
    rng = np.random.default_rng(0)
    arrays = [rng.integers(0, 255, (48 + 8 * i, 80, 3), np.uint8) for i in range(3)]
    cv2.imwrite(str(tmp_path / "x.png"), cv2.cvtColor(arrays[1], cv2.COLOR_RGB2BGR))
    batched = turboyolo.detect(model, arrays + [tmp_path / "x.png"], conf_thres=0.3, batch_size=2)
    assert [(r.width, r.height) for r in batched] == [(80, 48), (80, 56), (80, 64), (80, 56)]
    np.testing.assert_allclose(batched[1].boxes, batched[3].boxes, atol=1e-4)  # array == the same file
    [single] = turboyolo.detect(model, arrays[2], conf_thres=0.3)
    np.testing.assert_allclose(single.scores, batched[2].scores, atol=1e-5)
    [tiled] = turboyolo.detect(model, rng.integers(0, 255, (100, 150, 3), np.uint8), conf_thres=0.3, tile=64)
    assert tiled.boxes.shape[1] == 4 and (tiled.boxes[:, 2] <= 150 + 1e-3).all()

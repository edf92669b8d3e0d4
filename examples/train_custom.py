"""Fine-tune yolov3-tiny on your own data set from Python, then detect with the result.

    python examples/train_custom.py examples/data.yaml [IMAGE ...]

Any option of ``turboyolo train`` is a keyword of :func:`turboyolo.train` (``img_size``, ``batch``,
``cache``, ...). ``TURBOYOLO_EXAMPLE_OPTIONS`` (YAML, e.g. ``{max_batches: 1, img_size: 64}``) adds or
overrides options: tests/test_examples.py uses it to run this script in seconds on a tiny data set.
"""

import os
import sys

import yaml

import turboyolo

data = sys.argv[1] if len(sys.argv) > 1 else "examples/data.yaml"
options = dict(cfg="yolov3-tiny", weights="yolov3-tiny", epochs=50)
options.update(yaml.safe_load(os.environ.get("TURBOYOLO_EXAMPLE_OPTIONS", "{}")) or {})

result = turboyolo.train(data=data, **options)
print(f"{result.stop_reason} after {result.iterations} iterations: mAP@0.5 {result.metrics['mAP50']:.3f}")
print(f"weights: {result.run_dir / 'weights' / 'best.pt'}")

model = turboyolo.load(result.run_dir / "weights" / "best.pt", device="cpu")
for path, found in zip(sys.argv[2:], turboyolo.detect(model, sys.argv[2:]) if sys.argv[2:] else []):
    print(path, [(int(c), round(float(s), 2)) for c, s in zip(found.classes, found.scores)])

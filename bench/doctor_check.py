"""Does the doctor's verdict match a separate measurement? Trees and the large-photo set, CPU, data-only.

For each data set: ``turboyolo doctor`` in data-only mode (``--assume-gpu h200``, 1 worker) gives a
bottleneck and a predicted ``--cache`` factor; then, separately, the loader is measured cold (original
files) and warm (prepared cache) with :func:`turboyolo.doctor.throughput.measure_loader` (1 worker, full
augmentation, images/s per core and wall) and the measured factor is compared with the prediction.
Also measured: the CPU side of ``--augment-on device`` (warm, 1 worker and in-process).

Usage: ``.venv/bin/python bench/doctor_check.py [--photos DIR] [--trees DATA]``. Prints Markdown.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import cv2
import torch

sys.path.insert(0, str(Path(__file__).parent))
from data_pipeline import fetch_photos, make_dataset  # noqa: E402

from turboyolo.data.augment import AugmentParams  # noqa: E402
from turboyolo.data.cache import prepare_cache  # noqa: E402
from turboyolo.data.pipeline import build_loader  # noqa: E402
from turboyolo.data.scan import scan_dataset  # noqa: E402
from turboyolo.doctor.throughput import measure_loader  # noqa: E402


def doctor(data: Path, cfg: Path, out: Path) -> dict:
    subprocess.run([sys.executable, "-m", "turboyolo", "doctor", "--data", str(data), "--model", str(cfg),
                    "--assume-gpu", "h200", "--batch", "16", "--subdivisions", "1", "--workers", "1",
                    "--worker-counts", "1", "--images", "32", "--project", str(out), "--name", data.stem],
                   check=True, capture_output=True)
    return json.loads((out / data.stem / "doctor.json").read_text())


def loader_rates(data: Path, images: int) -> dict:
    samples = scan_dataset(data, "train").samples
    params = AugmentParams.from_net()
    with tempfile.TemporaryDirectory() as tmp:
        cache = prepare_cache(samples, 416, Path(tmp) / "prep", workers=2, log=lambda *_: None)
        rows = {}
        for name, c, where, workers in (("cold", None, "cpu", 1), ("warm", cache, "cpu", 1),
                                        ("device, 1 worker", cache, "device", 1),
                                        ("device, in-process", cache, "device", 0)):
            loader = build_loader(samples, img_size=416, batch_size=16, augment=params, workers=workers,
                                  shuffle=True, cache=c, augment_on=where)
            m = measure_loader(loader, images if name != "cold" else max(32, images // 8))
            del loader
            rows[name] = (m.images_per_s, m.images_per_core_s)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--photos", help="folder of large JPEGs (default: fetch the lomiri wallpapers)")
    parser.add_argument("--trees", default=str(Path.home() / ".cache/turboyolo/datasets/trees/trees.data"))
    args = parser.parse_args()
    cv2.setNumThreads(1)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        default = Path(tempfile.gettempdir()) / "turboyolo-photos"
        folder = Path(args.photos) if args.photos else fetch_photos(default)
        photos = sorted(p for p in folder.iterdir() if p.suffix.lower() in (".jpg", ".jpeg"))
        large = make_dataset(photos, tmp / "large")
        cfg = tmp / "yolov3.cfg"
        subprocess.run([sys.executable, "-m", "turboyolo", "cfg", "yolov3", "--num-classes", "1",
                        "-o", str(cfg)], check=True, capture_output=True)
        print("| data set | doctor verdict | predicted `--cache` factor | measured cold -> warm, per core | "
              "measured factor (per core / wall) | within 25% | device augment CPU side, per core "
              "(1 worker / in-process) |")
        print("|---|---|---|---|---|---|---|")
        for name, data, images in (("trees (37 images, 1-2 MP)", Path(args.trees), 512),
                                   ("lomiri wallpapers (19 photos, 1.5-24 MP)", large, 320)):
            report = doctor(data, cfg, tmp / "runs")
            verdict = report["verdict"]
            rows = loader_rates(data, images)
            per_core = rows["warm"][1] / rows["cold"][1]
            wall = rows["warm"][0] / rows["cold"][0]
            ok = abs(verdict["cache_factor"] / per_core - 1) <= 0.25
            print(f"| {name} | {verdict['bottleneck']}-bound, data-wait {100 * verdict['data_wait']:.0f}% | "
                  f"x{verdict['cache_factor']:.2f} | "
                  f"{rows['cold'][1]:.1f} -> {rows['warm'][1]:.1f} images/s | "
                  f"x{per_core:.2f} / x{wall:.2f} | {'yes' if ok else 'no'} | "
                  f"{rows['device, 1 worker'][1]:,.0f} / {rows['device, in-process'][1]:,.0f} images/s |")
            print(f"<!-- {name}: {verdict['sentence']} -->", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Evaluation at the sizes users have: ``turboyolo test`` on thousands of images with an untrained
model that puts a box everywhere and with one that finds almost nothing, and the metric phase alone on
1.5 M detections, beside the code before the NMS caps and the builtin AP (``--old-src``) and beside
Ultralytics' val on the same files.

Steps (each a subcommand; ``all`` runs them in order and prints the Markdown table of
docs/PERFORMANCE.md):

- ``generate``: ``N`` val JPEGs (160-640 x 120-480 px, textured), 4-12 boxes each over 80 classes, a
  ``data.yaml`` for turboyolo and an ``ultra.yaml`` for Ultralytics (train = val: only val runs);
- ``models``: two yolov3-tiny checkpoints at 320 px, 80 classes, random init: ``everywhere.pt``
  (objectness and class biases +2: every anchor a confident box of every class, 120,000 candidates per
  image, what the first evaluations of a run can see) and ``few.pt`` (only the coarse head's largest
  anchor and class 0 fire: about 10 detections per image after NMS);
- ``phases``: in one process per source tree (this one and ``--old-src``), one thread, the CPU seconds
  of each phase of the evaluation loop on the first ``--old-subset`` images (loading with no workers,
  inference, decode + NMS with 300 per image, the metric phase with the tree's default backend);
- ``test``: ``python -m turboyolo test`` on the split (or its first ``--old-subset`` images), one fresh
  process, with this source tree or ``--old-src``, its default threads (or ``OMP_NUM_THREADS`` = every
  core, torch's default, in the ``every core`` runs, which ``--only`` names); its wall and CPU seconds
  (the process and its loader workers, ``wait4``), peak RSS, and the ``speed:`` / ``caps:`` lines it
  printed;
- ``threads``: on the first ``--threads-subset`` images, back to back, ``--rounds`` times: ``turboyolo
  test`` of the everywhere model by default, on every core, on every core with ``--workers 0``, and
  Ultralytics' val (what decides the CPU's intra-op threads of ``turboyolo test``);
- ``metrics``: ``evaluate_detections`` alone (COCO AP, P/R/F1, curves, confusion matrix, as after
  every evaluation) on synthetic detections, 300 per image over 5,000 images, one fresh process per
  backend;
- ``ultralytics``: ``YOLO('yolov3-tiny.yaml').val(data=ultra.yaml, imgsz=320, batch=16)`` in its own
  venv (an untrained model from the yaml, no pretrained weights; on the CPU Ultralytics sets torch to
  cores - 1 threads).

Usage: ``PYTHONPATH=src .venv/bin/python bench/eval_scale.py all --out /tmp/evalscale --images 5000
--old-src /path/to/old/src --old-subset 48 --ultra-python /work/venvs/ultra/bin/python``. The machine
may be shared: CPU seconds are the steadier figure and are printed beside wall.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
IMG_SIZE, BATCH, CLASSES = 320, 16, 80


# ------------------------------------------------------------------------------------------ the data
def generate(out: Path, images: int, seed: int = 0) -> None:
    import cv2
    import numpy as np

    rng = np.random.default_rng(seed)
    image_dir, label_dir = out / "images" / "val", out / "labels" / "val"
    image_dir.mkdir(parents=True, exist_ok=True)
    label_dir.mkdir(parents=True, exist_ok=True)
    for index in range(images):
        width, height = int(rng.integers(160, 641)), int(rng.integers(120, 481))
        small = rng.integers(0, 256, (height // 8 + 1, width // 8 + 1, 3), dtype=np.uint8)
        image = cv2.resize(small, (width, height), interpolation=cv2.INTER_LINEAR)
        rows = []
        for _ in range(int(rng.integers(4, 13))):
            w, h = rng.uniform(0.05, 0.5, 2)
            cx, cy = rng.uniform(w / 2, 1 - w / 2), rng.uniform(h / 2, 1 - h / 2)
            cls = int(rng.integers(0, CLASSES))
            x0, y0 = int((cx - w / 2) * width), int((cy - h / 2) * height)
            image[y0 : y0 + int(h * height), x0 : x0 + int(w * width)] = rng.integers(0, 256, 3)
            rows.append(f"{cls} {cx:.6f} {cy:.6f} {w:.6f} {h:.6f}")
        cv2.imwrite(str(image_dir / f"{index:06d}.jpg"), image, [cv2.IMWRITE_JPEG_QUALITY, 85])
        (label_dir / f"{index:06d}.txt").write_text("\n".join(rows) + "\n")
    names = [f"c{k}" for k in range(CLASSES)]
    (out / "data.yaml").write_text(f"path: {out}\ntrain: images/val\nval: images/val\nnames: {names}\n")
    (out / "ultra.yaml").write_text(f"path: {out}\ntrain: images/val\nval: images/val\nnames: {names}\n")


def subset(out: Path, count: int) -> Path:
    """A data.yaml whose val split is the first ``count`` images (a list file)."""
    listed = out / f"val{count}.txt"
    chosen = sorted((out / "images" / "val").glob("*.jpg"))[:count]
    listed.write_text("\n".join(str(p) for p in chosen) + "\n")
    names = [f"c{k}" for k in range(CLASSES)]
    data = out / f"data{count}.yaml"
    data.write_text(f"path: {out}\ntrain: {listed}\nval: {listed}\nnames: {names}\n")
    return data


def models(out: Path) -> None:
    import torch

    from turboyolo.formats.darknet_cfg import format_cfg
    from turboyolo.model.darknet import Darknet
    from turboyolo.model.zoo import make_spec

    spec = make_spec("yolov3-tiny", num_classes=CLASSES, width=IMG_SIZE, height=IMG_SIZE)
    for name in ("everywhere", "few"):
        torch.manual_seed(0)
        model = Darknet(spec)
        with torch.no_grad():
            for index, head in enumerate(model.heads):
                bias = model.layers[head.layer_index - 1].conv.bias.view(-1, 5 + CLASSES)
                if name == "everywhere":  # objectness and every class ~0.88 on every anchor
                    bias[:, 4:] = 2.0
                else:  # only the largest anchor of the coarse head, class 0: heavily overlapping boxes
                    bias[:, 4:] = -10.0
                    if index == 0:
                        bias[-1, 4:6] = 3.0
        torch.save({"model": model.state_dict(), "cfg_text": format_cfg(spec)}, out / f"{name}.pt")


# ------------------------------------------------------------------------------------- measurements
def timed(command: list[str], env: dict | None = None, cwd: Path | None = None) -> dict:
    """Run ``command``; its wall and CPU seconds (with the descendants it waited for) and peak RSS."""
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=cwd)
    output = process.stdout.read().decode("utf-8", "replace")
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    return {"wall_s": time.perf_counter() - started, "cpu_s": usage.ru_utime + usage.ru_stime,
            "max_rss_mb": usage.ru_maxrss / 1024, "rc": process.returncode, "output": output[-6000:]}


def run_test(data: Path, weights: Path, src: Path, extra: list[str], threads: int | None = None) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src)}
    if threads:  # torch's intra-op threads (turboyolo test's default on the CPU: cores - 1)
        env["OMP_NUM_THREADS"] = str(threads)
    command = [sys.executable, "-m", "turboyolo", "test", "--weights", str(weights), "--data", str(data),
               "--img-size", str(IMG_SIZE), "--batch-size", str(BATCH), "--device", "cpu", *extra]
    result = timed(command, env)
    speed = re.search(r"speed: ([\d.]+) ms inference, ([\d.]+) ms decode\+NMS, ([\d.]+) ms waiting for data "
                      r"per image; metrics ([\d.]+) s", result["output"])
    if speed:
        result.update(inference_ms=float(speed[1]), nms_ms=float(speed[2]), loading_ms=float(speed[3]),
                      metrics_s=float(speed[4]))
    caps = re.search(r"^caps: .*$", result["output"], re.M)
    result["caps"] = caps[0] if caps else ""
    found = re.search(r"\((\d+) detections on (\d+) images\)", result["output"])
    if found:
        result.update(detections=int(found[1]), images=int(found[2]))
    result["map"] = (re.search(r"mAP@0.5 \S+  mAP@0.5:0.95 \S+", result["output"]) or [""])[0]
    return result


def metrics_child(backend: str, images: int, per_image: int) -> None:
    """In a fresh process: the metric phase of one evaluation on synthetic detections; prints JSON."""
    import resource

    import numpy as np

    from turboyolo.train.metrics import evaluate_detections

    rng = np.random.default_rng(0)
    labels, sizes, dets = [], [], []
    for _ in range(images):
        height, width = int(rng.integers(120, 481)), int(rng.integers(160, 641))
        count = int(rng.integers(4, 13))
        gt = np.column_stack([rng.integers(0, CLASSES, count), rng.uniform(0.2, 0.8, (count, 2)),
                              rng.uniform(0.05, 0.4, (count, 2))]).astype(np.float32)
        near = per_image // 2  # half jittered around the ground truth (70% of its class), half anywhere
        g = gt[rng.integers(0, count, near)]
        cx = (g[:, 1] + rng.normal(0, 0.03, near)) * width
        cy = (g[:, 2] + rng.normal(0, 0.03, near)) * height
        bw = g[:, 3] * width * rng.uniform(0.7, 1.3, near)
        bh = g[:, 4] * height * rng.uniform(0.7, 1.3, near)
        far = per_image - near
        x0, y0 = rng.uniform(0, width, far), rng.uniform(0, height, far)
        fw, fh = rng.uniform(5, width / 2, far), rng.uniform(5, height / 2, far)
        boxes = np.column_stack([np.r_[cx - bw / 2, x0], np.r_[cy - bh / 2, y0],
                                 np.r_[cx + bw / 2, x0 + fw], np.r_[cy + bh / 2, y0 + fh]])
        classes = np.r_[np.where(rng.random(near) < 0.7, g[:, 0], rng.integers(0, CLASSES, near)),
                        rng.integers(0, CLASSES, far)]
        det = np.column_stack([boxes, rng.uniform(0.001, 1, per_image), classes]).astype(np.float32)
        dets.append(det[np.argsort(-det[:, 4], kind="stable")])
        labels.append(gt)
        sizes.append((height, width))
    before = resource.getrusage(resource.RUSAGE_SELF)
    rss_before = before.ru_maxrss / 1024
    started, cpu = time.perf_counter(), time.process_time()
    result = evaluate_detections(dets, labels, sizes, CLASSES, conf_thres=0.1, backend=backend)
    print(json.dumps({"backend": backend, "detections": int(sum(len(d) for d in dets)),
                      "wall_s": time.perf_counter() - started, "cpu_s": time.process_time() - cpu,
                      "rss_before_mb": rss_before,
                      "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "map50": result.map50, "map50_95": result.map50_95}))


def run_metrics(backend: str, src: Path, images: int, per_image: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src)}
    result = timed([sys.executable, __file__, "metrics-child", backend, str(images), str(per_image)], env)
    lines = [line for line in result["output"].splitlines() if line.startswith("{")]
    return {**json.loads(lines[-1]), "process_cpu_s": result["cpu_s"]} if lines else result


def phases_child(weights: str, data: str) -> None:
    """In a fresh process: CPU seconds per phase of ``turboyolo.train.engine.evaluate``'s loop, done by
    hand with the tree on PYTHONPATH, one thread (on a loaded machine a second thread's spinning would
    count as work); prints JSON."""
    import torch

    torch.set_num_threads(1)

    from turboyolo.boxes import Letterbox
    from turboyolo.data.loader import move_to_device
    from turboyolo.data.pipeline import build_loader
    from turboyolo.data.scan import scan_dataset
    from turboyolo.formats.darknet_cfg import parse_cfg_text
    from turboyolo.model.loading import build_model, read_checkpoint
    from turboyolo.model.postprocess import decode, nms_options, postprocess
    from turboyolo.train.metrics import evaluate_detections

    spec = parse_cfg_text(read_checkpoint(Path(weights))["cfg_text"], weights)
    model = build_model(spec, Path(weights)).inference_copy_for(torch.device("cpu"))
    scan = scan_dataset(data, "val")
    loader = build_loader(scan.samples, img_size=IMG_SIZE, batch_size=BATCH, augment=None, workers=0,
                          shuffle=False)
    labels = {str(s.image): s.labels for s in scan.samples}
    cpu = {"loading": 0.0, "inference": 0.0, "nms": 0.0}
    dets, gts, sizes = [], [], []
    batches, mark = iter(loader), time.process_time()
    with torch.no_grad():
        for images, _, metas in batches:
            now = time.process_time()
            cpu["loading"] += now - mark
            outputs = model(move_to_device(images, "cpu"))
            mark = time.process_time()
            cpu["inference"] += mark - now
            boxes = [Letterbox.from_meta(m) for m in metas]
            found = postprocess(decode(outputs, model.heads), 0.001, 0.5, multi_label=True, max_det=300,
                                letterboxes=boxes, **nms_options(model.heads))
            dets += [d.numpy() for d in found]
            gts += [labels[str(m.path)] for m in metas]
            sizes += [tuple(m.orig_hw) for m in metas]
            now = time.process_time()
            cpu["nms"] += now - mark
            mark = now
    evaluate_detections(dets, gts, sizes, CLASSES, conf_thres=0.1)
    cpu["metrics"] = time.process_time() - mark
    print(json.dumps({"images": len(dets), "detections": int(sum(len(d) for d in dets)),
                      **{f"{k}_cpu_s": v for k, v in cpu.items()}}))


def run_phases(weights: Path, data: Path, src: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src)}
    result = timed([sys.executable, __file__, "phases-child", str(weights), str(data)], env)
    lines = [line for line in result["output"].splitlines() if line.startswith("{")]
    return {**json.loads(lines[-1]), "process_cpu_s": result["cpu_s"]} if lines else result


ULTRA = """
import sys
from ultralytics import YOLO
model = YOLO('yolov3-tiny.yaml')
metrics = model.val(data=sys.argv[1], imgsz={size}, batch={batch}, device='cpu', plots=False)
print('ULTRA', metrics.box.map50, metrics.box.map, metrics.speed)
"""


def run_ultralytics(python: str, data: Path) -> dict:
    for cache in (data.parent / "labels").glob("*.cache"):
        cache.unlink()  # cold, as turboyolo's first scan of the split
    env = {**os.environ, "YOLO_OFFLINE": "1", "PYTHONPATH": ""}
    result = timed([python, "-c", ULTRA.format(size=IMG_SIZE, batch=BATCH), str(data)], env, cwd=data.parent)
    speed = re.search(r"ULTRA (\S+) (\S+) (\{.*\})", result["output"])
    if speed:
        result.update(map50=float(speed[1]), map50_95=float(speed[2]), speed=speed[3])
    return result


def threads(out: Path, args: argparse.Namespace, record) -> None:
    """``turboyolo test`` by default, on every core, on every core without loader workers, and
    Ultralytics' val, back to back on the first ``--threads-subset`` images, ``--rounds`` times."""
    count = args.threads_subset
    data = subset(out, count)
    ultra = out / f"ultra{count}.yaml"
    ultra.write_text(data.read_text())
    cores = os.cpu_count()
    for round_index in range(args.rounds):
        for name, extra, count_threads in (("default", [], None), ("every core", [], cores),
                                           ("every core, --workers 0", ["--workers", "0"], cores)):
            record(f"threads {count} round {round_index}: turboyolo {name}",
                   run_test(data, out / "everywhere.pt", SRC, extra, count_threads))
        if args.ultra_python:
            result = {**run_ultralytics(args.ultra_python, ultra), "images": count}
            record(f"threads {count} round {round_index}: ultralytics", result)


# -------------------------------------------------------------------------------------------- table
def row(name: str, r: dict) -> str:
    if r.get("rc"):
        return f"| {name} | failed (rc {r['rc']}) |  |  |  |  |  |"
    split = (f"{r['inference_ms']:.1f} / {r['nms_ms']:.1f} ms, {r['metrics_s']:.1f} s" if "inference_ms" in r
             else r.get("speed", ""))
    images = r.get("images", "")
    per_image = r["wall_s"] / max(images or 1, 1) * 1000
    return (f"| {name} | {images} | {r['wall_s']:.1f} ({r['cpu_s']:.1f}) | {per_image:.0f} | {split} | "
            f"{r.get('detections', '')} | {r.get('caps', '') or '-'} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("step", choices=("all", "generate", "models", "phases", "test", "metrics",
                                         "metrics-child", "phases-child", "ultralytics", "threads"))
    parser.add_argument("rest", nargs="*")
    parser.add_argument("--out", type=Path, default=Path("/tmp/evalscale"))
    parser.add_argument("--images", type=int, default=5000)
    parser.add_argument("--old-src", type=Path, help="the source tree before the caps (a main checkout)")
    parser.add_argument("--old-subset", type=int, default=48, help="images of the old code's run")
    parser.add_argument("--ultra-python", help="python of a venv with ultralytics 8.4.190")
    parser.add_argument("--skip", nargs="*", default=[], help="steps of `all` to leave out")
    parser.add_argument("--only", nargs="*", default=[], help="the `test` runs to do (default: all of them)")
    parser.add_argument("--threads-subset", type=int, default=1000, help="images of the `threads` runs")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of the `threads` runs")
    args = parser.parse_args()
    if args.step == "metrics-child":
        metrics_child(args.rest[0], int(args.rest[1]), int(args.rest[2]))
        return
    if args.step == "phases-child":
        phases_child(*args.rest)
        return
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    results_file = out / "results.json"
    results = json.loads(results_file.read_text()) if results_file.exists() else {}

    def record(key: str, value: dict) -> None:
        results[key] = value
        results_file.write_text(json.dumps(results, indent=1))
        print(key, json.dumps({k: v for k, v in value.items() if k != "output"}), flush=True)

    steps = ("generate", "models", "phases", "test", "metrics", "ultralytics") if args.step == "all" else (
        args.step,)
    steps = [s for s in steps if s not in args.skip]
    if "generate" in steps and not (out / "data.yaml").exists():
        started = time.perf_counter()
        generate(out, args.images)
        print(f"generated {args.images} images in {time.perf_counter() - started:.0f} s", flush=True)
    if "models" in steps:
        models(out)
    if "phases" in steps:
        for tree, src in (("new", SRC), ("old", args.old_src)):
            for model in ("everywhere", "few") if src else ():
                first = subset(out, args.old_subset)
                record(f"phases {tree} {model}", run_phases(out / f"{model}.pt", first, src))
    if "test" in steps:
        runs = {  # name: (data, weights, source tree, intra-op threads)
            "new everywhere": (out / "data.yaml", "everywhere", SRC, None),
            "new few": (out / "data.yaml", "few", SRC, None),
            "new everywhere, every core": (out / "data.yaml", "everywhere", SRC, os.cpu_count()),
            "new few, every core": (out / "data.yaml", "few", SRC, os.cpu_count()),
        }
        if args.old_src:
            first = subset(out, args.old_subset)
            runs.update({"old everywhere, first images": (first, "everywhere", args.old_src, None),
                         "new everywhere, first images": (first, "everywhere", SRC, None),
                         "old few": (out / "data.yaml", "few", args.old_src, None)})
        for name, (data, weights, src, threads) in runs.items():
            if (not args.only and "every core" not in name) or name in args.only:
                record(name, run_test(data, out / f"{weights}.pt", src, [], threads))
    if "threads" in steps:
        threads(out, args, record)
    if "metrics" in steps:
        for backend in ("builtin", "faster-coco-eval", "pycocotools"):
            record(f"metrics {backend}", run_metrics(backend, SRC, 5000, 300))
        if args.old_src:
            record("metrics old pycocotools", run_metrics("pycocotools", args.old_src, 5000, 300))
    if "ultralytics" in steps and args.ultra_python:
        record("ultralytics everywhere-yaml", run_ultralytics(args.ultra_python, out / "ultra.yaml"))
    print("\n| run | images | wall s (CPU s) | wall ms/image | inference / decode+NMS per image, metrics | "
          "detections | caps |\n|---|---|---|---|---|---|---|")
    for key, value in results.items():
        if not key.startswith(("metrics", "phases")):
            print(row(key, value))
    print("\n| CPU per image | detections/image | loading | inference | decode+NMS | metrics |\n"
          "|---|---|---|---|---|---|")
    for key, value in results.items():
        if key.startswith("phases") and "nms_cpu_s" in value:
            n = max(value["images"], 1)
            cells = [f"{value[f'{k}_cpu_s'] / n * 1000:.1f} ms"
                     for k in ("loading", "inference", "nms", "metrics")]
            print(f"| {key} ({n} images) | {value['detections'] / n:.0f} | {' | '.join(cells)} |")
    print("\n| metric phase, 1.5 M detections | wall s | CPU s | peak RSS MB | mAP50 |\n"
          "|---|---|---|---|---|")
    for key, value in results.items():
        if key.startswith("metrics") and "cpu_s" in value:
            print(f"| {key} | {value['wall_s']:.1f} | {value['cpu_s']:.1f} | {value['max_rss_mb']:.0f} | "
                  f"{value.get('map50', 0):.6f} |")


if __name__ == "__main__":
    main()

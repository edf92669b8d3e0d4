"""Start-up, scan, cache build, evaluation and memory at the sizes users have, beside Ultralytics.

Generates two sets with :mod:`scale_data` (S1: 120,000 + 5,000 small JPEGs, about 8 boxes each, 80
classes; S2: 2,000 + 100 copies of camera photos of 2.5-20 MP, each its own file) and measures on the
same files, in the same run of this script:

- ``startup``: time from the command to the end of the first ``optimizer.step()`` (a global torch step
  hook, :func:`startup.time_to_first_step`), cold (the tool's scan/label cache and turboyolo's anchor
  cache deleted first; the OS page cache left alone) and warm (the next start), for
  ``turboyolo train`` with its default flags and for Ultralytics'
  ``YOLO('yolov3-tiny.yaml').train(epochs=1, imgsz=320, batch=8, workers=1, close_mosaic=0, nbs=8)``
  (``close_mosaic=0``: a 1-epoch run would turn mosaic off; ``nbs=8``: a step per batch). The scan is
  the time inside ``turboyolo.data.scan.scan_dataset`` / Ultralytics' ``YOLODataset.get_labels``
  (both splits). Memory: the main process's max RSS at the first step and the process tree's PSS
  sampled every 0.5 s until then. S1's warm turboyolo run goes on to its 2nd step and saves the
  checkpoint that ``eval`` tests.
- ``prepare``: ``turboyolo prepare --split train --img-size 320`` on the first ``--prepare-images``
  train images, and its own estimate (``estimate_bytes``) for every train and val image.
- ``index``: memory per image of the label index (the main process's RSS growth while the train split's
  index loads from a warm cache: turboyolo ``scan_dataset``, Ultralytics ``YOLODataset``).
- ``eval`` (S1): ``turboyolo test`` of that 2-step checkpoint (a model that puts boxes everywhere) on
  the 5,000 val images at 320, against Ultralytics' ``YOLO('yolov3-tiny.yaml').val(imgsz=320)`` with
  its own untrained model; both with their default batch (16) and workers.

Every measurement records wall seconds and the CPU seconds of the tool's whole process tree, and the
share of the machine's CPU that other processes used meanwhile (``others_cpu_share``): on a shared
machine the CPU seconds are the steady figure. One JSON per measurement goes to ``--out``.

Usage (about 6 GB of images under ``--root``, deleted by ``--clean``)::

    PYTHONPATH=src .venv/bin/python bench/scale.py --root /work/scale/bench \\
        --ultra-python /work/venvs/ultra/bin/python [--sets s1 s2] \\
        [--parts generate startup prepare index eval] [--clean]
    PYTHONPATH=src .venv/bin/python bench/scale.py --table      # the Markdown table from the JSONs
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale_data import make_large_set, make_small_set, remove_images  # noqa: E402
from startup import PRELUDE, TreeMemory, clear_caches, time_to_first_step  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SETS = {"s1": ("small", 120_000, 5_000), "s2": ("large", 2_000, 100)}
IMG_SIZE = 320
ULTRA_TRAIN = (
    PRELUDE
    + r"""
from ultralytics import YOLO
options = json.loads(os.environ["STARTUP_ARGS"])
YOLO(options.pop("model")).train(**options)
stamp("ended")
"""
)
ULTRA_VAL = r"""
import json, sys
from ultralytics import YOLO
from ultralytics.models.yolo.detect import val
count = [0]
update = val.DetectionValidator.update_metrics
def counted(self, preds, batch):
    count[0] += sum(len(p["cls"]) for p in preds)
    return update(self, preds, batch)
val.DetectionValidator.update_metrics = counted
data, size, project = sys.argv[1:4]
metrics = YOLO("yolov3-tiny.yaml").val(data=data, imgsz=int(size), project=project, name="val", exist_ok=True,
                                        device="cpu")
print("SCALE " + json.dumps({"detections": count[0], "speed_ms_per_image": metrics.speed,
                             "map50": float(metrics.box.map50), "map": float(metrics.box.map)}))
"""
INDEX_TURBOYOLO = r"""
import gc, json, resource, sys, time
from turboyolo.data.scan import scan_dataset
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096
scan_dataset(sys.argv[1], "val")  # the imports and one-off set-up, not counted
gc.collect(); before = rss(); start = time.process_time()
result = scan_dataset(sys.argv[1], "train")
seconds = time.process_time() - start; gc.collect()
print("SCALE " + json.dumps({"images": len(result.samples), "bytes": rss() - before, "cpu_s": seconds}))
"""
INDEX_ULTRA = r"""
import gc, json, os, sys, time
os.environ["YOLO_VERBOSE"] = "False"
from ultralytics.cfg import get_cfg
from ultralytics.data.build import build_yolo_dataset
from ultralytics.data.utils import check_det_dataset
from ultralytics.utils import DEFAULT_CFG
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096
data = check_det_dataset(sys.argv[1])
args = get_cfg(DEFAULT_CFG, {"imgsz": 320, "batch": 8})
build_yolo_dataset(args, data["val"], 8, data, mode="val", stride=32)  # the imports, not counted
gc.collect(); before = rss(); start = time.process_time()
dataset = build_yolo_dataset(args, data["train"], 8, data, mode="train", stride=32)
seconds = time.process_time() - start; gc.collect()
print("SCALE " + json.dumps({"images": len(dataset.labels), "bytes": rss() - before, "cpu_s": seconds}))
"""


# ------------------------------------------------------------------------------------------- machine


class MachineShare:
    """The CPU seconds the whole machine spent between construction and :meth:`done`, to tell how much
    of it went to other processes while a measured tool ran."""

    def __init__(self):
        self.start, self.busy = time.time(), self._busy()
        self.load = os.getloadavg()[0]

    @staticmethod
    def _busy() -> float:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        idle = fields[3] + fields[4]  # idle + iowait
        return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")

    def done(self, tool_cpu: float | None) -> dict:
        wall = time.time() - self.start
        busy = self._busy() - self.busy
        others = max(0.0, busy - (tool_cpu or 0.0))
        return {
            "load_avg_1min_start": round(self.load, 2),
            "load_avg_1min_end": round(os.getloadavg()[0], 2),
            "others_cpu_share": round(others / (wall * os.cpu_count()), 3) if wall > 0 else None,
        }


def machine() -> dict:
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    memory = next(
        int(line.split()[1])
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemTotal:")
    )
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "memory_gib": round(memory / 2**20, 1),
        "turboyolo_commit": commit,
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
    }


# ------------------------------------------------------------------------------------------- the sets


class Bench:
    """One run of the benchmark: where the sets and runs live, the two tools' Pythons, the results."""

    def __init__(self, args: argparse.Namespace):
        self.root, self.out, self.ultra = args.root, args.out, args.ultra_python
        self.sizes = {"s1": tuple(args.s1), "s2": tuple(args.s2)}
        self.prepare_images = args.prepare_images
        self.cache = self.root / "turboyolo-cache"
        self.out.mkdir(parents=True, exist_ok=True)
        self.machine = machine()
        self.machine["ultralytics"] = self.python_says(
            self.ultra, "import ultralytics; print(ultralytics.__version__)"
        )
        self.machine["torch_turboyolo"] = self.python_says(
            sys.executable, "import torch; print(torch.__version__)"
        )
        self.machine["torch_ultralytics"] = self.python_says(
            self.ultra, "import torch; print(torch.__version__)"
        )

    @staticmethod
    def python_says(python: str, code: str) -> str:
        return subprocess.run([python, "-c", code], capture_output=True, text=True).stdout.strip()

    def env(self, tool: str) -> dict[str, str]:
        env = dict(os.environ)
        if tool == "turboyolo":
            env["PYTHONPATH"] = str(REPO / "src")
            env["TURBOYOLO_CACHE"] = str(self.cache)
        else:
            env.pop("PYTHONPATH", None)
        return env

    def save(self, name: str, result: dict) -> None:
        result = {"name": name, "machine": self.machine, **result}
        (self.out / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")
        summary = {k: v for k, v in result.items() if k not in ("lines", "machine", "timed", "log_tail")}
        print(f"{name}: {json.dumps(summary)[:600]}", flush=True)

    def data(self, name: str) -> Path:
        """The set's ``.data`` (generated when missing; ``data.yaml`` for Ultralytics beside it)."""
        kind, (n_train, n_val) = SETS[name][0], self.sizes[name]
        root = self.root / name
        start = MachineShare()
        t0, c0 = time.time(), _children_cpu()
        make = make_small_set if kind == "small" else make_large_set
        data = make(root, n_train, n_val)
        names = "".join(f"  {k}: class{k}\n" for k in range(80))
        (root / "data.yaml").write_text(
            f"path: {root}\ntrain: images/train\nval: images/val\nnames:\n{names}"
        )
        if time.time() - t0 > 5:  # generated now, not reused
            cpu = _children_cpu() - c0 + time.process_time()
            self.save(
                f"{name}-generate",
                {
                    "set": name,
                    "train": n_train,
                    "val": n_val,
                    "wall_s": time.time() - t0,
                    "cpu_s_approx": cpu,
                    "bytes": _bytes(root / "images"),
                    **start.done(cpu),
                },
            )
        return data


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _bytes(folder: Path) -> int:
    return sum(entry.stat().st_size for entry in folder.rglob("*") if entry.is_file())


# -------------------------------------------------------------------------------------------- start-up


def startup(bench: Bench, name: str, tool: str, run: str) -> None:
    data = bench.data(name)
    root = data.parent
    runs = bench.root / "runs"
    if run == "cold":
        if tool == "turboyolo":
            clear_caches(data, bench.cache)
        else:
            for split in ("train", "val"):
                (root / "labels" / f"{split}.cache").unlink(missing_ok=True)
    finish = tool == "turboyolo" and run == "warm" and name == "s1"  # the checkpoint eval tests
    share = MachineShare()
    if tool == "turboyolo":
        cfg = tiny_cfg(bench)
        command = [
            "train",
            "--cfg",
            str(cfg),
            "--data",
            str(data),
            "--img-size",
            str(IMG_SIZE),
            "--batch",
            "8",
            "--subdivisions",
            "1",
            "--max-batches",
            "2",
            "--epochs",
            "1",
            "--evaluation-interval",
            "0",
            "--project",
            str(runs),
            "--name",
            f"{name}-{tool}-{run}",
        ]
        shutil.rmtree(runs / f"{name}-{tool}-{run}", ignore_errors=True)
        result = time_to_first_step(
            command, bench.env(tool), timed=("turboyolo.data.scan:scan_dataset",), finish=finish
        )
        shown = "turboyolo " + " ".join(command)
    else:
        options = {
            "model": "yolov3-tiny.yaml",
            "data": str(root / "data.yaml"),
            "epochs": 1,
            "imgsz": IMG_SIZE,
            "batch": 8,
            "workers": 1,
            "close_mosaic": 0,
            "nbs": 8,
            "device": "cpu",
            "project": str(runs),
            "name": f"{name}-{tool}-{run}",
            "exist_ok": True,
        }
        result = time_to_first_step(
            options,
            bench.env(tool),
            child=ULTRA_TRAIN,
            python=bench.ultra,
            timed=("ultralytics.data.dataset:YOLODataset.get_labels",),
        )
        shown = (
            "YOLO('yolov3-tiny.yaml').train("
            + ", ".join(f"{k}={v!r}" for k, v in options.items() if k != "model")
            + ")"
        )
    scan = {
        "scan_wall_s": sum(t["wall_s"] for t in result["timed"]),
        "scan_cpu_s": sum(t["cpu_s"] for t in result["timed"]),
    }
    bench.save(
        f"{name}-{tool}-startup-{run}",
        {
            "set": name,
            "tool": tool,
            "run": run,
            "command": shown,
            "first_step_wall_s": result.get("wall"),
            "first_step_cpu_s": result.get("cpu"),
            "first_step_main_cpu_s": result.get("main_cpu"),
            "maxrss_main_mb": result.get("maxrss_mb"),
            **scan,
            **result["memory"],
            **share.done(result.get("cpu")),
            "timed": result["timed"],
            "lines": result["lines"],
        },
    )


def tiny_cfg(bench: Bench) -> Path:
    cfg = bench.root / "tiny80.cfg"
    if not cfg.exists():
        subprocess.run(
            [sys.executable, "-m", "turboyolo", "cfg", "yolov3-tiny", "--num-classes", "80", "-o", str(cfg)],
            env=bench.env("turboyolo"),
            check=True,
        )
    return cfg


# --------------------------------------------------------------------------- other measured commands


def measured(command: list[str], env: dict[str, str], log: Path, timeout: float = 7200) -> dict:
    """Run ``command`` to its end with its output in ``log``: wall and CPU seconds of its process tree
    (the reaped descendants included), the largest max RSS in the tree and the tree's PSS peak."""
    share = MachineShare()
    start = time.time()
    with open(log, "w") as sink:
        proc = subprocess.Popen(
            command, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )
        memory = TreeMemory(proc.pid)
        deadline = start + timeout
        status = usage = None
        try:
            while time.time() < deadline:
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    break
                time.sleep(0.2)
        finally:
            if not usage:  # past the deadline, or this script is being stopped
                os.killpg(proc.pid, signal.SIGKILL)
                _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    cpu = usage.ru_utime + usage.ru_stime
    text = log.read_text(errors="replace")
    return {
        "wall_s": time.time() - start,
        "cpu_s": cpu,
        "exit": proc.returncode,
        "maxrss_largest_mb": usage.ru_maxrss / 1024,
        **memory.stop(),
        **share.done(cpu),
        "log_tail": text[-6000:].splitlines(),
    }


def prepare(bench: Bench, name: str) -> None:
    data = bench.data(name)
    lines = (data.parent / "train.txt").read_text().splitlines()
    count = min(bench.prepare_images, len(lines))
    subset = data.parent / f"train-{count}.txt"
    subset.write_text("\n".join(lines[:count]) + "\n")
    small = data.parent / f"subset-{count}.data"
    small.write_text(data.read_text().replace(f"train = {data.parent / 'train.txt'}", f"train = {subset}"))
    out = bench.root / f"prepared-{name}"
    shutil.rmtree(out, ignore_errors=True)
    command = [
        sys.executable,
        "-m",
        "turboyolo",
        "prepare",
        "--data",
        str(small),
        "--split",
        "train",
        "--img-size",
        str(IMG_SIZE),
        "--out",
        str(out),
    ]
    result = measured(command, bench.env("turboyolo"), bench.root / f"{name}-prepare.log")
    result["bytes_written"] = _bytes(out) if out.exists() else 0
    shutil.rmtree(out, ignore_errors=True)
    estimate = subprocess.run(
        [
            sys.executable,
            "-c",
            (
                "import json, sys\nfrom turboyolo.data.scan import scan_dataset\n"
                "from turboyolo.data.cache import estimate_bytes\n"
                "print(json.dumps({s: [len(r.samples), estimate_bytes(r.samples, int(sys.argv[2]))]"
                " for s in ('train', 'val') for r in [scan_dataset(sys.argv[1], s)]}))"
            ),
            str(data),
            str(IMG_SIZE),
        ],
        env=bench.env("turboyolo"),
        capture_output=True,
        text=True,
        check=True,
    )
    every = json.loads(estimate.stdout.strip().splitlines()[-1])
    images = sum(n for n, _ in every.values())
    bench.save(
        f"{name}-turboyolo-prepare",
        {
            "set": name,
            "tool": "turboyolo",
            "command": "turboyolo " + " ".join(command[3:]),
            "images": count,
            "estimate_all": every,
            "estimate_all_bytes": sum(b for _, b in every.values()),
            "images_all": images,
            "projected_all_cpu_s": result["cpu_s"] / count * images,
            **result,
        },
    )


def index_memory(bench: Bench, name: str) -> None:
    data = bench.data(name)
    for tool, python, code, target in (
        ("turboyolo", sys.executable, INDEX_TURBOYOLO, data),
        ("ultralytics", bench.ultra, INDEX_ULTRA, data.parent / "data.yaml"),
    ):
        done = subprocess.run(
            [python, "-c", code, str(target)], env=bench.env(tool), capture_output=True, text=True
        )
        said = [line for line in done.stdout.splitlines() if line.startswith("SCALE ")]
        if not said:
            bench.save(f"{name}-{tool}-index", {"set": name, "tool": tool, "error": done.stderr[-3000:]})
            continue
        result = json.loads(said[-1][6:])
        bench.save(
            f"{name}-{tool}-index",
            {
                "set": name,
                "tool": tool,
                **result,
                "bytes_per_image": result["bytes"] / max(1, result["images"]),
            },
        )


def evaluate(bench: Bench, name: str) -> None:
    data = bench.data(name)
    runs = bench.root / "runs"
    checkpoint = runs / f"{name}-turboyolo-warm" / "weights" / "last.pt"
    if not checkpoint.exists():
        raise SystemExit(
            f"{checkpoint}: missing; run --parts startup first (its warm turboyolo run saves it)"
        )
    command = [
        sys.executable,
        "-m",
        "turboyolo",
        "test",
        "--weights",
        str(checkpoint),
        "--data",
        str(data),
        "--img-size",
        str(IMG_SIZE),
        "--device",
        "cpu",
    ]
    result = measured(command, bench.env("turboyolo"), bench.root / f"{name}-turboyolo-eval.log")
    found = r"\((\d+) detections on (\d+) images\)"
    said = [m for line in result["log_tail"] for m in re.findall(found, line)]
    if said:
        result["detections"], result["images"] = (int(v) for v in said[-1])
    bench.save(
        f"{name}-turboyolo-eval",
        {
            "set": name,
            "tool": "turboyolo",
            "model": "the 2-step checkpoint",
            "command": "turboyolo " + " ".join(command[3:]),
            **result,
        },
    )
    command = [bench.ultra, "-c", ULTRA_VAL, str(data.parent / "data.yaml"), str(IMG_SIZE), str(runs)]
    result = measured(command, bench.env("ultralytics"), bench.root / f"{name}-ultralytics-eval.log")
    said = [line for line in result["log_tail"] if line.startswith("SCALE ")]
    extra = json.loads(said[-1][6:]) if said else {}
    bench.save(
        f"{name}-ultralytics-eval",
        {
            "set": name,
            "tool": "ultralytics",
            "model": "untrained yolov3-tiny.yaml",
            "command": f"YOLO('yolov3-tiny.yaml').val(data='data.yaml', imgsz={IMG_SIZE}, device='cpu')",
            **extra,
            **result,
        },
    )


# ---------------------------------------------------------------------------------------------- table


def _pair(result: dict | None, wall: str, cpu: str) -> str:
    if not result or result.get(wall) is None:
        return "n/a"
    return f"{result[wall]:.1f} ({result[cpu]:.1f})"


def _ratio(ty: dict | None, ul: dict | None, wall: str, cpu: str) -> str:
    if not ty or not ul or not ty.get(wall) or not ul.get(wall):
        return "n/a"
    return f"{ty[wall] / ul[wall]:.2f}x ({ty[cpu] / ul[cpu]:.2f}x)"


LOOP_STARTS = ("training on ", "Starting training for")  # the line each tool prints as its loop starts


def _first_batch(result: dict | None) -> dict | None:
    """Wall and CPU seconds from the training loop's start (its line) to the end of the first step."""
    if not result or result.get("first_step_wall_s") is None:
        return None
    start = next((line for line in result["lines"] if any(mark in line["line"] for mark in LOOP_STARTS)),
                 None)
    if start is None:
        return None
    return {"wall_s": result["first_step_wall_s"] - start["wall"],
            "cpu_s": result["first_step_cpu_s"] - start["cpu"]}


def table(out: Path) -> str:
    """Markdown tables (one per set) from the JSONs in ``out``."""
    found = {p.stem: json.loads(p.read_text()) for p in sorted(out.glob("*.json"))}
    text = []
    for name in SETS:
        if not any(key.startswith(name) for key in found):
            continue

        def get(tool: str, part: str, name: str = name) -> dict | None:
            return found.get(f"{name}-{tool}-{part}")

        rows = [f"| {name} | turboyolo | Ultralytics | turboyolo / Ultralytics |", "|---|---|---|---|"]
        made = found.get(f"{name}-generate")
        if made:
            rows.append(f"| the set: {made['train']:,} + {made['val']:,} images, "
                        f"{made['bytes'] / 1e9:.1f} GB, "
                        f"generated in | {made['wall_s']:.0f} ({made['cpu_s']:.0f}) | | |")
        for run in ("cold", "warm"):
            ty, ul = get("turboyolo", f"startup-{run}"), get("ultralytics", f"startup-{run}")
            rows.append(
                f"| first step, {run} | {_pair(ty, 'first_step_wall_s', 'first_step_cpu_s')} | "
                f"{_pair(ul, 'first_step_wall_s', 'first_step_cpu_s')} | "
                f"{_ratio(ty, ul, 'first_step_wall_s', 'first_step_cpu_s')} |"
            )
        for run in ("cold", "warm"):
            ty, ul = (_first_batch(get(tool, f"startup-{run}")) for tool in ("turboyolo", "ultralytics"))
            rows.append(f"| of which from the training loop's start to the first step ({run}; turboyolo's "
                        "loader starts before that line: part of its first batch is made earlier) | "
                        f"{_pair(ty, 'wall_s', 'cpu_s')} | {_pair(ul, 'wall_s', 'cpu_s')} | "
                        f"{_ratio(ty, ul, 'wall_s', 'cpu_s')} |")
        for run, what in (
            ("cold", "scan, cold (both splits)"),
            ("warm", "label index load, warm (both splits)"),
        ):
            ty, ul = get("turboyolo", f"startup-{run}"), get("ultralytics", f"startup-{run}")
            rows.append(
                f"| {what} | {_pair(ty, 'scan_wall_s', 'scan_cpu_s')} | "
                f"{_pair(ul, 'scan_wall_s', 'scan_cpu_s')} | {_ratio(ty, ul, 'scan_wall_s', 'scan_cpu_s')} |"
            )
        for key, what in (
            ("maxrss_main_mb", "max RSS of the main process at the first step, MB"),
            ("tree_pss_peak_mb", "process tree PSS peak until the first step, MB"),
        ):
            cells = []
            for tool in ("turboyolo", "ultralytics"):
                values = [get(tool, f"startup-{run}") for run in ("cold", "warm")]
                cells.append(" / ".join(f"{v[key]:.0f}" if v and v.get(key) else "n/a" for v in values))
            rows.append(f"| {what} (cold / warm) | {cells[0]} | {cells[1]} | |")
        ty, ul = get("turboyolo", "index"), get("ultralytics", "index")
        if ty or ul:
            cells = [
                f"{r['bytes_per_image'] / 1024:.2f} KB/image ({r['bytes'] / 2**20:.0f} MB, "
                f"{r['cpu_s']:.1f} CPU s)"
                if r and "bytes" in r
                else "n/a"
                for r in (ty, ul)
            ]
            rows.append(f"| label index of the train split in memory | {cells[0]} | {cells[1]} | |")
        prep = get("turboyolo", "prepare")
        if prep:
            rows.append(
                f"| `turboyolo prepare` of {prep['images']:,} train images at {IMG_SIZE} | "
                f"{prep['wall_s']:.1f} ({prep['cpu_s']:.1f}), {prep['bytes_written'] / 1e9:.2f} GB; all "
                f"{prep['images_all']:,} images: {prep['estimate_all_bytes'] / 1e9:.1f} GB estimated, "
                f"~{prep['projected_all_cpu_s']:.0f} CPU s projected | not run (no such step by default) | |"
            )
        ty, ul = get("turboyolo", "eval"), get("ultralytics", "eval")
        if ty or ul:
            rows.append(
                f"| evaluation of the val split at {IMG_SIZE}, untrained model | "
                f"{_pair(ty, 'wall_s', 'cpu_s')} | {_pair(ul, 'wall_s', 'cpu_s')} | "
                f"{_ratio(ty, ul, 'wall_s', 'cpu_s')} |"
            )
            cells = [f"{r['detections']:,}" if r and "detections" in r else "n/a" for r in (ty, ul)]
            rows.append(f"| detections it scored (conf >= 0.001) | {cells[0]} | {cells[1]} | |")
            cells = [
                f"{r['tree_pss_peak_mb']:.0f} / {r['maxrss_largest_mb']:.0f}" if r else "n/a"
                for r in (ty, ul)
            ]
            rows.append(f"| evaluation memory: tree PSS peak / max RSS, MB | {cells[0]} | {cells[1]} | |")
        shares = [
            r["others_cpu_share"]
            for key, r in found.items()
            if key.startswith(name) and r.get("others_cpu_share") is not None
        ]
        if shares:
            rows.append(
                f"| other processes' share of the machine's CPU during the runs | "
                f"{min(shares):.0%}-{max(shares):.0%} | | |"
            )
        text.append("\n".join(rows))
    return "\n\n".join(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path("/work/scale/bench"), help="sets, runs and logs")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "scale", help="the JSONs")
    parser.add_argument(
        "--ultra-python",
        default=".venv-ultralytics/bin/python",
        help="a Python with ultralytics (and its torch) installed",
    )
    parser.add_argument("--sets", nargs="+", default=list(SETS), choices=list(SETS))
    parser.add_argument(
        "--parts",
        nargs="+",
        default=["startup", "prepare", "index", "eval"],
        choices=["generate", "startup", "prepare", "index", "eval"],
    )
    parser.add_argument(
        "--tools",
        nargs="+",
        default=["turboyolo", "ultralytics"],
        choices=["turboyolo", "ultralytics"],
        help="startup: whose starts to time",
    )
    parser.add_argument("--s1", nargs=2, type=int, default=list(SETS["s1"][1:]), metavar=("TRAIN", "VAL"))
    parser.add_argument("--s2", nargs=2, type=int, default=list(SETS["s2"][1:]), metavar=("TRAIN", "VAL"))
    parser.add_argument(
        "--prepare-images", type=int, default=10_000, help="train images turboyolo prepare builds"
    )
    parser.add_argument("--clean", action="store_true", help="delete the images and runs at the end")
    parser.add_argument("--table", action="store_true", help="only print the table of the JSONs in --out")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the runs' own clean-up (their process groups)
    if args.table:
        print(table(args.out))
        return 0
    bench = Bench(args)
    for name in args.sets:
        bench.data(name)
        if "startup" in args.parts:
            for tool in args.tools:
                for run in ("cold", "warm"):
                    startup(bench, name, tool, run)
        if "prepare" in args.parts:
            prepare(bench, name)
        if "index" in args.parts:
            index_memory(bench, name)
        if "eval" in args.parts and name == "s1":
            evaluate(bench, name)
    if args.clean:
        for name in args.sets:
            remove_images(args.root / name)
        shutil.rmtree(args.root / "runs", ignore_errors=True)
    print(table(args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

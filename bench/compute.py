"""Compute at the hardware's pace: the training step against ultralytics and the matmul peak, detection
against OpenCV DNN and onnxruntime; both tables in one run.

Every time is the CPU time of the process that does the work (``time.process_time``), one intra-op thread
everywhere (torch, OpenCV, onnxruntime): the development machine is a shared 2-core VM, and CPU time of a
single-threaded process is what other load disturbs least. Rounds alternate between the contenders and
the tables report medians and the median of per-round ratios.

Training step (batch 8 at 416, yolov3-tiny, the same in-memory batch): turboyolo's real step
(``train_one_epoch``: forward, loss, backward, clip, SGD, EMA) against ultralytics' own (its
``yolov3-tinyu.yaml`` DetectionModel built from the yaml, no weights: forward, ``v8DetectionLoss``,
backward, clip at 10, SGD, its ``ModelEMA``) in its own venv (``--ultra-python``). GFLOPs of both are
counted by the same ``torch.utils.flop_counter`` (2 per multiply-add; the training rate uses the counted
forward + backward of the batch); peaks are a 2048^3 ``torch.mm`` and a large oneDNN convolution on one
thread (:func:`peak_rates`). Rows "+ huge pages" / "NCHW, no huge pages" turn ``THP_MEM_ALLOC_ENABLE``
on / off.

Detection (batch 1): turboyolo's whole call (``Predictor.predict_arrays``: letterbox, forward, decode,
NMS, boxes in original pixels) with ``--backend torch`` (the default: PyTorch's public modules),
``--backend tuned`` (the tuned CPU kernels of ``turboyolo.model.cpu_kernels``) and ``onnxruntime``,
against OpenCV DNN's forward alone (``readNetFromDarknet``, same cfg and weights) and onnxruntime's
session run alone on turboyolo's ONNX export; where the ``openvino`` package is installed, also
OpenVINO's infer alone on the same export (one stream, latency hint, float32 forced), the runtime measured
as a candidate backend (not one: see docs/PERFORMANCE.md). ``--threads`` sets every runtime's thread count
(default 1).

    .venv/bin/python bench/compute.py                        # both tables (about 10 minutes here)
    .venv/bin/python bench/compute.py train --rounds 3
    .venv/bin/python bench/compute.py detect --archs yolov3-tiny
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# a venv with `pip install ultralytics torch==2.14.1 torchvision==0.29.1` (the first of these that exists;
# `make .venv-ultralytics/.installed` builds the first)
ULTRA_PYTHONS = (".venv-ultralytics/bin/python", "/work/venvs/ultra/bin/python",
                 "/work/venvs/ultra-compute/bin/python")
PHOTO = Path("/usr/share/darknet/data/dog.jpg")

ULTRA_STEP = r"""
import json, sys, time, torch
torch.set_num_threads(1)
from copy import deepcopy
from ultralytics.nn.tasks import DetectionModel
from ultralytics.cfg import get_cfg
from ultralytics.utils.torch_utils import ModelEMA
from torch.utils.flop_counter import FlopCounterMode
size, batch, steps, warmup = (int(v) for v in sys.argv[1:5])
def tensors(out):
    if isinstance(out, torch.Tensor):
        return [out]
    values = out.values() if isinstance(out, dict) else out if isinstance(out, (list, tuple)) else []
    return [t for value in values for t in tensors(value)]
torch.manual_seed(0)
model = DetectionModel("yolov3-tinyu.yaml", nc=80, verbose=False)
model.args = get_cfg()
model.train()
with FlopCounterMode(display=False) as counter:
    with torch.no_grad():
        model.eval()(torch.zeros(1, 3, size, size))
model.train()
gflops = counter.get_total_flops() / 1e9
with FlopCounterMode(display=False) as counter:
    out = model(torch.zeros(batch, 3, size, size))
    sum(t.sum() for t in tensors(out) if t.requires_grad).backward()
model.zero_grad(set_to_none=True)
train_gflops = counter.get_total_flops() / 1e9
params = sum(p.numel() for p in model.parameters())
ema = ModelEMA(model)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9, nesterov=True)
gen = torch.Generator().manual_seed(0)
images = torch.randint(0, 256, (batch, 3, size, size), dtype=torch.uint8, generator=gen)
targets = torch.load(sys.argv[5])  # [N, 6] image, class, cx, cy, w, h (relative)
data = {"img": images, "batch_idx": targets[:, 0], "cls": targets[:, 1:2], "bboxes": targets[:, 2:6]}
times = []
for i in range(warmup + steps):
    begin = time.process_time()
    batch_dict = dict(data, img=data["img"].float() / 255)
    loss, _ = model.loss(batch_dict)
    loss.sum().backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=10.0)
    optimizer.step()
    optimizer.zero_grad()
    ema.update(model)
    times.append(time.process_time() - begin)
print(json.dumps({"times": times[warmup:], "gflops": gflops, "train_gflops": train_gflops, "params": params}))
"""


def targets_for(batch: int):
    import torch

    generator = torch.Generator().manual_seed(0)
    rows = []
    for image in range(batch):
        for _ in range(5):
            cx, cy = (torch.rand(2, generator=generator) * 0.6 + 0.2).tolist()
            w, h = (torch.rand(2, generator=generator) * 0.3 + 0.05).tolist()
            rows.append([image, int(torch.randint(0, 80, (1,), generator=generator)), cx, cy, w, h])
    return torch.tensor(rows, dtype=torch.float32)


def peak_rates(seconds: float = 2.0) -> dict[str, float]:
    """fp32 GFLOP/s on the current thread count (CPU time, best of a few calls): ``torch.mm`` of two
    2048 x 2048 matrices (MKL), and a 3x3 convolution 256 -> 256 channels on 8 x 52 x 52, channels_last
    (oneDNN, what runs the network's convolutions). On AMD CPUs MKL's sgemm stays well below oneDNN."""
    import torch

    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    conv = torch.nn.Conv2d(256, 256, 3, padding=1, bias=False).to(memory_format=torch.channels_last)
    x = torch.randn(8, 256, 52, 52).contiguous(memory_format=torch.channels_last)
    calls = {"matmul": (lambda: torch.mm(a, b), 2 * 2048**3),
             "conv": (lambda: conv(x), 2 * 8 * 52 * 52 * 256 * 256 * 9)}
    rates = {}
    with torch.no_grad():
        for name, (call, flops) in calls.items():
            call()
            best, spent = 0.0, 0.0
            while spent < seconds:
                begin = time.process_time()
                call()
                took = time.process_time() - begin
                spent += took
                best = max(best, flops / took / 1e9)
            rates[name] = best
    return rates


def step_state(model, spec, batch: int, variant: str):
    """(turboyolo's training state for ``model``, whether it is channels-last): SGD from the cfg, the loss,
    EMA; channels-last unless ``variant`` names ``nchw``, compiled when it names ``compile``."""
    import torch

    from turboyolo.train.engine import TrainState
    from turboyolo.train.loss import YoloLoss
    from turboyolo.train.optim import ModelEMA, Schedule, build_optimizer

    channels_last = "nchw" not in variant
    if channels_last:
        model.to(memory_format=torch.channels_last)
    state = TrainState(model=model, optimizer=build_optimizer(model, spec.net),
                       schedule=Schedule.from_net(spec.net), loss_fn=YoloLoss(model.heads),
                       images_per_iteration=batch, subdivisions=1, ema=ModelEMA(model))
    if "compile" in variant:
        state.forward = torch.compile(model)
    return state, channels_last


def ours_worker(size: int, batch: int, steps: int, warmup: int, variant: str) -> dict:
    """turboyolo's real training step (train_one_epoch) on one in-memory batch, with the CLI's defaults on
    the CPU (channels_last, huge pages); variant ``nchw`` turns channels_last off."""
    import turboyolo  # noqa: F401, I001 - first: it sets THP_MEM_ALLOC_ENABLE before torch allocates, as the CLI does
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from turboyolo.model.darknet import Darknet
    from turboyolo.model.zoo import make_spec
    from turboyolo.train.engine import StepOptions, train_one_epoch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    spec = make_spec("yolov3-tiny", num_classes=80, width=size, height=size, batch=batch, subdivisions=1)
    model = Darknet(spec)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model.eval()(torch.zeros(1, 3, size, size))
    gflops = counter.get_total_flops() / 1e9
    model.train()
    with FlopCounterMode(display=False) as counter:
        outputs = model(torch.zeros(batch, 3, size, size))
        sum(out.sum() for out in outputs).backward()
    model.zero_grad(set_to_none=True)
    train_gflops = counter.get_total_flops() / 1e9
    state, channels_last = step_state(model, spec, batch, variant)
    gen = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (batch, 3, size, size), dtype=torch.uint8, generator=gen)
    batches = [(images, targets_for(batch), None)] * (warmup + steps)
    options = StepOptions(channels_last=channels_last, log_interval=10**9, say=lambda _: None)
    times, begin = [], time.process_time()
    for _ in train_one_epoch(state, batches, len(batches), options):
        now = time.process_time()
        times.append(now - begin)
        begin = now
    return {"times": times[warmup:], "gflops": gflops, "train_gflops": train_gflops,
            "params": sum(p.numel() for p in model.parameters())}


def run_json(command: list[str], env: dict | None = None) -> dict:
    out = subprocess.run(command, capture_output=True, text=True, env=env)
    if out.returncode:
        raise RuntimeError(f"{command[:3]} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def train_table(args, work: Path) -> list[str]:
    import os

    import torch

    torch.save(targets_for(args.batch), work / "targets.pt")
    common = [str(args.size), str(args.batch), str(args.steps), str(args.warmup)]
    ultra = [args.ultra_python, "-c", ULTRA_STEP, *common, str(work / "targets.pt")]
    commands = {}
    if args.ultra_python:
        commands["ultralytics"] = (ultra, {"THP_MEM_ALLOC_ENABLE": "0"})
        commands["ultralytics + huge pages"] = (ultra, {"THP_MEM_ALLOC_ENABLE": "1"})
    for variant in args.variants.split(","):
        env = {} if variant != "nchw" else {"THP_MEM_ALLOC_ENABLE": "0"}
        label = {"plain": "turboyolo", "nchw": "turboyolo NCHW, no huge pages"}.get(variant, variant)
        commands[label] = ([sys.executable, __file__, "train-worker", *common, variant], env)
    runs: dict[str, list[dict]] = {name: [] for name in commands}
    peaks = []
    for round_index in range(args.rounds):
        peaks.append(run_json([sys.executable, __file__, "peak"]))
        for name, (command, env) in commands.items():
            runs[name].append(run_json(command, dict(os.environ, **env)))
        print(f"train round {round_index + 1}/{args.rounds}", file=sys.stderr)
    matmul = statistics.median(p["matmul"] for p in peaks)
    conv = statistics.median(p["conv"] for p in peaks)
    lines = [f"Training step, yolov3-tiny, batch {args.batch} at {args.size}, 1 thread, CPU time, "
             f"{args.rounds} rounds x {args.steps} steps after {args.warmup}; fp32 peaks on this thread: "
             f"torch.mm {matmul:.0f} GFLOP/s, oneDNN 3x3 conv {conv:.0f} GFLOP/s", "",
             "| step | params | GFLOPs (forward, 1 image) | ms / iteration | ms / iteration / GFLOP | "
             "x ultralytics (median of rounds) | GFLOP/s (fwd + bwd) | / torch.mm | / conv |",
             "|---|---|---|---|---|---|---|---|---|"]
    base = [statistics.median(r["times"]) / r["gflops"] for r in runs.get("ultralytics", [])]
    for name, results in runs.items():
        ms = 1000 * statistics.median(t for r in results for t in r["times"])
        gflops = results[0]["gflops"]
        per = [statistics.median(r["times"]) / r["gflops"] for r in results]
        ratio = f"{statistics.median(p / b for p, b in zip(per, base)):.2f}" if base else "-"
        rate = results[0]["train_gflops"] / (ms / 1000)
        lines.append(f"| {name} | {results[0]['params'] / 1e6:.2f} M | {gflops:.2f} | {ms:.0f} | "
                     f"{ms / gflops:.0f} | {ratio} | {rate:.0f} | {rate / matmul:.2f} | {rate / conv:.2f} |")
    return lines


def detect_models(arch: str, work: Path) -> tuple[Path, Path, str]:
    """cfg and weights for ``arch`` at 416: the official weights when cached or fetchable, else random
    ones written as a Darknet ``.weights`` file (timing only)."""
    from turboyolo import assets
    from turboyolo.errors import AssetError
    from turboyolo.formats.darknet_cfg import write_cfg
    from turboyolo.model.darknet import Darknet
    from turboyolo.model.loading import init_head_priors, save_darknet_weights
    from turboyolo.model.zoo import make_spec

    spec = make_spec(arch, num_classes=80, width=416, height=416, batch=1, subdivisions=1)
    cfg = write_cfg(spec, work / f"{arch}.cfg")
    try:
        return cfg, assets.fetch(arch, verbose=False), "official"
    except AssetError:  # random weights, with the trainer's objectness priors (few boxes, as trained ones)
        model = Darknet(spec)
        init_head_priors(model, {head.layer_index - 1 for head in model.heads})
        return cfg, save_darknet_weights(model, work / f"{arch}.weights"), "random"


def detect_rows(arch: str, rounds: int, repeats: int, work: Path,
                threads: int = 1) -> tuple[str, dict[str, float], float, str]:
    """Medians (ms) of turboyolo's whole call per backend, OpenCV DNN's forward and onnxruntime's run (and
    OpenVINO's infer, when installed) on turboyolo's export (raw heads), batch 1, ``threads`` threads,
    alternating per round; the seconds the tuned backend's first call took (the kernels' one-time choice); and
    what ``--backend auto`` picks at this thread count."""
    import cv2
    import numpy as np
    import onnxruntime
    import torch

    from turboyolo.data.decode import load_image
    from turboyolo.infer.backends import choose_backend
    from turboyolo.infer.export import ExportOptions, export_onnx
    from turboyolo.infer.predict import Predictor, darknet_letterbox
    from turboyolo.model.loading import build_model
    from turboyolo.model.postprocess import decode, postprocess

    torch.set_num_threads(threads)
    cv2.setNumThreads(threads)
    cfg, weights, source = detect_models(arch, work)
    image = load_image(PHOTO)
    blob = np.ascontiguousarray(darknet_letterbox(image, 416, 416)[0][None].numpy())
    net = cv2.dnn.readNetFromDarknet(str(cfg), str(weights))
    names = net.getUnconnectedOutLayersNames()
    onnx_path = export_onnx(build_model(str(cfg), str(weights)), work / f"{arch}.onnx",
                            ExportOptions(exporter="torchscript"))
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    session = onnxruntime.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
    try:
        import openvino
    except ImportError:
        openvino = None
    if openvino is not None:  # float32 forced: OpenVINO may default to bf16 where the CPU has it
        request = openvino.Core().compile_model(str(onnx_path), "CPU", {
            "INFERENCE_NUM_THREADS": threads, "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY",
            "INFERENCE_PRECISION_HINT": "f32"}).create_infer_request()
    begin = time.perf_counter()
    predictors = {"tuned": Predictor.load(weights, cfg, device="cpu", backend="tuned")}
    predictors["tuned"].predict_arrays([image])
    first_call = time.perf_counter() - begin
    predictors["torch"] = Predictor.load(weights, cfg, device="cpu", backend="torch")
    predictors["onnxruntime"] = Predictor.load(weights, cfg, device="cpu", backend="onnxruntime")
    tuned_runner, torch_runner = predictors["tuned"].runner, predictors["torch"].runner
    batch = torch.from_numpy(blob)
    raw = torch_runner(batch)
    heads = predictors["torch"].model.heads

    def opencv():
        net.setInput(blob)
        net.forward(names)

    calls = {
        "turboyolo whole call, torch (the default: public modules)":
            lambda: predictors["torch"].predict_arrays([image]),
        "turboyolo whole call, tuned (tuned CPU kernels)":
            lambda: predictors["tuned"].predict_arrays([image]),
        "turboyolo whole call, onnxruntime": lambda: predictors["onnxruntime"].predict_arrays([image]),
        "OpenCV DNN forward only": opencv,
        "onnxruntime run only (turboyolo export)": lambda: session.run(None, {"images": blob}),
        **({"OpenVINO infer only (turboyolo export)": lambda: request.infer({0: blob})} if openvino else {}),
        "part: letterbox": lambda: darknet_letterbox(image, 416, 416),
        "part: torch forward, tuned kernels": lambda: tuned_runner(batch),
        "part: torch forward, the default (folded, channels_last, PyTorch's conv)":
            lambda: torch_runner(batch),
        "part: decode + NMS": lambda: postprocess(decode(raw, heads), 0.25, 0.45),
    }
    # one thread: CPU time (what other load on a shared machine disturbs least); more: wall time, since
    # CPU time would also count the runtimes' worker threads spinning between calls
    clock = time.process_time if threads == 1 else time.perf_counter
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            call()
            for _ in range(repeats):
                begin = clock()
                call()
                times[name].append(clock() - begin)
    auto = choose_backend("auto", torch.device("cpu"), torch.float32)
    medians = {name: 1000 * statistics.median(values) for name, values in times.items()}
    return source, medians, first_call, auto


def detect_table(args, work: Path) -> list[str]:
    from importlib.metadata import PackageNotFoundError, version

    def installed(package: str) -> str:
        try:
            return version(package)
        except PackageNotFoundError:
            return "not installed"

    packages = ", ".join(f"{package} {installed(package)}" for package in (
        "torch", "onnxruntime", "openvino", "opencv-python-headless"))
    lines = [f"Detection, batch 1 at 416, {PHOTO.name}, {args.threads} thread(s), "
             f"{'CPU' if args.threads == 1 else 'wall'} time, "
             f"{args.rounds} rounds x {args.repeats} calls", packages, ""]
    for arch in args.archs.split(","):
        source, rows, first_call, auto = detect_rows(arch, args.rounds, args.repeats, work, args.threads)
        opencv, ort = rows["OpenCV DNN forward only"], rows["onnxruntime run only (turboyolo export)"]
        lines += [f"{arch} ({source} weights)", "", "| | ms | x OpenCV forward | x onnxruntime run |",
                  "|---|---|---|---|"]
        lines += [f"| {name} | {ms:.1f} | {ms / opencv:.2f} | {ms / ort:.2f} |" for name, ms in rows.items()]
        lines += ["", f"tuned's first call (load, the kernels' choice, one image): {first_call:.1f} s wall; "
                  f"`--backend auto` runs {auto} here", ""]
    return lines


def gpu_section(seconds: float = 8.0) -> dict:
    """The CUDA side (bench/gpu.sh): yolov3 416 batch 32 training step under bf16 autocast, NCHW vs
    channels_last vs channels_last + torch.compile; detection forward batch 1 and 8, plain model vs the
    inference copy (BN folded) vs the copy in channels_last. Wall time per call after CUDA syncs. Without
    CUDA (a dry run of the code) it runs yolov3-tiny on the CPU at 64 px, batch 2, briefly."""
    import turboyolo  # noqa: F401, I001 - sets THP_MEM_ALLOC_ENABLE first, as the CLI does
    import torch

    from turboyolo.model.darknet import Darknet
    from turboyolo.model.zoo import make_spec
    from turboyolo.train.engine import StepOptions, train_one_epoch

    cuda = torch.cuda.is_available()
    device, size, batch = (torch.device("cuda"), 416, 32) if cuda else (torch.device("cpu"), 64, 2)
    seconds = seconds if cuda else 0.2
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    arch = "yolov3" if cuda else "yolov3-tiny"
    spec = make_spec(arch, num_classes=80, width=size, height=size, batch=batch, subdivisions=1)
    result: dict = {"device": torch.cuda.get_device_name() if cuda else "cpu (dry run)"}

    def timed(call, warmup: int = 3) -> float:
        for _ in range(warmup):
            call()
        sync()
        count, begin = 0, time.perf_counter()
        while time.perf_counter() - begin < seconds:
            call()
            count += 1
        sync()
        return 1000 * (time.perf_counter() - begin) / count

    images = torch.randint(0, 256, (batch, 3, size, size), dtype=torch.uint8)
    for variant in ("nchw", "channels_last", "channels_last+compile")[: 3 if cuda else 2]:
        torch.manual_seed(0)
        model = Darknet(spec).to(device)
        state, channels_last = step_state(model, spec, batch, variant)
        options = StepOptions(device=device, amp_dtype=torch.bfloat16, channels_last=channels_last,
                              log_interval=10**9, say=lambda _: None)
        data = iter(lambda: (images, targets_for(batch), None), None)
        steps = train_one_epoch(state, data, 10**9, options)
        begin = time.perf_counter()
        next(steps)
        result[f"train first step s, {variant}"] = time.perf_counter() - begin
        result[f"train ms/step, {variant}"] = timed(lambda steps=steps: next(steps))
    model = Darknet(spec).to(device).eval()
    copies = {"plain": model, "folded": model.inference_copy(),
              "folded channels_last": model.inference_copy(channels_last=True)}
    for count in (1, 8):
        x = torch.rand(count, 3, size, size, device=device)
        for name, net in copies.items():
            for dtype in (torch.float32, torch.float16 if cuda else torch.bfloat16):
                net = net.to(dtype)
                inputs = x.to(dtype)
                if "channels_last" in name:
                    inputs = inputs.contiguous(memory_format=torch.channels_last)
                with torch.inference_mode():
                    ms = timed(lambda net=net, inputs=inputs: net(inputs))
                result[f"detect forward ms, batch {count}, {name}, {str(dtype)[6:]}"] = ms
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", nargs="?", default="all",
                        choices=("all", "train", "detect", "peak", "train-worker", "gpu"))
    parser.add_argument("worker_args", nargs="*")
    parser.add_argument("--ultra-python", default=next((p for p in ULTRA_PYTHONS if Path(p).is_file()), ""),
                        help="Python of a venv with ultralytics (empty: no ultralytics rows)")
    parser.add_argument("--size", type=int, default=416)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", default="plain,nchw", help="turboyolo rows: plain (the defaults), "
                        "nchw (channels_last and huge pages off)")
    parser.add_argument("--archs", default="yolov3-tiny,yolov3")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="detection: torch / OpenCV / onnxruntime "
                        "threads (the training step always runs one)")
    args = parser.parse_args()
    if args.what == "peak":
        import torch

        torch.set_num_threads(1)
        print(json.dumps(peak_rates()))
        return 0
    if args.what == "gpu":
        print(json.dumps(gpu_section(), indent=1))
        return 0
    if args.what == "train-worker":
        size, batch, steps, warmup, variant = args.worker_args
        print(json.dumps(ours_worker(int(size), int(batch), int(steps), int(warmup), variant)))
        return 0
    print(f"machine: {platform.processor() or platform.machine()}, {platform.python_version()}")
    with tempfile.TemporaryDirectory(prefix="compute-") as folder:  # the models (~500 MB), then gone
        if args.what in ("all", "detect"):
            print("\n".join(detect_table(args, Path(folder))), flush=True)
        if args.what in ("all", "train"):
            print("\n".join(train_table(args, Path(folder))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Per layer, the CPU kernels the tuned inference copy chooses between (``turboyolo.model.cpu_kernels``):
each 3 x 3 / 1 x 1 convolution of a network at 416, batch 1, timed through oneDNN (packed, activation
fused), NNPACK's Winograd with its kernel transformed once and with it transformed per call, and PyTorch's
``conv2d`` + activation; then the whole network tuned with and without precomputed Winograd kernels
(same choices, alternating rounds), and the bytes the precomputed kernels take.

    .venv/bin/python bench/cpu_kernels.py --arch yolov3-tiny            # one thread, CPU time
    .venv/bin/python bench/cpu_kernels.py --arch yolov3 --threads 2     # wall time above one thread
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch

from turboyolo.model import cpu_kernels
from turboyolo.model.cpu_kernels import TunedConv, tune_for_cpu
from turboyolo.model.darknet import Darknet
from turboyolo.model.zoo import make_spec


def timed(call, clock, repeats: int) -> float:
    call()
    best = float("inf")
    for _ in range(repeats):
        begin = clock()
        call()
        best = min(best, clock() - begin)
    return 1000 * best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="yolov3-tiny")
    parser.add_argument("--size", type=int, default=416)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    clock = time.process_time if args.threads == 1 else time.perf_counter
    model = Darknet(make_spec(args.arch, num_classes=80, width=args.size, height=args.size, batch=1,
                              subdivisions=1))
    x = torch.rand(1, 3, args.size, args.size).contiguous(memory_format=torch.channels_last)
    print(f"machine: {platform.processor() or platform.machine()}, torch {torch.__version__}, "
          f"{args.arch} at {args.size}, batch 1, {args.threads} thread(s), "
          f"{'CPU' if args.threads == 1 else 'wall'} time, best of {args.repeats} (ms)\n")

    # every layer's input, from one plain forward
    plain = model.inference_copy(channels_last=True)
    inputs: dict[int, torch.Tensor] = {}
    hooks = [layer.register_forward_pre_hook(lambda _m, a, k=k: inputs.__setitem__(k, a[0]))
             for k, layer in enumerate(plain.layers) if hasattr(layer, "conv")]
    with torch.inference_mode():
        plain(x)
    for hook in hooks:
        hook.remove()

    print("| layer | input | filters x size | direct | oneDNN packed + fused | Winograd, kernel once | "
          "Winograd, kernel per call | transformed kernel MB |")
    print("|---|---|---|---|---|---|---|---|")
    seen = set()
    for index, block in enumerate(plain.layers):
        if index not in inputs:
            continue
        sample = inputs[index]
        key = (tuple(sample.shape), tuple(block.conv.weight.shape), block.conv.stride)
        if key in seen:
            continue
        seen.add(key)
        row, megabytes = [], None
        for way, budget in (("direct", 0), ("onednn", 0), ("winograd", cpu_kernels.PRECOMPUTED_BYTES),
                            ("winograd", 0)):
            layer = TunedConv(block, allowed=(way,), tuning=cpu_kernels.Tuning(budget=budget))
            with torch.inference_mode():
                layer(sample)
                row.append(timed(lambda layer=layer, sample=sample: layer(sample), clock, args.repeats)
                           if layer.way == way else None)
                transformed = layer.transformed.nbytes / 2**20 if layer.transformed is not None else None
            if way == "winograd" and budget:
                megabytes = transformed
        cells = [f"{ms:.2f}" if ms is not None else "-" for ms in row]
        size = f"{block.conv.out_channels} x {block.conv.kernel_size[0]}/{block.conv.stride[0]}"
        shape = "x".join(str(v) for v in sample.shape[1:])
        held_mb = f"{megabytes:.1f}" if megabytes else "-"
        print(f"| {index} | {shape} | {size} | {' | '.join(cells)} | {held_mb} |")

    # the whole network: tuned as it chooses, then the same choices without precomputed kernels
    tuned = tune_for_cpu(model.inference_copy(channels_last=True))
    with torch.inference_mode():
        tuned(x)
    choices = dict(tuned.layers[0].tuning.choices)
    per_call = model.inference_copy(channels_last=True)
    tune_for_cpu(per_call)
    first = next(layer for layer in per_call.layers if isinstance(layer, TunedConv))
    first.tuning.budget = 0
    first.tuning.choices.update(choices)
    with torch.inference_mode():
        per_call(x)
    ways = [layer.way for layer in tuned.layers if isinstance(layer, TunedConv)]
    held = sum(layer.transformed.nbytes for layer in tuned.layers
               if isinstance(layer, TunedConv) and layer.transformed is not None)
    times: dict[str, list[float]] = {"untuned (plain copy)": [], "tuned": [],
                                     "tuned, Winograd kernels per call": []}
    with torch.inference_mode():
        for _ in range(args.rounds):
            for name, net in zip(times, (plain, tuned, per_call)):
                times[name].append(timed(lambda net=net: net(x), clock, 1))
    print(f"\nchoices: {ways.count('onednn')} oneDNN, {ways.count('winograd')} Winograd, "
          f"{ways.count('direct')} direct; precomputed Winograd kernels {held / 2**20:.0f} MB\n")
    print("| whole network | ms (median of rounds) |")
    print("|---|---|")
    for name, values in times.items():
        print(f"| {name} | {statistics.median(values):.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

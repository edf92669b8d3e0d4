"""PyTorch-YOLOv3's training loop as shipped (``pytorchyolo.train.run``), timed from outside.

Runs in PyTorch-YOLOv3's own environment (numpy 1.26, imgaug 0.4.0, pytorchyolo 1.8.0: see
bench/gpu_prepare.sh). Nothing in its loop is changed; the script only observes it:
- ``compute_loss`` is wrapped to count images and time (the loop calls it once per batch);
- the ``tqdm.tqdm`` around its DataLoader is wrapped to time each wait for the next batch (data-wait);
- NVML is sampled in a thread (GPU utilisation).
After ``--seconds`` of measuring (following ``--warmup`` seconds) it writes the JSON and exits.
Pillow >= 10 dropped ``Image.ANTIALIAS``, which imgaug 0.4.0 still names: it is aliased to LANCZOS.

Usage: ``python bench/pyyolo_loop.py OUT.json --seconds S --warmup W -- <pytorchyolo train args>``
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time


def main() -> int:
    out, rest = sys.argv[1], sys.argv[2:]
    split = rest.index("--")
    ours, theirs = rest[:split], rest[split + 1:]
    seconds = float(ours[ours.index("--seconds") + 1])
    warmup = float(ours[ours.index("--warmup") + 1])

    from PIL import Image

    if "ANTIALIAS" not in dir(Image):
        Image.ANTIALIAS = Image.LANCZOS
    try:
        import tensorboard  # noqa: F401
    except ImportError:  # only where PyTorch-YOLOv3's env lacks it (the dry run): its logger becomes a no-op
        import types

        stub = types.ModuleType("pytorchyolo.utils.logger")
        stub.Logger = type("Logger", (), {"__init__": lambda self, *a, **k: None,
                                          "scalar_summary": lambda self, *a, **k: None,
                                          "list_of_scalars_summary": lambda self, *a, **k: None})
        sys.modules["pytorchyolo.utils.logger"] = stub
        print("note: tensorboard missing: PyTorch-YOLOv3's TensorBoard logger is a no-op", flush=True)
    import pytorchyolo.train as train
    import tqdm as tqdm_module

    state = {"start": None, "images": 0, "wait": 0.0, "t0": time.perf_counter(), "util": []}
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)

        def poll():
            while True:
                time.sleep(0.2)
                if state["start"] is not None:
                    state["util"].append(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)

        threading.Thread(target=poll, daemon=True).start()
    except Exception:  # noqa: BLE001 - no NVML: utilisation not reported
        pass

    def finish():
        import torch

        if torch.cuda.is_available():
            torch.cuda.synchronize()
        wall = time.perf_counter() - state["start"]
        util = state["util"]
        result = {"what": "PyTorch-YOLOv3 1.8.0 train loop as shipped (fp32)",
                  "images_per_s": state["images"] / wall, "data_wait": state["wait"] / wall,
                  "gpu_util": sum(util) / len(util) if util else None, "images": state["images"],
                  "seconds": wall}
        with open(out, "w") as handle_out:
            json.dump(result, handle_out)
        print(json.dumps(result), flush=True)
        os._exit(0)

    original_loss = train.compute_loss

    def counting_loss(outputs, targets, model):
        result = original_loss(outputs, targets, model)
        now = time.perf_counter()
        if state["start"] is None and now - state["t0"] >= warmup:
            import torch

            if torch.cuda.is_available():
                torch.cuda.synchronize()
            state["start"], state["wait"] = time.perf_counter(), 0.0
        elif state["start"] is not None:
            state["images"] += outputs[0].shape[0]
            if now - state["start"] >= seconds:
                finish()
        return result

    class TimedTqdm:
        def __init__(self, iterable, *args, **kwargs):
            self.bar = tqdm_module.tqdm(iterable, *args, mininterval=5, **kwargs)

        def __iter__(self):
            iterator = iter(self.bar)
            while True:
                before = time.perf_counter()
                try:
                    item = next(iterator)
                except StopIteration:
                    return
                if state["start"] is not None:
                    state["wait"] += time.perf_counter() - before
                yield item

        def __len__(self):
            return len(self.bar)

    train.compute_loss = counting_loss
    train.tqdm = type("tqdm_shim", (), {"tqdm": TimedTqdm})
    sys.argv = ["pytorchyolo-train", *theirs]
    train.run()
    if state["start"] is not None:
        finish()
    return 1


if __name__ == "__main__":
    sys.exit(main())

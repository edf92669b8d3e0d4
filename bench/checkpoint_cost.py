"""Checkpoint cost for YOLOv3 (62 M parameters): background writer vs a blocking ``torch.save``.

The state saved is what ``turboyolo train`` saves: model weights and BN statistics, EMA weights and
statistics, the SGD momentum buffers, iteration counters, RNG states, config and cfg text (about
3 x 62 M floats = 0.75 GB). A "step" is a stand-in for a training step with a fixed CPU cost (matrix
products on a separate tensor, ``--step-ms``) so that the numbers measure the checkpoint, not the
model's speed on this CPU; a real step also does not touch the saved tensors until the copy is done.

Reported per save: the time the loop blocks (the copy into the reused buffers for the background
writer; the whole save for ``torch.save``), and the extra wall time of N steps with a save every
``--every`` steps over N steps without saves.

    python bench/checkpoint_cost.py --out /tmp/ckpt-bench
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path


def build_state():
    from turboyolo.model.darknet import Darknet
    from turboyolo.model.zoo import make_spec
    from turboyolo.train.checkpoint import FORMAT, VERSION, rng_state
    from turboyolo.train.optim import ModelEMA, build_optimizer

    spec = make_spec("yolov3", num_classes=80)
    model = Darknet(spec)
    optimizer = build_optimizer(model, spec.net)
    loss = sum(p.sum() for p in model.parameters())  # one cheap backward to create momentum buffers
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    ema = ModelEMA(model)
    params = sum(p.numel() for p in model.parameters())

    def state():
        return {"format": FORMAT, "version": VERSION, "model": model.state_dict(), "ema": ema.state_dict(),
                "ema_updates": 1, "optimizer": optimizer.state_dict(), "scaler": {}, "iteration": 1,
                "epoch": 0, "epoch_batches": 1, "seen": 64, "best_fitness": 0.0, "rng": rng_state(),
                "config": {"cfg": "yolov3.cfg"}, "cfg_text": "[net]\n"}

    return state, params


def fake_step(work, ms: float):
    import torch

    begin = time.perf_counter()
    while (time.perf_counter() - begin) * 1000 < ms:
        torch.mm(work, work)


def run(mode: str, state, out: Path, steps: int, every: int, step_ms: float) -> tuple[float, list[float]]:
    import torch

    from turboyolo.train.checkpoint import CheckpointWriter, atomic_save

    work = torch.rand(256, 256)
    writer = CheckpointWriter(mode=mode) if mode in ("fork", "thread") else None
    blocked, waits = [], []
    begin = time.perf_counter()
    for step in range(1, steps + 1):
        fake_step(work, step_ms)
        if mode != "none" and step % every == 0:
            if writer is not None:
                t_wait = time.perf_counter()
                writer.wait()  # the previous write still running (only when saves come faster than writes)
                waits.append(time.perf_counter() - t_wait)
            t0 = time.perf_counter()
            if writer is not None:
                writer.save(state(), [out / "last.pt"])
            else:
                atomic_save(state(), out / "last.pt")
            blocked.append(time.perf_counter() - t0)
    if writer is not None:
        writer.close()  # the last write must be on disk before the run counts as done
    run.waits = waits
    return time.perf_counter() - begin, blocked


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="folder for the checkpoint files (default: a temp dir)")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--every", type=int, default=20)
    parser.add_argument("--step-ms", type=float, default=250.0)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    out = Path(args.out or tempfile.mkdtemp(prefix="ckpt-bench-"))
    out.mkdir(parents=True, exist_ok=True)
    state, params = build_state()
    base, _ = run("none", state, out, args.steps, args.every, args.step_ms)
    size_gb = None
    rows = []
    for mode in ("fork", "thread", "blocking"):
        wall, blocked = run(mode, state, out, args.steps, args.every, args.step_ms)
        size_gb = (out / "last.pt").stat().st_size / 1e9
        saves = len(blocked)
        waited = max(getattr(run, "waits", [0.0]) or [0.0]) if mode != "blocking" else 0.0
        rows.append((mode, statistics.median(blocked), max(blocked), (wall - base) / saves, waited))
        torch.load(out / "last.pt", map_location="cpu", weights_only=True)  # loads without running code
    print(f"YOLOv3 {params / 1e6:.1f} M parameters; checkpoint {size_gb:.2f} GB (model + EMA + SGD momentum "
          f"+ counters + RNG + config); {args.steps} steps of {args.step_ms:.0f} ms, "
          f"a save every {args.every}")
    print(f"{'writer':<12} {'blocks/save (median)':>21} {'max':>7} {'extra wall/save':>16} "
          f"{'waited for previous write (max)':>32}")
    for mode, median, worst, extra, waited in rows:
        print(f"{mode:<12} {median:20.3f}s {worst:6.3f}s {extra:15.3f}s {waited:31.3f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""turboyolo's trainer run on the Darknet training fixture, and its comparison with Darknet's steps (for
tests/train/test_darknet_training.py).

The fixture (tests/fixtures/darknet_train, README.md there) holds what ``darknet detector train`` printed
for 10 iterations of yolov3-tiny on one fixed batch and its weights after 1 and 10 iterations at sampled
elements. :func:`run_steps` makes the same iterations with ``turboyolo train``'s own pieces (the cfg through
``load_cfg`` / ``apply_overrides``, the ``darknet`` recipe through ``resolve`` and ``make_plan``, the model,
optimizer and loss from ``build_state``, the step from ``train_one_epoch``), only the loader replaced by
the fixture's one image: a 256 x 256 PNG at a 256 x 256 network input, which turboyolo's letterbox leaves
unchanged as Darknet's ``place_image`` does.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

FIXTURE = Path(__file__).parent / "fixtures" / "darknet_train"
REGION_KEYS = ("avg_iou", "class", "obj", "no_obj", "recall50", "recall75")


@dataclass
class Steps:
    """What turboyolo's trainer did: weights after some iterations, and per iteration (before its update)
    each head's figures as Darknet prints them and Darknet's loss."""

    weights: dict[int, np.ndarray] = field(default_factory=dict)  # iteration -> flat float32 .weights body
    statistics: list[list[dict]] = field(default_factory=list)  # [iteration][head]
    losses: list[float] = field(default_factory=list)
    heads: tuple[int, ...] = ()  # layer index of each head


def load_reference() -> tuple[dict, dict[str, np.ndarray]]:
    """The fixture: Darknet's parsed printout and its sampled weights (``darknet_updates.npz``)."""
    printout = json.loads((FIXTURE / "darknet_train.json").read_text())
    with np.load(FIXTURE / "darknet_updates.npz") as data:
        updates = {key: data[key] for key in data.files}
    return printout, updates


def fixture_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """The fixture's image as the loader gives it (uint8 ``[1, 3, 256, 256]``) and its targets ``[4, 6]``."""
    from turboyolo.data.decode import load_image

    image = torch.from_numpy(load_image(FIXTURE / "images" / "sym.png").copy())
    labels = np.loadtxt(FIXTURE / "labels" / "sym.txt", ndmin=2)
    targets = np.concatenate([np.zeros((len(labels), 1)), labels], 1)
    return image.permute(2, 0, 1)[None].contiguous(), torch.tensor(targets, dtype=torch.float32)


def run_steps(weights: str | Path, iterations: int, keep: tuple[int, ...] = (), **options) -> Steps:
    """``iterations`` of ``turboyolo train --config darknet --cfg train.cfg --weights WEIGHTS`` (``options``:
    flags over the recipe, e.g. ``bn_train="torch"``) on the fixture's batch, on the CPU. ``keep``: the
    iterations after which to keep the weights (the last always)."""
    from turboyolo.devices import amp_dtype_for
    from turboyolo.train.config import TrainConfig, read_config
    from turboyolo.train.distributed import DistEnv
    from turboyolo.train.engine import StepOptions, train_one_epoch
    from turboyolo.train.plan import make_plan
    from turboyolo.train.resolve import resolve_options
    from turboyolo.train.setup import build_state, load_cfg

    def quiet(*_):
        return None

    config = TrainConfig.build(str(FIXTURE / "train.cfg"), "unused.data", str(weights),
                               base=read_config("darknet"), device="cpu", **options)
    resolved = resolve_options(config, load_cfg(config, quiet), quiet)
    config, spec = resolved.config, resolved.spec
    device = torch.device("cpu")
    resolved = resolved.with_plan(make_plan(config, spec.net, iterations, 1, iterations))
    state = build_state(resolved, DistEnv(), device, None, quiet)
    net = spec.net
    images, targets = fixture_batch()
    steps = Steps(heads=tuple(head.layer_index for head in state.model.heads))

    def batches():
        for iteration in range(1, iterations + 1):
            if iteration - 1 in keep:
                steps.weights[iteration - 1] = state.model.flat_weights()
            # Darknet prints each mini-batch's figures from its forward pass; the iteration's mini-batches
            # are the same image under the same weights (Darknet prints them twice, equal), so one forward
            # of a copy (its batch-norm statistics move, the model's do not) stands for them.
            probe = copy.deepcopy(state.model).train()
            with torch.no_grad():
                outputs = probe(images.float() / 255.0)
            figures = state.loss_fn.darknet_statistics(outputs, targets, (net.height, net.width))
            steps.statistics.append(figures)
            steps.losses.append(sum(f["cost"] for f in figures) / len(figures) / images.shape[0])
            for _ in range(net.subdivisions):
                yield images, targets, None

    options = StepOptions(device=device, amp_dtype=amp_dtype_for(device, config.runtime.amp),
                          clip_norm=config.runtime.clip_norm, log_interval=1)
    for _ in train_one_epoch(state, batches(), iterations * net.subdivisions, options):
        pass
    steps.weights[iterations] = state.model.flat_weights()
    return steps


def tensor_layout(cfg: Path = FIXTURE / "train.cfg") -> list[tuple[str, int]]:
    """(name, size) of each tensor of the ``.weights`` body in file order, as the fixture names them."""
    from turboyolo.formats.darknet_cfg import parse_cfg
    from turboyolo.model.darknet import Darknet

    names = []
    for index, tensors in Darknet(parse_cfg(cfg)).darknet_tensors():
        kinds = ("bias", "scale", "mean", "var", "weight") if len(tensors) == 5 else ("bias", "weight")
        names += [(f"L{index:02d}.{kind}", t.numel()) for kind, t in zip(kinds, tensors)]
    return names


def update_errors(ours: np.ndarray, w0: np.ndarray, darknet: dict[str, np.ndarray], run: int,
                  full: np.ndarray | None = None) -> dict[str, float]:
    """Per tensor, max over its elements of |our update - Darknet's| / the tensor's largest |Darknet update|,
    less one float32 spacing of the weight per element (both programs store float32 weights, so an update is
    only resolved to that; it is below 1e-3 of the scale for all but a few small tensors).

    ``ours``, ``w0``: flat float32 ``.weights`` bodies (after ``run`` iterations, and the start);
    ``darknet``: the fixture's arrays; ``full``: Darknet's whole body after ``run`` iterations, to compare
    every element instead of the fixture's sample.
    """
    errors, offset = {}, 0
    for name, size in tensor_layout():
        start = w0[offset:offset + size]
        if full is not None:
            index = np.arange(size)
            theirs = full[offset:offset + size]
            scale = np.abs(theirs.astype(np.float64) - start).max()
        else:
            index = darknet[f"{run}/{name}/index"]
            theirs = darknet[f"{run}/{name}/value"]
            scale = float(darknet[f"{run}/{name}/scale"])
        base = start[index].astype(np.float64)
        mine = ours[offset:offset + size][index]
        spacing = np.spacing(np.maximum(np.abs(start[index]), np.abs(theirs))).astype(np.float64)
        gap = np.abs((mine.astype(np.float64) - base) - (theirs.astype(np.float64) - base)) - spacing
        errors[name] = float(max(gap.max(), 0.0) / scale) if scale > 0 else 0.0
        offset += size
    return errors

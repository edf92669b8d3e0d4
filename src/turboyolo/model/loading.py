"""Weights into a :class:`Darknet`: Darknet ``.weights`` or a turboyolo checkpoint, full or by shape.

Checkpoints are read with ``torch.load(weights_only=True)`` only: a file that needs anything else (a
pickled class, a function) is refused with what it is, never with advice to load it unsafely.
:func:`read_training_checkpoint` also checks that the file holds what ``--resume`` needs.
"""

from __future__ import annotations

import functools
import math
import re
import warnings
from pathlib import Path

import torch

from turboyolo import assets
from turboyolo.errors import ConfigError, WeightsError
from turboyolo.formats.darknet_cfg import ModelSpec, YoloSpec, parse_cfg, parse_cfg_text
from turboyolo.formats.darknet_weights import (
    WeightsHeader,
    cutoff_from_name,
    read_weights,
    weights_body_floats,
    write_weights,
)
from turboyolo.model.darknet import Darknet
from turboyolo.model.zoo import ARCHITECTURES, make_spec, with_classes

CHECKPOINT_SUFFIXES = (".pt", ".pth", ".ckpt")
# What --resume reads from a checkpoint (turboyolo.train.checkpoint writes these and more), with their types.
TRAINING_KEYS: dict[str, type | tuple[type, ...]] = {
    "model": dict, "optimizer": dict, "config": dict, "cfg_text": str, "iteration": int, "epoch": int,
    "epoch_batches": int, "seen": int,
}
# Modules a refused pickle names -> what made the file (said in the refusal, so the user knows what it is).
_PICKLE_ORIGINS = (
    ("ultralytics.", "an Ultralytics YOLOv8+ model object"),
    ("models.", "a YOLOv5-style model object from its code's models package"),
    ("pytorchyolo.", "a PyTorch-YOLOv3 model object"),
    ("numpy.", "numpy arrays or scalars"),
    ("posix.", "a call into the operating system that would run a command"),
    ("os.", "a call into the operating system that would run a command"),
    ("subprocess.", "a call that starts a program"),
    ("io.", "a call that opens files"),
    ("builtins.", "a Python built-in call that could run code"),
)


def is_checkpoint(path: str | Path) -> bool:
    return Path(path).suffix.lower() in CHECKPOINT_SUFFIXES


def load_darknet_weights(model: Darknet, path: str | Path, cutoff: int | None = None) -> WeightsHeader:
    """Load a ``.weights`` file; a ``.conv.N`` name (or ``cutoff``) loads only the first N layers."""
    header, flat = read_weights(path)
    cutoff = cutoff if cutoff is not None else cutoff_from_name(path)
    try:
        model.load_flat_weights(flat, cutoff=cutoff, source=str(path))
    except WeightsError as err:
        known = known_network(flat.size) if cutoff is None else None
        if known is None:
            raise
        need = sum(t.numel() for _, tensors in model.darknet_tensors() for t in tensors)
        raise WeightsError(f"{path}: these are the weights of another network: a complete {known[0]} with "
                           f"{known[1]} classes ({flat.size} floats), not of this cfg (it needs {need}). "
                           f"Check that the .cfg (classes, filters) matches the weights: these fit `--cfg "
                           f"{known[0]}` with {known[1]} classes") from err
    return header


def save_darknet_weights(model: Darknet, path: str | Path, seen: int = 0, cutoff: int | None = None) -> Path:
    return write_weights(path, WeightsHeader(0, 2, 0, seen), model.flat_weights(cutoff))


def read_checkpoint(path: str | Path) -> dict:
    """A PyTorch checkpoint dict, always with ``weights_only=True`` (no code runs from the file).

    Raises:
        WeightsError: naming the file and what it is when it is missing, damaged, not a dict, or
            refused (it needs Python objects other than tensors, numbers, strings, lists and dicts).
    """
    path = Path(path)
    try:
        with warnings.catch_warnings():  # e.g. "Detected pickle protocol 4": noise before our refusal
            warnings.simplefilter("ignore")
            state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise WeightsError(f"{path}: no such checkpoint") from None
    except IsADirectoryError:
        raise WeightsError(f"{path}: a folder, not a checkpoint file") from None
    except Exception as err:  # noqa: BLE001 - torch raises many types for a bad file
        raise WeightsError(_unreadable_checkpoint(path, err)) from None
    if not isinstance(state, dict):
        raise WeightsError(f"{path}: not a turboyolo checkpoint: it holds a {type(state).__name__}, not a "
                           "dict of tensors; pass a checkpoint written by turboyolo or a Darknet .weights "
                           "file")
    return state


def _unreadable_checkpoint(path: Path, err: Exception) -> str:
    """Why ``torch.load(weights_only=True)`` failed, in our words. PyTorch's own message advises retrying
    with ``weights_only=False``, which runs whatever the file holds: that text is never passed on."""
    text = str(err)
    try:
        with open(path, "rb") as handle:
            head = handle.read(4)
    except OSError:
        head = b""
    if path.suffix.lower() == ".weights" or (head and not head.startswith((b"PK", b"\x80"))):
        kind = "a Darknet .weights file" if path.suffix.lower() == ".weights" else "not a PyTorch file"
        return (f"{path}: not a turboyolo checkpoint ({kind}); pass a .pt checkpoint written by turboyolo, "
                "or give Darknet .weights with --weights")
    if isinstance(err, EOFError) or not head:
        return f"{path}: empty or cut-off file, not a usable checkpoint; copy it again or use another one"
    if "PytorchStreamReader" in text or "zip archive" in text:
        return (f"{path}: damaged or truncated checkpoint (its zip archive is incomplete: an interrupted "
                "save or a partial copy); use another checkpoint (weights/last.pt or best.pt) or copy it "
                "again")
    if "weights_only" in text or "Weights only" in text or type(err).__name__ == "UnpicklingError":
        found = re.search(r"GLOBAL ([\w.]+)", text)
        if found:
            name = found.group(1)
            origin = next((what for prefix, what in _PICKLE_ORIGINS if name.startswith(prefix)), None)
            what = f"the Python object {name}" + (f" ({origin})" if origin else "")
        else:
            what = "Python objects other than tensors, numbers and strings"
        return (f"{path}: refused: this file is a pickle that needs {what} to load; loading it would let "
                "the file run code. turboyolo reads only weights-only checkpoints (tensors, numbers, "
                "strings); use a checkpoint turboyolo wrote or Darknet .weights. For a model from another "
                "tool, export its state_dict (tensors only) with that tool")
    return f"{path}: not a readable PyTorch checkpoint ({type(err).__name__}); use another file"


def read_training_checkpoint(path: str | Path) -> dict:
    """A checkpoint ``--resume`` can continue from: :func:`read_checkpoint` plus its schema.

    Raises:
        WeightsError: the file is not a turboyolo training checkpoint (e.g. a plain ``state_dict``, or
            weights exported without the training state), naming what is missing and the fix.
    """
    state = read_checkpoint(path)
    missing = [key for key in TRAINING_KEYS if key not in state]
    if missing:
        tensors = sum(isinstance(v, torch.Tensor) for v in state.values())
        what = (f"a plain state_dict of {tensors} tensors" if tensors and tensors == len(state)
                else f"no {', '.join(missing)}")
        raise WeightsError(f"{path}: not a turboyolo checkpoint: {what}, so there is no training state "
                           "to resume; --resume takes weights/last.pt of a turboyolo run; use --weights "
                           f"{path} to load its tensors into a new run")
    wrong = [key for key, kind in TRAINING_KEYS.items()
             if not isinstance(state[key], kind) or (kind is int and isinstance(state[key], bool))]
    if wrong:
        raise WeightsError(f"{path}: damaged turboyolo checkpoint: {', '.join(wrong)} of the wrong type; "
                           "use another checkpoint (weights/last.pt or best.pt), or --weights to load its "
                           "tensors")
    return state


def checkpoint_model_state(state: dict, prefer_ema: bool = True, path: str | Path | None = None
                           ) -> dict[str, torch.Tensor]:
    for key in ("ema", "model") if prefer_ema else ("model",):
        if isinstance(state.get(key), dict):
            return state[key]
    if state and all(isinstance(v, torch.Tensor) for v in state.values()):
        return state  # a bare state_dict
    where = f"{path}: " if path is not None else ""
    raise WeightsError(f"{where}checkpoint holds no model state ('model' or 'ema' tensors); pass a "
                       "checkpoint written by turboyolo or a state_dict")


def load_matching(model: Darknet, weights: dict[str, torch.Tensor]) -> tuple[list[str], list[str]]:
    """Copy every tensor whose name and shape match; return (loaded, skipped) names."""
    own = model.state_dict()
    loaded, skipped = [], []
    for name, tensor in own.items():
        other = weights.get(name)
        if other is not None and other.shape == tensor.shape:
            tensor.copy_(other.to(tensor.dtype))
            loaded.append(name)
        else:
            skipped.append(name)
    return loaded, skipped


def transfer_darknet_weights(
    model: Darknet, path: str | Path
) -> tuple[WeightsHeader, list[int], list[int]]:
    """Load a ``.weights`` file written for another class count: every convolution whose shapes
    match is loaded; of the rest (the heads), the box and objectness outputs are seeded from the
    source head (:func:`transfer_head_boxes`). Returns the header, the layers not loaded whole and
    those of them that were seeded.

    Darknet files do not say which cfg they came from, so the source network is rebuilt from this
    cfg with the class count inferred from the file size.
    """
    floats, leftover = weights_body_floats(path)  # size against the cfg first: fast, before any read
    source_model = _model_for_size(model.spec, floats, path, leftover)
    header, flat = read_weights(path)
    source_model.load_flat_weights(flat, source=str(path))
    source_state = source_model.state_dict()
    loaded, skipped = load_matching(model, source_state)
    skipped_layers = sorted({int(name.split(".")[1]) for name in skipped if name.startswith("layers.")})
    seeded = transfer_head_boxes(model, source_model, skipped_layers)
    return header, skipped_layers, seeded


def transfer_head_boxes(model: Darknet, source: Darknet, layers: list[int]) -> list[int]:
    """Seed the box and objectness outputs of each head convolution in ``layers`` from ``source``.

    A head for another class count cannot load whole, but its (tx, ty, tw, th, objectness) rows per
    anchor slot mean the same thing in both networks (tw/th are relative to the slot's anchor, so
    with new anchors a slot keeps predicting sizes near its own anchor); class rows keep their
    initialisation. Returns the layers seeded.
    """
    seeded = []
    for own_head, src_head in zip(model.heads, source.heads, strict=False):
        index = own_head.layer_index - 1
        own_conv = getattr(model.layers[index], "conv", None)
        src_conv = getattr(source.layers[index], "conv", None)
        slots = len(own_head.mask)
        if (index not in layers or own_conv is None or src_conv is None or len(src_head.mask) != slots
                or own_conv.bias is None or src_conv.bias is None
                or own_conv.weight.shape[1:] != src_conv.weight.shape[1:]):
            continue
        own_w = own_conv.weight.view(slots, -1, *own_conv.weight.shape[1:])
        src_w = src_conv.weight.view(slots, -1, *src_conv.weight.shape[1:])
        own_b, src_b = own_conv.bias.view(slots, -1), src_conv.bias.view(slots, -1)
        with torch.no_grad():
            own_w[:, :5] = src_w[:, :5]
            own_b[:, :5] = src_b[:, :5]
        seeded.append(index)
    return seeded


def _layout(spec: ModelSpec) -> list[tuple[int, int]]:
    """(layer index, float count) of every convolution, in ``.weights`` order (built on the meta
    device: no memory, milliseconds even for yolov3)."""
    with torch.device("meta"):
        model = Darknet(spec)
    return [(index, sum(t.numel() for t in tensors)) for index, tensors in model.darknet_tensors()]


def _model_for_size(spec: ModelSpec, floats: int, path, leftover: int = 0) -> Darknet:
    """The network of ``spec`` with the class count whose float count is ``floats``; else a WeightsError
    that says truncated (naming where the file ends) or another architecture.

    A Darknet network's float count is linear in the class count (only the head convolutions depend on
    it), so two layouts give it for every class count: no search over models.
    """
    own = _layout(spec)
    if not leftover and sum(n for _, n in own) == floats:
        return Darknet(spec)
    one = sum(n for _, n in _layout(with_classes(spec, 1)))
    per_class = sum(n for _, n in _layout(with_classes(spec, 2))) - one
    if not leftover and per_class > 0 and floats >= one and (floats - one) % per_class == 0:
        candidate = with_classes(spec, 1 + (floats - one) // per_class)
        if sum(n for _, n in _layout(candidate)) == floats:
            return Darknet(candidate)
    raise WeightsError(_size_mismatch(spec, own, floats, path, leftover, one, per_class))


def _size_mismatch(spec: ModelSpec, own, floats: int, path, leftover: int, one: int, per_class: int) -> str:
    heads = {index - 1 for index, layer in enumerate(spec.layers) if isinstance(layer, YoloSpec)}
    done, last_whole, inside, before_heads, total = 0, None, None, None, 0
    for index, count in own:
        if before_heads is None and index in heads:
            before_heads = total  # floats of every layer before the first class-dependent one
        total += count
        if inside is None:
            if done + count > floats:
                inside = index
            else:
                done, last_whole = done + count, index
    before_heads = total if before_heads is None else before_heads
    where = ""
    if inside is not None:
        boundary = f"after layer {last_whole} ({done} floats)" if last_whole is not None else "the start"
        where = (f"; with this cfg it ends {floats - done} floats into layer {inside}, the nearest layer "
                 f"boundary before that being {boundary}")
    odd = f" and {leftover} stray bytes" if leftover else ""
    known = None if leftover else known_network(floats)
    if known is not None:
        name, classes = known
        return (f"{path}: these are the weights of another network: a complete {name} with {classes} "
                f"classes ({floats} floats), not of this cfg ({one} floats for 1 class, {per_class} more per "
                f"class); pass the matching cfg (`--cfg {name}`) or weights made for this cfg")
    if leftover or floats < before_heads:
        return (f"{path}: truncated: it holds {floats} floats{odd}, but this cfg's layers before its first "
                f"detection head alone need {before_heads}{where}. The download was cut short or the file "
                "is damaged: fetch it again (`turboyolo fetch NAME` checks the sha256) or copy it again")
    return (f"{path}: {floats} floats fit this cfg for no class count ({one} for 1 class, {per_class} "
            f"more per class){where}: the file is truncated or holds another architecture's weights; "
            "check the file and the .cfg")


def known_network(floats: int) -> tuple[str, int] | None:
    """(architecture, class count) of the canonical network of :data:`ARCHITECTURES` whose ``.weights``
    hold exactly ``floats`` values, else None: names what a file is when it fits another network."""
    for name, one, per_class in _network_sizes():
        if floats >= one and per_class > 0 and (floats - one) % per_class == 0:
            return name, 1 + (floats - one) // per_class
    return None


@functools.cache
def _network_sizes() -> tuple[tuple[str, int, int], ...]:
    """(architecture, floats for 1 class, floats per further class) of each of :data:`ARCHITECTURES`."""
    sizes = []
    for name in ARCHITECTURES:
        one = sum(n for _, n in _layout(make_spec(name, 1)))
        sizes.append((name, one, sum(n for _, n in _layout(make_spec(name, 2))) - one))
    return tuple(sizes)


def build_model(cfg: str | Path | ModelSpec, weights: str | Path | None = None) -> Darknet:
    """The network of ``cfg`` with ``weights`` (Darknet or checkpoint) loaded strictly."""
    spec = cfg if isinstance(cfg, ModelSpec) else parse_cfg(cfg)
    model = Darknet(spec)
    if weights is None:
        return model
    if not Path(weights).exists():
        raise WeightsError(
            f"{weights}: no such weights file; `turboyolo fetch yolov3-tiny` gets the official tiny weights"
        )
    if is_checkpoint(weights):
        checkpoint = read_checkpoint(weights)
        state = checkpoint_model_state(checkpoint, path=weights)
        own = (" (the checkpoint carries the network it was trained as: drop --cfg to use that)"
               if isinstance(checkpoint.get("cfg_text"), str) else "")
        try:
            missing, unexpected = model.load_state_dict(state, strict=False)
        except RuntimeError as err:  # same names, other shapes: another class count or architecture
            lines = [line.strip() for line in str(err).splitlines() if "size mismatch" in line]
            first = lines[0] if lines else str(err)
            raise WeightsError(f"{weights}: tensor shapes do not match the cfg; check classes/filters "
                               f"({first}){own}") from None
        if missing or unexpected:
            raise WeightsError(
                f"{weights}: does not match the cfg ({len(missing)} missing, {len(unexpected)} "
                f"unexpected tensors, e.g. {(missing or unexpected)[0]}){own}"
            )
    else:
        load_darknet_weights(model, weights)
    return model


def weights_path(weights: str | Path) -> Path:
    """The file ``weights`` names: a path, or a pinned asset name (``yolov3-tiny``, ``yolov4-tiny``, ...)
    fetched into the cache (a file of that name in the working directory wins)."""
    path = Path(weights)
    if not path.exists() and str(weights) in assets.ASSETS:
        return assets.fetch(str(weights))
    if not path.exists():
        raise WeightsError(f"{path}: no such weights file (--weights); a path, or one of the pretrained "
                           f"names {', '.join(sorted(assets.ASSETS))} (fetched and checked by sha256)")
    return path


def load_pretrained(model: Darknet, weights: str | Path, checkpoint: dict | None = None
                    ) -> tuple[list[str], list[int]]:
    """Load ``weights`` (Darknet ``.weights`` or a checkpoint) into ``model``: everything whose shape fits.

    Returns lines to print that name what was skipped, and the indices of the layers that kept their
    initialisation. Darknet's ``seen`` is not carried over (the schedule of this run starts at
    iteration 1). ``checkpoint``: the checkpoint ``weights`` names, when the caller has already read it.
    """
    path = weights_path(weights)
    if is_checkpoint(path):
        state = checkpoint if checkpoint is not None else read_checkpoint(path)
        loaded, skipped = load_matching(model, checkpoint_model_state(state, path=path))
        layers = sorted({int(n.split(".")[1]) for n in skipped if n.startswith("layers.")})
        kept = f"; kept the initialisation of layers {layers} (shapes differ)" if layers else ""
        return [f"loaded {len(loaded)} tensors from {path}{kept}"], layers
    try:
        load_darknet_weights(model, path)
        return [f"loaded {path} (all layers)"], []
    except WeightsError:
        _, skipped, seeded = transfer_darknet_weights(model, path)
    layers = [index for index in skipped if index not in seeded]
    line = (f"loaded {path} into every layer whose shape matches (another class count)"
            + (f"; heads {seeded}: box and objectness outputs from the source, class outputs new"
               if seeded else "")
            + (f"; layers {layers} keep their initialisation" if layers else ""))
    return [line], layers


def init_head_priors(model: Darknet, layers) -> None:
    """Objectness bias of freshly initialised head convolutions in ``layers``: logit(0.01).

    With a zero bias every one of the thousands of cells starts at p = 0.5, so the first iterations
    are dominated by a huge "no object" loss whose gradient also shakes the pretrained layers.
    """
    with torch.no_grad():
        for head in model.heads:
            index = head.layer_index - 1
            conv = getattr(model.layers[index], "conv", None)
            if index not in layers or conv is None or conv.bias is None:
                continue
            bias = conv.bias.view(len(head.mask), -1)
            bias[:, 4] = math.log(0.01 / 0.99)
            bias[:, 5:] = 0.0


def export_weights(checkpoint_path: str | Path, spec: ModelSpec, out: str | Path) -> Path:
    """Darknet ``.weights`` from a checkpoint (its EMA weights when present)."""
    state = read_checkpoint(checkpoint_path)
    model = Darknet(spec)
    model.load_state_dict(checkpoint_model_state(state, path=checkpoint_path))
    return save_darknet_weights(model, out, seen=int(state.get("seen", 0)))


def resolve_model(cfg: str | Path | None, weights: str | Path | None) -> tuple[ModelSpec, Path]:
    """(ModelSpec, weights path) from what ``--cfg`` / ``--weights`` name.

    ``weights`` may be a pinned asset name (``yolov3-tiny``: fetched, with the canonical cfg), a
    checkpoint that carries its cfg (no ``cfg`` needed), or a ``.weights`` file with its ``cfg``.
    """
    if weights is None:
        raise ConfigError("--weights is required (a .weights file, a checkpoint, or `yolov3-tiny`)")
    weights = str(weights)
    if not Path(weights).exists() and weights in assets.ASSETS:
        path = assets.fetch(weights)
        return (parse_cfg(cfg) if cfg else make_spec(weights, batch=1, subdivisions=1)), path
    if cfg:
        return parse_cfg(cfg), Path(weights)
    if is_checkpoint(weights) and Path(weights).exists():
        text = read_checkpoint(weights).get("cfg_text")
        if isinstance(text, str):
            return parse_cfg_text(text, f"{weights}:cfg"), Path(weights)
    raise ConfigError("--cfg is required with these weights (Darknet .weights do not say their network)")

"""Weights into a :class:`Darknet`: Darknet ``.weights`` or a turboyolo checkpoint, full or by shape."""

from __future__ import annotations

from pathlib import Path

import torch

from turboyolo.errors import WeightsError
from turboyolo.formats.darknet_cfg import ModelSpec, parse_cfg
from turboyolo.formats.darknet_weights import WeightsHeader, cutoff_from_name, read_weights, write_weights
from turboyolo.model.darknet import Darknet

CHECKPOINT_SUFFIXES = (".pt", ".pth", ".ckpt")


def is_checkpoint(path: str | Path) -> bool:
    return Path(path).suffix.lower() in CHECKPOINT_SUFFIXES


def load_darknet_weights(model: Darknet, path: str | Path, cutoff: int | None = None) -> WeightsHeader:
    """Load a ``.weights`` file; a ``.conv.N`` name (or ``cutoff``) loads only the first N layers."""
    header, flat = read_weights(path)
    cutoff = cutoff if cutoff is not None else cutoff_from_name(path)
    model.load_flat_weights(flat, cutoff=cutoff, source=str(path))
    return header


def save_darknet_weights(model: Darknet, path: str | Path, seen: int = 0, cutoff: int | None = None) -> Path:
    return write_weights(path, WeightsHeader(0, 2, 0, seen), model.flat_weights(cutoff))


def read_checkpoint(path: str | Path) -> dict:
    """A turboyolo checkpoint, always with ``weights_only=True`` (no code runs from the file)."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError as err:
        raise WeightsError(f"{path}: no such checkpoint") from err
    except Exception as err:  # noqa: BLE001 - torch raises many types for a bad file
        raise WeightsError(f"{path}: not a loadable turboyolo checkpoint ({err})") from err
    if not isinstance(state, dict):
        raise WeightsError(f"{path}: expected a checkpoint dict, found {type(state).__name__}")
    return state


def checkpoint_model_state(state: dict, prefer_ema: bool = True) -> dict[str, torch.Tensor]:
    for key in ("ema", "model") if prefer_ema else ("model",):
        if isinstance(state.get(key), dict):
            return state[key]
    if state and all(isinstance(v, torch.Tensor) for v in state.values()):
        return state  # a bare state_dict
    raise WeightsError("checkpoint holds no model state ('model' or 'ema')")


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
    header, flat = read_weights(path)
    source_model = _model_for_size(model.spec, flat.size, path)
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


def _model_for_size(spec: ModelSpec, floats: int, path) -> Darknet:
    from turboyolo.model.zoo import with_num_classes

    own = Darknet(spec)
    if own.flat_weights().size == floats:
        return own
    for classes in range(1, 1001):
        candidate = Darknet(with_num_classes(spec, classes))
        if sum(t.numel() for _, ts in candidate.darknet_tensors() for t in ts) == floats:
            return candidate
    raise WeightsError(
        f"{path}: {floats} floats fit this cfg's layers for no class count in 1..1000; "
        "the weights come from another architecture"
    )


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
        state = checkpoint_model_state(read_checkpoint(weights))
        try:
            missing, unexpected = model.load_state_dict(state, strict=False)
        except RuntimeError as err:  # same names, other shapes: another class count or architecture
            lines = [line.strip() for line in str(err).splitlines() if "size mismatch" in line]
            first = lines[0] if lines else str(err)
            raise WeightsError(f"{weights}: tensor shapes do not match the cfg; check classes/filters "
                               f"({first})") from None
        if missing or unexpected:
            raise WeightsError(
                f"{weights}: does not match the cfg ({len(missing)} missing, {len(unexpected)} "
                f"unexpected tensors, e.g. {(missing or unexpected)[0]})"
            )
    else:
        load_darknet_weights(model, weights)
    return model


def load_pretrained(model: Darknet, weights: str | Path, checkpoint: dict | None = None
                    ) -> tuple[list[str], list[int]]:
    """Load ``weights`` (Darknet ``.weights`` or a checkpoint) into ``model``: everything whose shape fits.

    Returns lines to print that name what was skipped, and the indices of the layers that kept their
    initialisation. Darknet's ``seen`` is not carried over (the schedule of this run starts at
    iteration 1). ``checkpoint``: the checkpoint ``weights`` names, when the caller has already read it.
    """
    path = Path(weights)
    if not path.exists():
        raise WeightsError(f"{path}: no such weights file (--weights); "
                           "`turboyolo fetch yolov3-tiny` gets the COCO tiny weights")
    if is_checkpoint(path):
        state = checkpoint if checkpoint is not None else read_checkpoint(path)
        loaded, skipped = load_matching(model, checkpoint_model_state(state))
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
    import math

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
    model.load_state_dict(checkpoint_model_state(state))
    return save_darknet_weights(model, out, seen=int(state.get("seen", 0)))


def resolve_model(cfg: str | Path | None, weights: str | Path | None) -> tuple[ModelSpec, Path]:
    """(ModelSpec, weights path) from what ``--cfg`` / ``--weights`` name.

    ``weights`` may be a pinned asset name (``yolov3-tiny``: fetched, with the canonical cfg), a
    checkpoint that carries its cfg (no ``cfg`` needed), or a ``.weights`` file with its ``cfg``.
    """
    from turboyolo import assets
    from turboyolo.errors import ConfigError
    from turboyolo.formats.darknet_cfg import parse_cfg_text
    from turboyolo.model.zoo import make_spec

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

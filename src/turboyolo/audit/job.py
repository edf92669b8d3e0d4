"""The ``turboyolo audit`` job: out-of-sample predictions for every labelled image, then a score per given
box and per missing box (:mod:`turboyolo.audit.scores`), written into a run directory.

Out of sample: the images (both splits) are cut into ``--folds`` parts; for each part a model is
fine-tuned from ``--weights`` on the other parts by the trainer (:func:`turboyolo.train.fit.fit`, every
option of ``turboyolo train`` through ``--config``) and predicts that part
(:class:`turboyolo.infer.predict.Predictor`), so no prediction comes from a model that saw the image's
labels. ``--folds 0`` lets ``--weights`` predict every image as it is (for a model that never trained on
them); ``--predictions`` scores the predictions of an earlier audit again.

The run directory receives ``label_issues.csv`` and ``image_ranking.csv`` (worst first,
:mod:`turboyolo.formats.issues`), ``predictions.json`` (COCO results of the out-of-sample predictions,
``image_ids.json`` naming their images), ``sheet_<kind>.jpg`` (the worst rows of each kind, drawn),
``audit.yaml`` (the settings, the folds and the times) and ``folds/`` (each fold's lists and training
run, :mod:`turboyolo.audit.folds`). An audit stopped part way loses no finished fold: the same command
again with ``--exist-ok`` keeps each fold's predictions, or continues its training, when they are of the
same images and settings. The audit reads label files and never writes one.
"""

from __future__ import annotations

import csv
import io
import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import yaml

from turboyolo.audit.evidence import ImageEvidence
from turboyolo.audit.folds import (
    DEFAULT_BATCH,
    DEFAULT_EPOCHS,
    Fold,
    earlier_training,
    fold_parts,
    kept_predictions,
    save_predictions,
    train_config,
    train_fold,
)
from turboyolo.audit.scores import ImageScore, score_all
from turboyolo.audit.sheet import draw_sheet
from turboyolo.boxes import cxcywh_to_xyxy
from turboyolo.data.decode import load_image
from turboyolo.data.scan import Sample, scan_dataset
from turboyolo.errors import DataError, FlagError, TurboYoloError, printable
from turboyolo.formats.darknet_cfg import YoloSpec
from turboyolo.formats.datasets import load_data_config
from turboyolo.formats.issues import DRAWN_FROM, IMAGES_NAME, ISSUES_NAME, KINDS, LabelIssue, write_issues
from turboyolo.formats.labels import write_names
from turboyolo.infer.predict import Prediction, Predictor
from turboyolo.model.loading import is_checkpoint, read_checkpoint, resolve_model
from turboyolo.options import (
    MAX_DET,
    RunDirArgs,
    check_img_size,
    device_option,
    img_size_option,
    option,
    require,
)
from turboyolo.rundir import RealPaths, check_outside, removed_if_empty, same_file, write_atomically

FLAGGED = 0.5  # the summary counts rows scored at least this
SHEET_ROWS = 20  # rows drawn on each kind's contact sheet


@dataclass
class AuditArgs:
    """How the out-of-sample predictions are made."""

    folds: int = option(3, "parts the images are cut into; each part is predicted by a model fine-tuned on "
                        "the others (0: --weights predicts every image as it is, for a model that never "
                        "trained on them)", type=int)
    epochs: int | None = option(None, "fine-tuning epochs of each fold's model over the other folds' images "
                                f"(default: the --config recipe's, else {DEFAULT_EPOCHS})", type=int)
    img_size: int | None = img_size_option("the cfg's, or the --config recipe's; for training and prediction")
    batch: int | None = option(None, "images per training iteration (default: the --config recipe's, else "
                               f"{DEFAULT_BATCH})", type=int)
    conf_thres: float = option(0.01, "lowest confidence of a prediction kept as evidence", type=float)
    config: str | None = option(None, "a recipe (e.g. trees) or a run's config.yaml that each fold's "
                                "training starts from (its cfg and weights too, unless given)")
    seed: int = option(0, "seed of the split into folds and of the training", type=int)
    device: str = device_option()
    workers: int | None = option(None, "loader worker processes of the training (default: auto)", type=int)
    predictions: str | None = option(None, "score these predictions (an audit's predictions.json, its "
                                     "image_ids.json beside it) instead of making new ones")
    verbose: bool = option(False, "show each fold's training output", action="store_true")

    def __post_init__(self) -> None:
        require(self.folds == 0 or self.folds >= 2, f"--folds must be 0 or at least 2, got {self.folds}")
        require(self.epochs is None or self.epochs >= 1, f"--epochs must be >= 1, got {self.epochs}")
        check_img_size(self.img_size)
        require(self.batch is None or self.batch >= 1, f"--batch must be >= 1, got {self.batch}")
        require(0 <= self.conf_thres < 1, f"--conf-thres must be in [0, 1), got {self.conf_thres}")


GROUPS: dict[str, type] = {"audit": AuditArgs, "run_dir": RunDirArgs}


@dataclass
class AuditRequest:
    """What ``turboyolo audit`` is asked: ``data`` (a .data, data.yaml or image folder with labels), the
    ``weights`` the folds start from (and their ``cfg``), the options, where to write."""

    data: str | Path
    weights: str | None = None
    cfg: str | None = None
    audit: AuditArgs = field(default_factory=AuditArgs)
    run_dir: RunDirArgs = field(default_factory=lambda: RunDirArgs())


@dataclass
class AuditReport:
    run_dir: Path
    images: int
    boxes: int
    rows: list[LabelIssue]
    ranking: list[ImageScore]
    skipped: list[tuple[str, str]]
    notes: list[str]
    minutes: float
    train_minutes: float

    def summary(self) -> str:
        flagged = {kind: sum(1 for r in self.rows if r.kind == kind and r.score >= FLAGGED) for kind in KINDS}
        counts = ", ".join(f"{kind} {count}" for kind, count in flagged.items())
        lines = [*self.notes,
                 f"audit: {self.images} images, {self.boxes} given boxes; scored >= {FLAGGED}: {counts}"]
        if self.skipped:
            lines.append(f"skipped {len(self.skipped)} image(s) that could not be read or predicted, e.g. "
                         f"{printable(self.skipped[0][0])}: {printable(self.skipped[0][1])} (all in "
                         f"{printable(self.run_dir / 'skipped.txt')})")
        worst = [row for row in self.ranking[:3] if row.score > 0]
        if worst:
            lines.append("worst images: " + ", ".join(f"{Path(row.image).name} ({row.score:.2f})"
                                                      for row in worst))
        lines.append(f"{self.minutes:.1f} min ({self.train_minutes:.1f} training); results: "
                     f"{printable(self.run_dir / ISSUES_NAME)}, {IMAGES_NAME}, predictions.json")
        return "\n".join(lines)


@dataclass
class Audited:
    """The images under audit: the usable samples of both splits (each once), their class names and
    what the scans left out."""

    samples: list[Sample]
    names: list[str]
    excluded: list[tuple[str, str]]
    keys: list[str]  # each sample's image by its real path (the same order)


def collect(data: str | Path) -> Audited:
    """Both splits of ``data`` scanned (each image once); refused without class names or labels."""
    config = load_data_config(data)
    if not config.names:
        raise DataError(f"{data}: no class names; add a names file (one class per line) to the data set")
    samples: dict[str, Sample] = {}
    excluded: list[tuple[str, str]] = []
    real = RealPaths()
    for split in ("train", "val"):
        if not config.split(split):
            continue  # a data set with a training split only; a val split it names must scan
        scan = scan_dataset(data, split, config.names)
        for sample in scan.samples:
            samples.setdefault(real(sample.image), sample)
        excluded += [item for item in scan.excluded if not item[1].startswith("listed twice")]
    audited = Audited(list(samples.values()), list(config.names), list(dict.fromkeys(excluded)),
                      list(samples))
    if not any(len(s.labels) for s in audited.samples):
        raise DataError(f"{data}: no image has a label file with boxes ({len(audited.samples)} usable, "
                        f"{len(audited.excluded)} excluded); the audit checks labels people made: label "
                        "some images first (`turboyolo label`, then `turboyolo review`)")
    return audited


def run_audit(request: AuditRequest, log: Callable[[str], None] = print) -> AuditReport:
    """The whole job (see the module's text); returns what it found and where it wrote."""
    started = time.time()
    args = request.audit
    audited = collect(request.data)
    notes = _notes(request, audited.names)
    for note in notes:
        log(note)
    check_outside(Path(request.run_dir.project or "runs/audit") / request.run_dir.name,
                  load_data_config(request.data).folders(), "--project")
    made = not request.run_dir.exist_ok
    run_dir = request.run_dir.make("audit")
    with removed_if_empty(run_dir, made):
        log(f"audit of {printable(request.data)}: {len(audited.samples)} images, "
            f"{sum(len(s.labels) for s in audited.samples)} boxes, {len(audited.names)} classes; "
            f"run directory {printable(run_dir)}")
        if args.predictions:
            predictions, skipped, folds, seconds = read_predictions(args.predictions, audited), [], [], 0.0
        else:
            predictions, skipped, folds, seconds = _predict(request, audited, run_dir, log)
    evidences = [evidence_of(sample, predictions[key]) for key, sample in _keyed(audited)
                 if key in predictions]
    rows, ranking = score_all(evidences, len(audited.names))
    folds_of = {image: index for index, part in enumerate(folds) for image in part}
    _write_outputs(run_dir, audited, evidences, rows, ranking, folds_of, skipped)
    minutes = (time.time() - started) / 60
    _write_settings(run_dir, request, folds, minutes, seconds / 60)
    skipped = [*audited.excluded, *skipped]
    return AuditReport(run_dir, len(evidences), sum(len(e.labels) for e in evidences), rows, ranking, skipped,
                       notes, minutes, seconds / 60)


def _keyed(audited: Audited):
    return zip(audited.keys, audited.samples)


def _notes(request: AuditRequest, names: list[str]) -> list[str]:
    """What the class count, the model's own classes and where it trained mean for this audit (refused
    where they cannot work: ``--folds 0`` with a model of other classes)."""
    notes = []
    if len(names) == 1:
        notes.append(f"note: one class ({names[0]!r}): no box can have the wrong class, so the audit looks "
                     "for missing, badly located and spurious boxes only")
    if request.audit.predictions:
        return notes
    seen = _trained_on_this(request)
    if seen:
        notes.append(seen)
    model_classes = _model_classes(request)
    if model_classes is None or model_classes == len(names):
        return notes
    if request.audit.folds == 0:
        raise FlagError(f"--weights {request.weights}: a model of {model_classes} classes, but "
                        f"{request.data} has {len(names)} ({', '.join(names)}); its predictions cannot "
                        "check these labels: let the audit fine-tune folds from it (--folds 3)")
    notes.append(f"note: --weights {request.weights} predicts {model_classes} classes, the data set has "
                 f"{len(names)}: each fold's model learns the data set's classes anew (its class outputs "
                 "start fresh)")
    return notes


def _trained_on_this(request: AuditRequest) -> str | None:
    """A warning when ``--weights`` is a checkpoint of a run on this very data set: a model that saw the
    labels has learnt their mistakes, and folds fine-tuned from it keep much of that."""
    weights = request.weights
    if not weights or not Path(weights).is_file() or not is_checkpoint(weights):
        return None
    try:
        trained = str((read_checkpoint(weights).get("config") or {}).get("data") or "")
    except (TurboYoloError, OSError, AttributeError):
        return None  # the trainer names what is wrong with the file
    if not trained or not same_file(trained, request.data):
        return None
    return (f"warning: --weights {weights} was trained on {request.data} itself: it has seen these labels "
            "(and learnt their mistakes), so folds fine-tuned from it find fewer; start from weights that "
            "did not train on them (e.g. yolov3-tiny, the COCO weights)")


def _model_classes(request: AuditRequest) -> int | None:
    """The class count of the network ``--weights`` (and ``--cfg``) name; None when it is not known yet
    (an architecture name alone, or a ``--config`` recipe that names the weights)."""
    if not request.weights:
        return None
    try:
        spec, _ = resolve_model(request.cfg, request.weights)
    except TurboYoloError:
        if request.audit.folds == 0:
            raise
        return None  # the trainer names what is wrong with them, with its own message
    heads = [layer for layer in spec.layers if isinstance(layer, YoloSpec)]
    return int(heads[0].classes) if heads else None


# ---------------------------------------------------------------------------------------- predictions
def _predict(request: AuditRequest, audited: Audited, run_dir: Path, log: Callable[[str], None]
             ) -> tuple[dict[str, Prediction], list[tuple[str, str]], list[list[str]], float]:
    """Every image's out-of-sample predictions (by real path), the images skipped with their reasons, the
    folds and the training seconds. A fold finished by an earlier call into this run directory is kept
    (:mod:`turboyolo.audit.folds`)."""
    args = request.audit
    by_key = dict(_keyed(audited))
    if args.folds == 0:
        log(f"--folds 0: {request.weights} predicts every image as it is (no fine-tuning)")
        found, failed = predict_images(request.weights, request.cfg, list(by_key.values()), args, log)
        return found, failed, [sorted(by_key)], 0.0
    if len(by_key) < args.folds:  # a fold without images would train on nothing or predict nothing
        raise FlagError(f"--folds {args.folds} needs at least {args.folds} usable images, {request.data} has "
                        f"{len(by_key)}; use fewer folds, or --folds 0 with a model that never saw them")
    parts = fold_parts(list(by_key), args.folds, args.seed)
    listed = {key: os.path.abspath(sample.image) for key, sample in by_key.items()}
    names_file = run_dir / "folds" / "classes.names"
    write_names(names_file, audited.names)
    predictions: dict[str, Prediction] = {}
    skipped: list[tuple[str, str]] = []
    train_seconds = 0.0
    for index, part in enumerate(parts):
        began = time.time()
        others = [key for k, other in enumerate(parts) if k != index for key in other]
        fold = Fold(run_dir, index, others, part, listed)
        config = train_config(fold, args, request.cfg, request.weights)
        why_not = earlier_training(fold, config)
        kept = kept_predictions(fold, args) if why_not is None else None
        if kept is not None:
            log(f"fold {index + 1}/{len(parts)}: its predictions are kept from an earlier call "
                f"({fold.folder / 'predictions.json'}: same images and settings)")
            found, failed = kept
        else:
            if why_not is not None:
                log(f"fold {index + 1}/{len(parts)}: fine-tuning on {len(fold.train)} images, then "
                    f"predicting the {len(part)} held out")
            weights = train_fold(fold, config, why_not, names_file, args, log)
            train_seconds += time.time() - began
            found, failed = predict_images(weights, None, [by_key[key] for key in part], args, log)
            save_predictions(fold, args, found, failed)
            took = (time.time() - began) / 60
            left = (len(parts) - index - 1) * took if why_not is not None else 0  # a continued fold: no guide
            log(f"fold {index + 1}/{len(parts)}: trained and predicted in {took:.1f} min"
                + (f"; about {left:.0f} min to go (stopped? the same command with --exist-ok keeps the "
                   "finished folds)" if left else ""))
        predictions.update(found)
        skipped += failed
    return predictions, skipped, parts, train_seconds


def predict_images(weights: str, cfg: str | None, samples: list[Sample], args: AuditArgs,
                   log: Callable[[str], None] = print) -> tuple[dict[str, Prediction], list[tuple[str, str]]]:
    """``weights``' predictions for ``samples`` (by real path), at every confidence from ``--conf-thres``,
    one per class where several pass (Darknet's multi-label rule), at most :data:`MAX_DET` per image
    (``log`` says where that cap bit); images that fail to decode are returned with their reason."""
    predictor = Predictor.load(weights, cfg, device=args.device, img_size=args.img_size, say=lambda _: None)
    found, failed = {}, []
    batch: list[tuple[str, np.ndarray]] = []
    for position, sample in enumerate(samples):
        try:
            batch.append((os.path.realpath(sample.image), load_image(sample.image)))
        except DataError as err:
            failed.append((str(sample.image), str(err)))
        if len(batch) == PREDICT_BATCH or (position == len(samples) - 1 and batch):
            results = predictor.predict_arrays([array for _, array in batch], args.conf_thres, NMS_IOU,
                                               max_det=MAX_DET)
            found.update({key: result for (key, _), result in zip(batch, results)})
            batch = []
    if predictor.caps.summary():
        log(predictor.caps.summary())
    return found, failed


PREDICT_BATCH = 8
NMS_IOU = 0.45  # per-class NMS of the evidence (Darknet's detector test value)


def evidence_of(sample: Sample, prediction: Prediction) -> ImageEvidence:
    """A sample's given boxes in pixels beside its predictions (the image by its absolute path, as
    ``label_issues.csv`` names it for the review and training)."""
    height, width = sample.hw
    labels = np.asarray(sample.labels, np.float64).reshape(-1, 5)
    boxes = cxcywh_to_xyxy(labels[:, 1:5]) * np.array([width, height, width, height])
    preds = np.concatenate([np.asarray(prediction.boxes, np.float64).reshape(-1, 4),
                            np.asarray(prediction.scores, np.float64).reshape(-1, 1),
                            np.asarray(prediction.classes, np.float64).reshape(-1, 1)], 1)
    return ImageEvidence(os.path.abspath(sample.image), width, height,
                         np.concatenate([labels[:, :1], boxes], 1), preds)


def read_predictions(path: str, audited: Audited) -> dict[str, Prediction]:
    """An audit's ``predictions.json`` (COCO results) and ``image_ids.json`` back into predictions (held as
    columns once parsed: a large audit's results are not kept as Python lists beside the parsed JSON)."""
    results_path = Path(path)
    ids_path = results_path.with_name("image_ids.json")
    try:
        results = json.loads(results_path.read_text(encoding="utf-8"))
        ids = {int(key): image for key, image in json.loads(ids_path.read_text(encoding="utf-8")).items()}
        count = len(results)
        image_ids = np.fromiter((int(item["image_id"]) for item in results), np.int64, count)
        boxes = np.array([item["bbox"] for item in results], np.float64).reshape(count, 4)
        scores = np.fromiter((float(item["score"]) for item in results), np.float64, count)
        classes = np.fromiter((int(item["category_id"]) for item in results), np.int64, count)
        del results
        unknown = np.setdiff1d(image_ids, np.fromiter(ids, np.int64, len(ids)))
        if unknown.size:
            raise KeyError(f"image_id {int(unknown[0])} is not in image_ids.json")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise FlagError(f"--predictions {path}: not an audit's predictions.json with its image_ids.json "
                        f"beside it ({err})") from None
    boxes[:, 2:] += boxes[:, :2]  # x, y, w, h -> x1, y1, x2, y2
    order = np.argsort(image_ids, kind="stable")  # each image's boxes in the file's order
    image_ids = image_ids[order]
    sizes = {key: sample.hw for key, sample in _keyed(audited)}
    out, real = {}, RealPaths()
    for image_id, image in ids.items():
        key = real(image)
        if key not in sizes:
            continue
        at = order[np.searchsorted(image_ids, image_id, "left"):np.searchsorted(image_ids, image_id, "right")]
        out[key] = Prediction(boxes[at], scores[at], classes[at], sizes[key][1], sizes[key][0])
    if not out:
        raise FlagError(f"--predictions {path}: none of its images is one of {len(sizes)} images of the data "
                        "set; give the predictions.json of an audit of this data set")
    return out


# -------------------------------------------------------------------------------------------- outputs
def _write_outputs(run_dir: Path, audited: Audited, evidences: list[ImageEvidence], rows: list[LabelIssue],
                   ranking: list[ImageScore], folds_of: dict[str, int],
                   skipped: list[tuple[str, str]]) -> None:
    """``label_issues.csv``, ``image_ranking.csv``, ``predictions.json`` + ``image_ids.json``, a contact
    sheet of the worst rows of each kind (``sheet_<kind>.jpg``, those scored >= ``DRAWN_FROM``) and,
    when images were left out, ``skipped.txt``."""
    write_issues(run_dir / ISSUES_NAME, rows, audited.names)
    for kind in KINDS:
        worst = [row for row in rows if row.kind == kind and row.score >= DRAWN_FROM][:SHEET_ROWS]
        if worst:
            draw_sheet(run_dir / f"sheet_{kind}.jpg", worst, rows, audited.names)
    table = io.StringIO(newline="")
    writer = csv.writer(table)
    writer.writerow(["rank", "image", "score", "chance", *KINDS, "boxes", "issues", "fold"])
    real = RealPaths()
    for rank, item in enumerate(ranking, start=1):
        fold = folds_of.get(real(item.image))
        writer.writerow([rank, item.image, f"{item.score:.4f}", f"{item.chance:.4f}",
                         *(f"{item.kinds[kind]:.4f}" for kind in KINDS), item.boxes, item.issues,
                         "" if fold is None else fold + 1])
    write_atomically(run_dir / IMAGES_NAME, table.getvalue())
    ids = {image_id: evidence.image for image_id, evidence in enumerate(evidences)}
    # the ids first: predictions.json is read back only with the image_ids.json beside it
    (run_dir / "predictions.json").unlink(missing_ok=True)
    write_atomically(run_dir / "image_ids.json", json.dumps(ids, indent=1, ensure_ascii=True))
    write_atomically(run_dir / "predictions.json", _coco_results(evidences))
    skipped = [*audited.excluded, *skipped]
    if skipped:
        write_atomically(run_dir / "skipped.txt",
                         "".join(f"{printable(p)}\t{printable(r)}\n" for p, r in skipped))


def _coco_results(evidences: list[ImageEvidence]):
    """The out-of-sample predictions as one COCO results JSON array, written an image at a time."""
    yield "["
    first = True
    for image_id, evidence in enumerate(evidences):
        items = [{"image_id": image_id, "category_id": int(cls),
                  "bbox": [round(x1, 2), round(y1, 2), round(x2 - x1, 2), round(y2 - y1, 2)],
                  "score": round(score, 5)} for x1, y1, x2, y2, score, cls in evidence.preds.tolist()]
        if items:
            yield ("" if first else ", ") + json.dumps(items)[1:-1]
            first = False
    yield "]"


def _write_settings(run_dir: Path, request: AuditRequest, folds: list[list[str]], minutes: float,
                    train_minutes: float) -> None:
    """``audit.yaml``: what was asked, the folds (held-out images per fold), the times."""
    settings = {"data": str(request.data), "weights": request.weights, "cfg": request.cfg,
                "audit": asdict(request.audit), "folds": [len(part) for part in folds],
                "minutes": round(minutes, 2), "train_minutes": round(train_minutes, 2)}
    write_atomically(run_dir / "audit.yaml", yaml.safe_dump(settings, sort_keys=False))

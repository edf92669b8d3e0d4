from __future__ import annotations

import numpy as np
import pytest

from turboyolo.boxes import wh_iou
from turboyolo.cli import main
from turboyolo.data.anchors import anchor_fit, kmeans_anchors, letterbox_box_sizes
from turboyolo.errors import ConfigError


def test_wh_iou_matches_hand_values():
    iou = wh_iou(np.array([[2.0, 2.0], [4.0, 1.0]]), np.array([[2.0, 2.0], [4.0, 4.0]]))
    np.testing.assert_allclose(iou, [[1.0, 0.25], [2 / 6, 4 / 16]])


def test_best_centres_is_wh_iou_argmax_and_max():
    from turboyolo.data.anchors import _best_centres

    rng = np.random.default_rng(0)
    boxes = np.round(rng.uniform(1, 50, (2000, 2)))  # whole pixels: ties between equal centres happen
    centres = np.concatenate([np.round(rng.uniform(1, 50, (7, 2))), [[10, 10], [10, 10]]])
    index, best = _best_centres((boxes[:, 0], boxes[:, 1], boxes.prod(1)), centres)
    iou = wh_iou(boxes, centres)
    np.testing.assert_array_equal(index, iou.argmax(1))
    np.testing.assert_array_equal(best, iou.max(1))


def test_letterbox_sizes_use_the_smaller_ratio():
    rows = np.array([[0, 0.5, 0.5, 0.5, 0.25]])
    # 200 x 100 (w x h) image into 400 x 400: ratio 2 (width-bound)
    sizes = letterbox_box_sizes([rows], [(100, 200)], (400, 400))
    np.testing.assert_allclose(sizes, [[200.0, 50.0]])
    # images without boxes, and several per image: each box scaled by its own image's ratio
    two = np.array([[0, 0.5, 0.5, 0.1, 0.2], [1, 0.5, 0.5, 0.3, 0.4]])
    sizes = letterbox_box_sizes([np.zeros((0, 5)), rows, two], [(10, 10), (100, 200), (400, 100)], (400, 400))
    np.testing.assert_allclose(sizes, [[200.0, 50.0], [10.0, 80.0], [30.0, 160.0]])
    assert letterbox_box_sizes([np.zeros((0, 5))], [(5, 5)], (64, 64)).shape == (0, 2)


def test_kmeans_recovers_clusters_and_beats_poor_anchors():
    rng = np.random.default_rng(1)
    centres = np.array([[10, 12], [30, 60], [90, 70]], float)
    boxes = np.concatenate([c * rng.uniform(0.92, 1.08, (200, 2)) for c in centres])
    fit = kmeans_anchors(boxes, 3, seed=0)
    np.testing.assert_allclose(fit.anchors, centres, rtol=0.06)
    assert fit.mean_iou > 0.85 and fit.recall == 1.0 and fit.used == 3
    poor = anchor_fit(boxes, [[200, 200], [300, 300], [5, 5]])
    assert poor.mean_iou < fit.mean_iou and poor.recall < fit.recall
    again = kmeans_anchors(boxes, 3, seed=0)
    np.testing.assert_array_equal(again.anchors, fit.anchors)  # deterministic for a seed
    assert fit.text().count(",") == 5


def test_kmeans_needs_enough_boxes():
    with pytest.raises(ValueError):
        kmeans_anchors(np.array([[10.0, 10.0], [10.0, 10.0]]), 2)


def test_anchors_command_rewrites_cfg(boxes_dataset, tiny_cfg, tmp_path, capsys):
    from turboyolo.formats.darknet_cfg import YoloSpec, parse_cfg

    out = tmp_path / "fitted.cfg"
    data = str(boxes_dataset / "images")
    assert main(["anchors", "--data", data, "--cfg", str(tiny_cfg), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "current (tiny-1c.cfg)" in text and "fitted (k-means" in text
    fitted_line = next(line for line in text.splitlines() if line.startswith("fitted:"))
    anchors = [layer.anchors for layer in parse_cfg(out).layers if isinstance(layer, YoloSpec)]
    assert len(anchors) == 2 and anchors[0] == anchors[1] and len(anchors[0]) == 6
    assert fitted_line == "fitted: " + ", ".join(f"{int(w)},{int(h)}" for w, h in anchors[0])


def test_anchors_command_output_needs_cfg(boxes_dataset, tmp_path):
    from turboyolo.commands import anchors

    parser_args = ["anchors", "--data", str(boxes_dataset / "images"), "-o", str(tmp_path / "x.cfg")]
    assert main(parser_args) == 1
    with pytest.raises(ConfigError):
        anchors.run(_namespace(data=str(boxes_dataset), output=str(tmp_path / "x.cfg")))


def _namespace(**kwargs):
    import argparse

    defaults = dict(split="train", num=None, img_size=None, cfg=None, thresh=0.5, restarts=2, seed=0)
    defaults.update(kwargs)
    return argparse.Namespace(**defaults)


def _distributions(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Box sizes (letterbox px) of a few kinds of data set: random boxes of any shape (the generated
    COCO-count set), three tight shapes (cells, as in BCCD), a heavy tail of small and large objects."""
    rng = np.random.default_rng(seed)
    shapes = np.array([[12, 14], [40, 90], [120, 70]])
    return {
        "uniform": np.stack([rng.uniform(6, 190, n), rng.uniform(4, 150, n)], 1),
        "clusters": np.concatenate([c * np.exp(rng.normal(0, 0.25, (n // 3, 2))) for c in shapes]),
        "log-uniform": np.exp(rng.uniform(np.log(3), np.log(300), (n, 2))),
    }


@pytest.mark.slow
def test_a_fit_on_a_sample_matches_the_full_fit_within_one_percent(monkeypatch):
    import turboyolo.data.anchors as anchors

    seen = []
    once = anchors._kmeans_once
    monkeypatch.setattr(anchors, "_kmeans_once", lambda boxes, *a: seen.append(len(boxes)) or once(boxes, *a))
    for name, boxes in _distributions(60_000).items():
        full = kmeans_anchors(boxes, 6, restarts=2, sample=None)
        assert max(seen) == len(boxes)
        seen.clear()
        sampled = kmeans_anchors(boxes, 6, restarts=2, sample=10_000)
        assert max(seen) <= 10_000, name  # the fit never sees more boxes than the sample
        seen.clear()
        # both scored on every box: the figure `turboyolo anchors` and the start's check report
        assert abs(sampled.mean_iou - full.mean_iou) <= 0.01 * full.mean_iou, name
        assert sampled.mean_iou == pytest.approx(anchor_fit(boxes, sampled.anchors).mean_iou)


def test_sample_boxes_is_seeded_and_bounded():
    from turboyolo.data.anchors import sample_boxes

    boxes = np.arange(200.0).reshape(100, 2)
    assert sample_boxes(boxes, 100) is boxes and sample_boxes(boxes, None) is boxes
    part = sample_boxes(boxes, 30, seed=3)
    assert len(part) == 30 and len(np.unique(part[:, 0])) == 30 and np.all(np.diff(part[:, 0]) > 0)
    np.testing.assert_array_equal(part, sample_boxes(boxes, 30, seed=3))
    assert not np.array_equal(part, sample_boxes(boxes, 30, seed=4))


def _labelled_samples(count: int, seed: int = 0):
    from pathlib import Path

    from turboyolo.data.scan import Sample

    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        n = int(rng.integers(1, 6))
        rows = np.column_stack([np.zeros(n), rng.uniform(0.3, 0.7, (n, 2)), rng.uniform(0.05, 0.5, (n, 2))])
        out.append(Sample(Path(f"/nowhere/{i}.jpg"), rows.astype(np.float32), (int(rng.integers(80, 200)),
                                                                                int(rng.integers(80, 200)))))
    return out


def test_autoanchor_fit_is_cached_and_refitted_when_boxes_or_size_change(tmp_path, isolated_cache,
                                                                         monkeypatch):
    import re

    import turboyolo.data.anchors as anchors
    from synth import micro_cfg
    from turboyolo.formats.darknet_cfg import parse_cfg
    from turboyolo.train.anchors import check_anchors

    starts = []
    once = anchors._kmeans_once
    monkeypatch.setattr(anchors, "_kmeans_once", lambda *a: starts.append(1) or once(*a))
    cfg = micro_cfg(tmp_path / "m.cfg", size=64)
    cfg.write_text(re.sub(r"anchors\s*=.*", "anchors = 1,1, 2,2, 3,3, 200,200, 300,300, 400,400",
                          cfg.read_text()))
    spec, samples = parse_cfg(cfg), _labelled_samples(40)

    def check(spec, samples):
        starts.clear()
        lines = []
        fitted = check_anchors(spec, samples, autoanchor=True, data="d", cfg="c", say=lines.append)
        assert "autoanchor: training with anchors fitted to the boxes" in lines[-1]
        return fitted.yolo_layers[0][1].anchors, "from the cache" in lines[-1], len(starts)

    first, cached, fits = check(spec, samples)
    assert not cached and fits == 10  # every k-means start ran
    again, cached, fits = check(spec, samples)
    assert cached and fits == 0 and again == first  # the second start fits nothing
    changed = list(samples)
    changed[5] = type(samples[5])(samples[5].image, samples[5].labels * [1, 1, 1, 1.5, 1], samples[5].hw)
    _, cached, fits = check(spec, changed)
    assert not cached and fits == 10  # one box changed: fitted again
    _, cached, fits = check(spec.with_net(width=96, height=96), samples)
    assert not cached and fits == 10  # another network size: other letterbox sizes
    for path in (isolated_cache / "anchors").glob("*.json"):
        path.write_text('{"anchors": [[1, 2]], "mean_iou": 7}')  # damaged or foreign: fitted again
    assert check(spec, samples)[1:] == (False, 10)
    assert check(spec, samples)[1:] == (True, 0)


def test_the_start_checks_and_fits_at_most_a_sample_of_a_large_set(tmp_path, isolated_cache, monkeypatch):
    import re

    import turboyolo.data.anchors as anchors
    from synth import micro_cfg
    from turboyolo.formats.darknet_cfg import parse_cfg
    from turboyolo.train.anchors import check_anchors

    seen = []
    once = anchors._kmeans_once
    monkeypatch.setattr(anchors, "_kmeans_once", lambda boxes, *a: seen.append(len(boxes)) or once(boxes, *a))
    cfg = micro_cfg(tmp_path / "m.cfg", size=64)
    cfg.write_text(re.sub(r"anchors\s*=.*", "anchors = 1,1, 2,2, 3,3, 4,4, 5,5, 6,6", cfg.read_text()))
    lines = []
    check_anchors(parse_cfg(cfg), _labelled_samples(60), autoanchor=True, data="d", cfg="c",
                  say=lines.append, fit_boxes=50)
    assert " on a random 50 of the " in lines[0] and "fitted to the boxes" in lines[-1]
    assert seen and max(seen) <= 50


def test_anchors_command_fits_a_sample_and_scores_every_box(boxes_dataset, capsys):
    data = str(boxes_dataset / "images")
    assert main(["anchors", "--data", data, "--num", "3", "--fit-boxes", "4"]) == 0
    text = capsys.readouterr().out
    boxes = int(text.splitlines()[1].split()[0])
    assert f"k-means on a random 4 of the {boxes} boxes (--fit-boxes)" in text and boxes > 4
    assert main(["anchors", "--data", data, "--num", "3", "--fit-boxes", "0"]) == 0
    assert "k-means on a random" not in capsys.readouterr().out  # 0: every box
    assert main(["anchors", "--data", data, "--fit-boxes", "-1"]) == 1
    assert "--fit-boxes must be >= 0" in capsys.readouterr().err

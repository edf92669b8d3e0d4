"""The NMS caps of postprocess: results equal to uncapped per-class NMS (torchvision's batched_nms, what
postprocess called before the caps) when the caps do not bite, and when only max-det bites the best
detections of the uncapped NMS; counted where they bite; per-class for any box count."""

from __future__ import annotations

import pytest
import torch
from torchvision.ops import batched_nms

from turboyolo.boxes import cxcywh_to_xyxy
from turboyolo.model.postprocess import MIN_BLOCK, CapCounts, capped_nms, class_offset_boxes, postprocess
from turboyolo.options import MAX_DET


def reference(decoded: torch.Tensor, conf_thres: float, nms_thres: float, max_det: int | None = None):
    """Per image (boxes, scores, classes) by the pre-cap path: every candidate through batched_nms."""
    out = []
    for image in decoded:
        image = image[image[:, 4] > conf_thres]
        scores = image[:, 4:5] * image[:, 5:]
        box, cls = (scores > conf_thres).nonzero(as_tuple=True)
        boxes, score = cxcywh_to_xyxy(image[:, :4])[box], scores[box, cls]
        keep = batched_nms(boxes, score, cls, nms_thres)[:max_det]
        out.append((boxes[keep], score[keep], cls[keep]))
    return out


def same_rows(det: torch.Tensor, boxes: torch.Tensor, score: torch.Tensor, cls: torch.Tensor) -> None:
    """``det`` ``[n, 6]`` holds exactly the reference's detections, best score first. Rows of equal score
    are compared as sets: torchvision's per-class path sorts its result with an unstable sort."""
    expected = torch.cat((boxes, score[:, None], cls[:, None].to(boxes.dtype)), 1)
    assert det.shape == expected.shape and (det[:-1, 4] >= det[1:, 4]).all()

    def canonical(rows: torch.Tensor) -> list:
        return sorted(rows.tolist(), key=lambda r: (-r[4], r[5], *r[:4]))

    assert canonical(det) == canonical(expected)
    assert torch.equal(det[:, 4], score)


def random_decoded(seed: int, images: int, anchors: int, classes: int, side: float = 320.0,
                   spread: float = 0.3, dtype=torch.float32) -> torch.Tensor:
    """``[B, N, 5 + C]`` decoded outputs: boxes of varied size clustered so that NMS has work, objectness
    and class probabilities spread over [0, 1]."""
    gen = torch.Generator().manual_seed(seed)
    centres = torch.rand(images, 8, 2, generator=gen) * side
    pick = torch.randint(0, 8, (images, anchors), generator=gen)
    noise = torch.randn(images, anchors, 2, generator=gen) * side * 0.05
    xy = torch.gather(centres, 1, pick[..., None].expand(-1, -1, 2)) + noise
    wh = (torch.rand(images, anchors, 2, generator=gen) * spread + 0.02) * side
    probs = torch.rand(images, anchors, 1 + classes, generator=gen, dtype=torch.float64) ** 0.5
    return torch.cat((xy.double(), wh.double(), probs), -1).to(dtype)


CASES = [  # seed, images, anchors, classes, conf: from a few candidates to torchvision's per-class loop
    (0, 3, 60, 2, 0.25),
    (1, 2, 300, 5, 0.1),
    (2, 2, 1500, 3, 0.3),
    (3, 1, 1200, 12, 0.05),
]


@pytest.mark.parametrize("seed, images, anchors, classes, conf", CASES)
def test_same_detections_as_uncapped_nms_below_the_caps(seed, images, anchors, classes, conf):
    decoded = random_decoded(seed, images, anchors, classes)
    caps = CapCounts()
    got = postprocess(decoded, conf, 0.45, max_det=None, max_candidates=10**9, caps=caps)
    for det, (boxes, score, cls) in zip(got, reference(decoded, conf, 0.45)):
        assert len(boxes) > 0
        same_rows(det, boxes, score, cls)
    assert (caps.images, caps.max_det, caps.candidates) == (images, 0, 0)
    # under the default caps: the same result, cut to max-det where there are more (and counted there)
    again = CapCounts()
    capped = postprocess(decoded, conf, 0.45, caps=again)
    assert all(torch.equal(a[:MAX_DET], b) for a, b in zip(got, capped))
    assert (again.max_det, again.candidates) == (sum(len(d) > MAX_DET for d in got), 0)
    assert again.most_candidates == max(int(((d[:, 4:5] * d[:, 5:] > conf) & (d[:, 4:5] > conf)).sum())
                                        for d in decoded)


@pytest.mark.parametrize("seed, images, anchors, classes, conf", CASES)
def test_max_det_keeps_the_best_of_the_uncapped_nms(seed, images, anchors, classes, conf):
    decoded = random_decoded(seed, images, anchors, classes, dtype=torch.float64)  # no tie at the cut
    full = reference(decoded, conf, 0.45)
    max_det = max(1, min(len(boxes) for boxes, _, _ in full) // 3)
    caps = CapCounts()
    got = postprocess(decoded, conf, 0.45, max_det=max_det, caps=caps)
    for det, (boxes, score, cls) in zip(got, full):
        assert len(det) == max_det  # the highest-scoring survivors of the whole NMS
        same_rows(det, boxes[:max_det], score[:max_det], cls[:max_det])
    assert (caps.max_det, caps.candidates) == (images, 0)
    assert f"{max_det} detections (--max-det) reached on {images} of {images} images" in caps.summary()


def box_everywhere(images: int, anchors: int, classes: int, seed: int = 0) -> torch.Tensor:
    """An untrained model's output (float64: no ties at the max-det cut): objectness and every class
    probability high on every anchor, boxes on a grid of cells with a little noise."""
    gen = torch.Generator().manual_seed(seed)
    f64 = dict(generator=gen, dtype=torch.float64)
    side = int(anchors**0.5)
    ys, xs = torch.meshgrid(torch.arange(side), torch.arange(anchors // side), indexing="ij")
    xy = torch.stack((xs, ys), -1).reshape(-1, 2).double() * 16 + 8
    count = len(xy)
    xy = xy[None].expand(images, -1, -1) + torch.rand(images, count, 2, **f64)
    wh = 24 + torch.rand(images, count, 2, **f64) * 16
    probs = 0.6 + 0.4 * torch.rand(images, count, 1 + classes, **f64)
    return torch.cat((xy, wh, probs), -1)


def test_caps_bite_on_a_box_everywhere_output():
    decoded = box_everywhere(images=3, anchors=400, classes=20)  # 8,000 candidates per image
    caps = CapCounts()
    got = postprocess(decoded, 0.001, 0.5, max_det=100, max_candidates=6000, caps=caps)
    full = reference(decoded, 0.001, 0.5)
    for det, (boxes, score, cls) in zip(got, full):
        assert len(det) == 100 and len(boxes) > 100
        same_rows(det, boxes[:100], score[:100], cls[:100])  # the highest-scoring survivors
    # max-det bit everywhere; the candidate cap did not change anything (100 kept from the best 6,000)
    assert (caps.images, caps.max_det, caps.candidates, caps.most_candidates) == (3, 3, 0, 8000)
    assert caps.summary() == ("caps: 100 detections (--max-det) reached on 3 of 3 images, lower-scoring ones "
                              "dropped")


def test_the_candidate_cap_bites_when_nms_keeps_too_few_of_them():
    # every box of a class on one spot: NMS keeps one per class, 20 per image, fewer than max-det
    decoded = box_everywhere(images=2, anchors=400, classes=20)
    decoded[..., :4] = torch.tensor([100.0, 100.0, 30.0, 30.0], dtype=torch.float64)
    caps = CapCounts()
    got = postprocess(decoded, 0.001, 0.5, max_det=300, max_candidates=500, caps=caps)
    best = decoded[..., 4:5] * decoded[..., 5:]
    for det, scores in zip(got, best):
        top500 = scores.flatten().sort(descending=True).values[499]
        assert (det[:, 4] >= top500).all()  # only the best 500 candidates were examined
        assert len(det) == len(det[:, 5].unique()) <= 20
    assert (caps.images, caps.max_det, caps.candidates) == (2, 0, 2)
    said = caps.summary()
    assert "candidates cut to the best 500 (--max-candidates) before NMS on 2 images (up to 8000" in said
    uncapped = postprocess(decoded, 0.001, 0.5, max_det=300, max_candidates=None)
    assert all(len(d) == 20 for d in uncapped)  # one per class


def test_one_class_never_suppresses_another_at_negative_coordinates():
    # torchvision's offset (largest coordinate + 1) puts class 1's box exactly on class 0's here
    boxes = torch.tensor([[-600.0, -600.0, 500.0, 500.0], [-1101.0, -1101.0, -1.0, -1.0]])
    scores, classes = torch.tensor([0.9, 0.8]), torch.tensor([0, 1])
    assert len(batched_nms(boxes, scores, classes, 0.5)) == 1  # the trick's failure
    keep, reached, capped = capped_nms(boxes, scores, classes, 0.5)
    assert keep.tolist() == [0, 1] and not reached and not capped
    shifted = class_offset_boxes(boxes, classes)
    assert shifted[1, 0] > shifted[0, 2]


def test_blocks_match_one_nms_call():
    decoded = random_decoded(7, 1, 2000, 4, spread=0.6, dtype=torch.float64)
    boxes = reference(decoded, 0.05, 0.3)[0][0]
    image = decoded[0][decoded[0][:, 4] > 0.05]
    probs = image[:, 4:5] * image[:, 5:]
    box, classes = (probs > 0.05).nonzero(as_tuple=True)
    candidates, scores = cxcywh_to_xyxy(image[:, :4])[box], probs[box, classes]
    assert len(boxes) > 4 * MIN_BLOCK
    for max_det in (1, 7, 50, 2 * MIN_BLOCK, len(boxes)):  # blocks of 64, 128, ...: several below len(boxes)
        keep, _, _ = capped_nms(candidates, scores, classes, 0.3, max_det=max_det, max_candidates=None)
        assert torch.equal(candidates[keep], boxes[:max_det])


def test_diou_nms_takes_the_caps_too():
    decoded = box_everywhere(images=1, anchors=100, classes=3)
    caps = CapCounts()
    got = postprocess(decoded, 0.001, 0.5, max_det=5, nms_kind="diounms", caps=caps)[0]
    assert len(got) == 5 and (got[:-1, 4] >= got[1:, 4]).all()
    assert (caps.max_det, caps.candidates) == (1, 0)


def test_decode_and_nms_run_on_one_thread_and_give_the_threads_back(monkeypatch):
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    seen = []
    real = torch.set_num_threads
    monkeypatch.setattr(torch, "set_num_threads", lambda n: (seen.append(n), real(n)))
    try:
        postprocess(random_decoded(0, 1, 60, 2), 0.25, 0.45)
        assert seen == [1, 2] and torch.get_num_threads() == 2
        with pytest.raises(IndexError):  # given back on an error too
            postprocess(random_decoded(0, 1, 60, 2), 0.25, 0.45, letterboxes=[])
        assert torch.get_num_threads() == 2
    finally:
        real(before)

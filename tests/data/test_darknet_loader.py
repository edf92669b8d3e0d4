"""``--loader darknet``: pjreddie's ``load_data_detection`` transcribed (exact/augment.py) and its
sampler (exact/loader.py).

Where ``libdarknet.so`` is installed (the Debian ``darknet`` package) the transcription is compared with
Darknet's own function through ctypes, fed the same random numbers (glibc's ``rand()`` after the same
``srand``): bit for bit without jitter or colour change, and within float rounding with them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from turboyolo.data.decode import decode_image
from turboyolo.data.scan import Sample
from turboyolo.exact.augment import F32, DarknetAugment, Draws, darknet_sample, distort
from turboyolo.exact.loader import DarknetBatchSampler, build_darknet_loader

LIBDARKNET = Path("/usr/lib/darknet/libdarknet.so")


def _image(tmp_path, width, height, seed=0, symmetric=False) -> Path:
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    pixels[: height // 3, : width // 3] = 128  # a flat, grey patch (the HSV round trip's special case)
    if symmetric:
        pixels[:, width - width // 2:] = pixels[:, : width // 2][:, ::-1]
    path = tmp_path / "images" / f"im{seed}_{width}x{height}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels).save(path)
    return path


LABELS = np.array([[3, 0.25, 0.5, 0.3, 0.4], [7, 0.75, 0.5, 0.3, 0.4], [1, 0.5, 0.1, 0.05, 0.08]], np.float32)


def test_unchanged_square_image_is_placed_as_it_is(tmp_path):
    """jitter 0, hue 0, saturation = exposure = 1: a 64 x 64 image on a 64 x 64 network comes out as its
    pixels / 255 (the HSV round trip moves some by float rounding only), flipped when drawn so."""
    path = _image(tmp_path, 64, 64)
    image, _ = decode_image(path)
    flips = set()
    for seed in range(8):
        out, boxes, placement = darknet_sample(image, LABELS, (64, 64), DarknetAugment(),
                                               Draws(np.random.default_rng(seed)))
        expected = image.astype(F32) / F32(255)
        expected = expected[:, ::-1] if placement.flip else expected
        assert out.dtype == np.float32 and np.abs(out - expected).max() <= 4e-7
        order = np.argsort(boxes[:, 0])
        want = LABELS.copy()
        if placement.flip:
            want[:, 1] = 1 - want[:, 1]
        np.testing.assert_allclose(boxes[order], want[np.argsort(want[:, 0])], atol=1e-6)
        flips.add(placement.flip)
    assert flips == {True, False}


def test_wide_image_keeps_its_aspect_on_grey(tmp_path):
    """A 2:1 image fills the width of a square network at a random height; the rest is 0.5 grey."""
    image, _ = decode_image(_image(tmp_path, 128, 64))
    out, boxes, placement = darknet_sample(image, LABELS, (64, 64), DarknetAugment(flip=0.0),
                                           Draws(np.random.default_rng(1)))
    top, height = int(placement.dy), int(placement.nh)
    assert (placement.nw, height) == (64, 32) and 0 <= top <= 32
    assert np.all(out[:top] == F32(0.5)) and np.all(out[top + height:] == F32(0.5))
    assert np.allclose(boxes[:, 2], (top + LABELS[:, 2] * 32) / 64, atol=1 / 64)


def test_distort_identity_only_rounds():
    rng = np.random.default_rng(0)
    pixels = rng.random((16, 16, 3)).astype(F32)
    pixels[0, 0] = 0.25  # grey: hue undefined in Darknet's code (0 / 0), saturation 0
    pixels[0, 1] = 0.0
    out = distort(pixels.copy(), 0.0, 1.0, 1.0)
    assert np.abs(out - pixels).max() < 1e-6 and np.array_equal(out[0, :2], pixels[0, :2])


def test_sampler_draws_batch_entries_with_replacement():
    """One list entry, batch 2 in 2 mini-batches: one iteration of two draws of it; ten entries, batch 4 in
    2: ceil(10 / 4) = 3 iterations; the draws differ per epoch and repeat for the same epoch."""
    one = DarknetBatchSampler(1, 1, 2, (64, 64))
    assert len(one) == 2 and [len(batch) for batch in one] == [1, 1]
    assert {key[0] for batch in one for key in batch} == {0}
    many = DarknetBatchSampler(10, 2, 2, (64, 64), seed=3)
    first = [key for batch in many for key in batch]
    assert len(many) == 6 and len(first) == 12 and len({key[3] for key in first}) == 12  # own draws
    assert [key for batch in many for key in batch] == first
    many.set_epoch(1)
    assert [key[0] for batch in many for key in batch] != [key[0] for key in first]
    drawn = np.bincount([key[0] for epoch in range(200) for batch in _epoch(many, epoch) for key in batch],
                        minlength=10)
    assert drawn.min() > 0.7 * drawn.mean()  # uniform


def _epoch(sampler, epoch):
    sampler.set_epoch(epoch)
    return list(sampler)


def test_loader_yields_float_batches(tmp_path):
    path = _image(tmp_path, 64, 64, symmetric=True)
    sample = Sample(image=path, labels=LABELS, hw=(64, 64))
    loader = build_darknet_loader([sample], net_wh=(64, 64), batch_size=2, batches_per_iteration=2,
                                  params=DarknetAugment(), workers=0)
    batches = list(loader)
    assert len(batches) == 2
    images, targets, metas = batches[0]
    assert images.dtype.is_floating_point and tuple(images.shape) == (2, 3, 64, 64)
    assert targets.shape == (6, 6) and set(targets[:, 0].tolist()) == {0.0, 1.0}
    assert str(metas[0].path) == str(path)


# ---- against libdarknet.so -------------------------------------------------------------------------

# libdarknet.so links the system OpenCV, which clashes with the opencv-python that turboyolo imports: it
# runs in a child process that loads nothing else.
DARKNET_INPUT = r"""
import ctypes, sys, numpy as np
class M(ctypes.Structure):
    _fields_ = [("rows", ctypes.c_int), ("cols", ctypes.c_int),
                ("vals", ctypes.POINTER(ctypes.POINTER(ctypes.c_float)))]
class D(ctypes.Structure):
    _fields_ = [("w", ctypes.c_int), ("h", ctypes.c_int), ("X", M), ("y", M), ("shallow", ctypes.c_int),
                ("num_boxes", ctypes.c_void_p), ("boxes", ctypes.c_void_p)]
lib = ctypes.CDLL(sys.argv[1])
lib.load_data_detection.restype = D
lib.load_data_detection.argtypes = ([ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)] + [ctypes.c_int] * 5
                                    + [ctypes.c_float] * 4)
path, out, w, h, seed = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
jitter, hue, sat, exp = (float(v) for v in sys.argv[7:11])
libc = ctypes.CDLL(None)
libc.srand(seed)
d = lib.load_data_detection(1, (ctypes.c_char_p * 1)(path.encode()), 1, w, h, 90, 80, jitter, hue, sat, exp)
np.savez(out, x=np.ctypeslib.as_array(d.X.vals[0], (d.X.cols,)).copy(),
         y=np.ctypeslib.as_array(d.y.vals[0], (d.y.cols,)).copy())
"""


def darknet_input(tmp_path, path, net, params, seed):
    # (Darknet finds the labels by replacing "images", "raw", ... in the path: no test name holds them)
    """``load_data_detection`` of libdarknet.so after ``srand(seed)``: (float32 [h, w, 3], truths [M, 5])."""
    import subprocess
    import sys

    out = tmp_path / f"darknet_{seed}.npz"
    subprocess.run([sys.executable, "-c", DARKNET_INPUT, str(LIBDARKNET), str(path), str(out), str(net[0]),
                    str(net[1]), str(seed), *(str(v) for v in (params.jitter, params.hue, params.saturation,
                                                                params.exposure))], check=True)
    with np.load(out) as data:
        truth = data["y"].reshape(90, 5)
        return data["x"].reshape(3, net[1], net[0]).transpose(1, 2, 0), truth[truth[:, 2] > 0]


class GlibcRand:
    """glibc's ``rand()`` after ``srand(seed)`` (its TYPE_3 additive generator: x[i] = x[i-31] + x[i-3] mod
    2^32, output x[i] >> 1, after 310 discarded), computed here: the C library's own state is shared by
    every thread of the test process, so a call from anywhere else would shift the sequence."""

    def __init__(self, seed: int):
        state = [seed or 1]
        for _ in range(1, 31):
            state.append(16807 * state[-1] % 2147483647)
        state += state[:3]
        for _ in range(34, 344):
            state.append((state[-31] + state[-3]) & 0xFFFFFFFF)
        self.state = state[-34:]

    def __call__(self) -> int:
        value = (self.state[-31] + self.state[-3]) & 0xFFFFFFFF
        self.state = self.state[1:] + [value]
        return value >> 1


class GlibcDraws(Draws):
    """Darknet's own random numbers: ``rand()`` of the C library libdarknet uses, after ``srand(seed)``."""

    def __init__(self, rand: GlibcRand):
        self.rand = rand

    def unit(self) -> float:
        return float(F32(F32(self.rand()) / F32(2147483647)))  # (float)rand() / RAND_MAX

    def coin(self) -> bool:
        return bool(self.rand() % 2)

    def index(self, n: int) -> int:
        return self.rand() % n


@pytest.fixture(scope="module")
def libc():
    if not LIBDARKNET.exists():
        pytest.skip("libdarknet.so not installed (apt-get install darknet)")
    lib = ctypes.CDLL(ctypes.util.find_library("c"))
    lib.rand.restype = ctypes.c_int
    return lib


def test_glibc_rand_is_the_c_librarys(libc):
    for seed in (0, 1, 6, 12345):
        libc.srand(seed)
        expected = [libc.rand() for _ in range(400)]
        ours = GlibcRand(seed)
        assert [ours() for _ in range(400)] == expected


@pytest.mark.darknet
@pytest.mark.parametrize(("size", "net", "params", "exact"), [
    ((64, 64), (64, 64), DarknetAugment(), True),
    ((96, 96), (64, 64), DarknetAugment(), True),  # resized
    ((50, 70), (64, 64), DarknetAugment(), False),  # tall: random offset, scale 45/50: within 5e-7
    ((80, 60), (96, 64), DarknetAugment(jitter=0.3, hue=0.1, saturation=1.5, exposure=1.5), False),
])
def test_same_numbers_give_darknets_input(tmp_path, libc, size, net, params, exact):
    path = _image(tmp_path, *size, seed=size[0])
    (tmp_path / "labels").mkdir(exist_ok=True)
    (tmp_path / "labels" / (path.stem + ".txt")).write_text(
        "".join(f"{int(c)} {x:.6f} {y:.6f} {w:.6f} {h:.6f}\n" for c, x, y, w, h in LABELS))
    labels = np.array([[float(v) for v in line.split()] for line in
                       (tmp_path / "labels" / (path.stem + ".txt")).read_text().splitlines()], np.float32)
    image, _ = decode_image(path)
    flips = set()
    for seed in range(1, 7):
        theirs, truth = darknet_input(tmp_path, path, net, params, seed)
        rand = GlibcRand(seed)
        rand()  # get_random_paths: one draw per image
        ours, boxes, placement = darknet_sample(image, labels, net, params, GlibcDraws(rand))
        flips.add(placement.flip)
        if exact:
            assert np.array_equal(ours, theirs), f"seed {seed}"
            assert np.array_equal(boxes[:, 1:], truth[:, :4]) and np.array_equal(boxes[:, 0], truth[:, 4])
        else:
            tolerance = 1e-6 if params.deterministic else 1e-4
            assert np.abs(ours - theirs).max() < tolerance, f"seed {seed}"
            np.testing.assert_allclose(boxes[:, 1:], truth[:, :4], atol=1e-6)
            assert np.array_equal(boxes[:, 0], truth[:, 4])
    assert flips == {True, False}


def test_an_image_listed_twice_is_drawn_twice_as_often(tmp_path):
    """Darknet draws list entries: a.png listed twice and b.png once -> a drawn 2/3 of the time. The scan
    keeps one sample per image (and names the second entry); `list_entries` gives the darknet loader the
    list as written."""
    from turboyolo.data.scan import label_path_for, scan_dataset

    a, b = _image(tmp_path / "a", 64, 64, symmetric=True), _image(tmp_path / "b", 64, 64, symmetric=True)
    for image in (a, b):
        label_path_for(image).parent.mkdir(parents=True, exist_ok=True)
        label_path_for(image).write_text("0 0.5 0.5 0.25 0.25\n")
    (tmp_path / "train.txt").write_text(f"{a}\n{b}\n{a}\n")
    listing = tmp_path / "train.txt"
    (tmp_path / "t.data").write_text(f"classes=1\ntrain={listing}\nvalid={listing}\n")
    scan = scan_dataset(tmp_path / "t.data", "train", names=["x"], use_cache=False)
    assert [s.image for s in scan.samples] == [a, b]
    assert any("listed twice" in reason for _, reason in scan.excluded)
    entries = scan.list_entries()
    assert [s.image for s in entries] == [a, a, b]
    sampler = DarknetBatchSampler(len(entries), 4, 1, (64, 64))
    drawn = [entries[key[0]].image for epoch in range(300) for batch in _epoch(sampler, epoch)
             for key in batch]
    share = drawn.count(a) / len(drawn)
    assert abs(share - 2 / 3) < 0.05, share  # 900 draws: 0.05 is over 3 standard deviations

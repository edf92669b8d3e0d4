"""A JPEG's structure read as libjpeg reads it, without decoding a pixel: the check of the scan.

:func:`jpeg_header` walks every marker segment from SOI to EOI and checks each one as libjpeg-turbo does
before it decodes (``jdmarker.c``, ``jdinput.c``, ``jdhuff.c``, ``jdphuff.c``), so a file that libjpeg
would stop on with a fatal error, or with a warning that the strict decode (:mod:`turboyolo.data.decode`)
treats as an error, is named here already:

- segment lengths ("Bogus marker length"): frame, scan, Huffman, quantisation, restart and
  arithmetic-conditioning segments must be exactly as long as what they hold;
- the frame: one, before the first scan; 8-bit samples; 1, 3 or 4 components, sampling factors 1-4 of a
  kind the strict decoder's API reads (4:4:4, 4:2:2, 4:2:0, 4:4:0, 4:1:1, 4:4:1); at most 65500 px a
  side; a coding process libjpeg reads;
- every scan: 1-4 components of the frame, each once; at most 10 blocks per interleaved MCU; the
  quantisation table of each component defined before its first scan; the Huffman tables it uses defined
  before it and valid (a complete prefix code, DC symbols <= 15; a baseline file has the standard
  tables when it defines none); a sequential scan's spectral selection 0-63 with no successive
  approximation; a progressive scan's parameters valid ("Invalid progressive parameters") and in a
  consistent sequence ("Inconsistent progression sequence": each refinement follows the pass before);
- inside each scan's entropy-coded data only stuffed ``FF 00``, fill bytes and restart markers in
  sequence (random bytes almost always hold some other ``FF xx``), and an end-of-image marker after the
  last scan (a truncated file has none). Data after it (camera trailers, an MPO's second picture) is
  allowed.

The scan's check (``size`` given) reads a file's headers up to its first scan and its end only: every
segment before the first scan's data checked as above, and an end-of-image marker after it (a truncated
file has none). A progressive file's later scans (their headers, the tables between them, stray markers in
their data) are walked by the first decode of the file (:func:`turboyolo.data.decode.decode_image`), which
checks the whole structure as above before it decodes; so is what only a decode finds (entropy-coded data
that is wrong without a stray marker, e.g. zeros). Walking every scan in the scan read a progressive photo
whole: 0.6-0.9 CPU ms per 2.5-20 MP photo against 0.1 for its head and tail (docs/PERFORMANCE.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

JPEG_SOI = b"\xff\xd8"
SOS, EOI = 0xDA, 0xD9
SOF_PROGRESSIVE = 0xC2
# Markers libjpeg accepts (jdmarker.c read_markers); anything else is fatal there, and corruption here.
SOF = frozenset((0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF))
_SEGMENTS = SOF | frozenset((0xC4, 0xCC, 0xDA, 0xDB, 0xDC, 0xDD, 0xFE)) | frozenset(range(0xE0, 0xF0))
STANDALONE = frozenset(range(0xD0, 0xD8)) | {0x01}
_DHT, _DAC, _DQT, _DRI, _APP0, _APP1, _APP2, _APP14 = 0xC4, 0xCC, 0xDB, 0xDD, 0xE0, 0xE1, 0xE2, 0xEE
_HIERARCHICAL = frozenset((0xC5, 0xC6, 0xC7, 0xCD, 0xCE, 0xCF))  # libjpeg: "Unsupported JPEG process"
_SEQUENTIAL_HUFFMAN = frozenset((0xC0, 0xC1))
_PROGRESSIVE = frozenset((0xC2, 0xCA))
_LOSSLESS = frozenset((0xC3, 0xCB))
_MAX_DIMENSION = 65500
_MAX_BLOCKS_IN_MCU = 10
_EXIF, _XMP = b"Exif\x00\x00", b"http://ns.adobe.com/xap/1.0/\x00"


class JpegProblem(ValueError):
    """What is wrong with a JPEG's structure; the message names it and the byte where it is."""


@dataclass(frozen=True)
class JpegHeader:
    """What a JPEG's headers declare (after :func:`jpeg_header` checked them)."""

    width: int
    height: int
    components: int  # 1 grey, 3 colour, 4 CMYK / YCCK
    progressive: bool
    orientation: int  # EXIF (else XMP) orientation, 1..8; 1 when absent or unreadable


class NeedsMore(Exception):
    """:func:`jpeg_header` was given the first part of a file and needs the rest."""


def jpeg_header(data: bytes, *, size: int | None = None, tail: bytes | None = None) -> JpegHeader:
    """The headers of a JPEG file, every segment checked (see the module docstring).

    Args:
        data: the whole file; or, with ``size``, the file or its first bytes.
        size: given (the scan's check): the file's size. The file is then checked up to its first scan's
            header and for an end-of-image marker after it in ``tail``; the entropy-coded data and any
            later scans are not walked (the first decode walks and reads them).
        tail: with ``size``, the file's last bytes (default: ``data``, when it is the whole file).

    Raises:
        JpegProblem: what libjpeg would refuse, or a truncated or damaged structure, and where.
        NeedsMore: given the first part of a file, the walk needs the rest: call again with it all.
    """
    whole = size is None
    size = len(data) if whole else size
    have = len(data)
    if data[:2] != JPEG_SOI:
        raise JpegProblem("not a JPEG file (no start-of-image marker)")
    frame = _Frame()
    pos, ff = 2, None
    while True:
        if pos + 4 > have and have < size:
            raise NeedsMore
        if pos >= size:
            raise JpegProblem(f"truncated JPEG: the file ends at byte {size} before the end-of-image marker")
        if data[pos] != 0xFF:
            raise JpegProblem(f"corrupt JPEG: stray bytes at byte {pos} where a marker should start")
        while pos < have and data[pos] == 0xFF:  # fill bytes
            pos += 1
        if pos + 3 > have and have < size:
            raise NeedsMore
        if pos >= size:
            raise JpegProblem(f"truncated JPEG: the file ends at byte {size} inside a marker")
        marker, at = data[pos], pos - 1
        pos += 1
        if marker == EOI:
            return frame.header()
        if marker in STANDALONE:
            continue
        if marker not in _SEGMENTS:
            raise JpegProblem(f"corrupt JPEG: invalid marker 0xFF{marker:02X} at byte {at}")
        if pos + 2 > size:
            raise JpegProblem(f"truncated JPEG: the file ends at byte {size} inside a marker")
        length = int.from_bytes(data[pos:pos + 2], "big")
        if length < 2 or pos + length > size:
            what = "truncated" if length >= 2 else "corrupt"
            raise JpegProblem(f"{what} JPEG: marker 0xFF{marker:02X} at byte {at} declares {length} bytes "
                              "past the end")
        if pos + length > have:
            raise NeedsMore
        frame.segment(marker, data[pos + 2:pos + length], at)
        pos += length
        if marker != SOS:
            continue
        if not whole:  # the scan's check: the rest is the first decode's
            return _ends(frame, pos, size, data if tail is None else tail)
        if have < size:
            raise NeedsMore
        if ff is None:
            ff = ff_bytes(data)
        pos = _scan_end(ff, pos)


def _ends(frame: _Frame, pos: int, size: int, tail: bytes) -> JpegHeader:
    """The header of a file whose first scan starts at ``pos``, when an end-of-image marker follows it."""
    start = size - len(tail)
    if tail.rfind(b"\xff\xd9", max(0, pos - start)) >= 0:
        return frame.header()
    if start > pos:  # the marker may lie before the tail (a long trailer after it)
        raise NeedsMore
    raise JpegProblem(f"truncated JPEG: the image data that starts at byte {pos} runs to the end of the file "
                      "without an end-of-image marker")


def jpeg_problem(data: bytes) -> str | None:
    """What is wrong with this JPEG's structure (:func:`jpeg_header`), or None."""
    try:
        jpeg_header(data)
    except JpegProblem as problem:
        return str(problem)
    return None


_CHUNK = 1 << 18  # bytes compared at a time: a small scratch array, not one as large as the file


def ff_bytes(data: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every FF of a JPEG file: (positions, the byte after each, which are restart markers, which end a
    scan), found once per file."""
    array = np.frombuffer(data, np.uint8)
    count = len(array) - 1
    scratch = np.empty(min(max(count, 0), _CHUNK), bool)
    positions = []
    for start in range(0, count, _CHUNK):
        piece = array[start:min(start + _CHUNK, count)]
        positions.append(np.flatnonzero(np.equal(piece, 0xFF, out=scratch[:len(piece)])) + start)
    ff = np.concatenate(positions) if positions else np.zeros(0, np.intp)
    after = array[ff + 1]
    restart = (after >= 0xD0) & (after <= 0xD7)
    return ff, after, restart, (after != 0x00) & (after != 0xFF) & ~restart


def _scan_end(ff, pos: int) -> int:
    """Where the entropy-coded data that starts at ``pos`` ends (its next marker that is not a restart):
    inside it ``FF 00`` is a stuffed FF, ``FF FF`` fill and ``FF D0``..``FF D7`` a restart marker, which
    must come in sequence."""
    ff, after, restart, ends_scan = ff
    first = int(np.searchsorted(ff, pos))
    stops = np.flatnonzero(ends_scan[first:])
    if not len(stops):
        raise JpegProblem(f"truncated JPEG: the image data that starts at byte {pos} runs to the end of the "
                          "file without an end-of-image marker")
    stop = first + int(stops[0])
    numbers = after[first:stop][restart[first:stop]].astype(np.int64) - 0xD0
    wrong = np.flatnonzero(numbers != np.arange(len(numbers)) % 8)
    if len(wrong):
        where = int(ff[first:stop][restart[first:stop]][wrong[0]])
        raise JpegProblem(f"corrupt JPEG: restart marker out of sequence at byte {where} (garbage in the "
                          "image data)")
    return int(ff[stop])


def segments(data: bytes) -> Iterator[tuple[int, int, int]]:
    """(marker, start, end) of each segment of a JPEG that passed :func:`jpeg_header`, from the one after
    SOI to EOI; a scan's segment includes its entropy-coded data."""
    pos, ff = 2, None
    while True:
        while data[pos] == 0xFF:  # fill bytes may come before a marker
            pos += 1
        start = pos - 1  # the marker's own FF
        marker = data[pos]
        pos += 1
        if marker not in STANDALONE and marker != EOI:
            pos += int.from_bytes(data[pos:pos + 2], "big")
        if marker == SOS:
            if ff is None:
                ff = ff_bytes(data)
            first = int(np.searchsorted(ff[0], pos))
            pos = int(ff[0][first + int(np.flatnonzero(ff[3][first:])[0])])
        yield marker, start, pos
        if marker == EOI:
            return


class _Frame:
    """What libjpeg knows while it reads a JPEG's markers: the frame, the tables defined so far, each
    component's progression. :meth:`segment` checks one segment as libjpeg would and raises
    :class:`JpegProblem` where libjpeg stops (or warns, which the strict decode refuses)."""

    def __init__(self) -> None:
        self.sof: int | None = None
        self.size = (0, 0)
        self.components: list[tuple[int, int, int, int]] = []  # (id, h, v, quantisation table)
        self.huffman: dict[tuple[int, int], tuple[bytes, bytes]] = {}  # (0 DC / 1 AC, slot) -> table
        self.quant: set[int] = set()
        self.latched: set[int] = set()  # components whose quantisation table was taken (first scan)
        self.coef_bits: list[list[int]] = []  # progressive: per component, per coefficient, Al so far
        self.scans = 0
        self.single_scan = False  # the first scan held every component of a sequential frame
        self.exif: bytes | None = None
        self.xmp: bytes | None = None

    def header(self) -> JpegHeader:
        """At the end-of-image marker: the header, or what libjpeg says of a file without a picture."""
        if self.sof is None or not self.scans:
            raise JpegProblem("corrupt JPEG: end-of-image marker before any image data")
        orientation = exif_orientation(self.exif) if self.exif is not None else None
        if orientation is None and self.xmp is not None:
            orientation = xmp_orientation(self.xmp)
        return JpegHeader(self.size[0], self.size[1], len(self.components), self.sof in _PROGRESSIVE,
                          orientation or 1)

    def segment(self, marker: int, body: bytes, at: int) -> None:
        if marker in SOF:
            self.frame(marker, body, at)
        elif marker == SOS:
            self.scan(body, at)
        elif marker == _DHT:
            self.huffman_tables(body, at)
        elif marker == _DQT:
            self.quant_tables(body, at)
        elif marker == _DRI and len(body) != 2:
            raise _bogus("restart interval", at)
        elif marker == _DAC:
            self.conditioning(body, at)
        elif marker == _APP1:
            if body.startswith(_EXIF) and self.exif is None:
                self.exif = body[len(_EXIF):]
            elif body.startswith(_XMP):
                self.xmp = body[len(_XMP):]

    def frame(self, marker: int, body: bytes, at: int) -> None:
        """SOFn (jdmarker.c get_sof, jdinput.c initial_setup)."""
        if self.sof is not None:
            raise JpegProblem(f"corrupt JPEG: a second frame header (0xFF{marker:02X}) at byte {at}")
        if marker in _HIERARCHICAL:
            raise JpegProblem(f"unsupported JPEG: hierarchical coding (frame header 0xFF{marker:02X} at byte "
                              f"{at}), which no decoder here reads")
        if len(body) < 6:
            raise _bogus("frame header", at)
        precision, height, width = body[0], int.from_bytes(body[1:3], "big"), int.from_bytes(body[3:5], "big")
        count = body[5]
        if not (width and height and count):
            raise JpegProblem(f"corrupt JPEG: empty image ({width} x {height} px, {count} components) in the "
                              f"frame header at byte {at}")
        if len(body) != 6 + 3 * count:
            raise _bogus("frame header", at)
        if max(width, height) > _MAX_DIMENSION:
            raise JpegProblem(f"JPEG of {width} x {height} px (frame header at byte {at}): over libjpeg's "
                              f"{_MAX_DIMENSION} px a side")
        if precision != 8:
            raise JpegProblem(f"{precision}-bit JPEG (frame header at byte {at}); the decoders here read "
                              "8-bit samples")
        if count not in (1, 3, 4):
            raise JpegProblem(f"JPEG with {count} colour components (frame header at byte {at}); the "
                              "decoders here read 1 (grey), 3 (colour) or 4 (CMYK)")
        comps = [(body[6 + 3 * i], body[7 + 3 * i] >> 4, body[7 + 3 * i] & 15, body[8 + 3 * i])
                 for i in range(count)]
        if any(not (1 <= h <= 4 and 1 <= v <= 4) for _, h, v, _ in comps):
            raise JpegProblem(f"corrupt JPEG: bogus sampling factors in the frame header at byte {at}")
        if not _turbojpeg_sampling([(h, v) for _, h, v, _ in comps]):
            factors = ", ".join(f"{h}x{v}" for _, h, v, _ in comps)
            raise JpegProblem(f"JPEG with sampling factors {factors} (frame header at byte {at}), which the "
                              "strict decoder (libjpeg-turbo's TurboJPEG API) does not read; re-encode it "
                              "(4:4:4, 4:2:2, 4:2:0, 4:4:0, 4:1:1 or 4:4:1)")
        self.sof, self.size, self.components = marker, (width, height), comps
        self.coef_bits = [[-1] * 64 for _ in comps]

    def huffman_tables(self, body: bytes, at: int) -> None:
        """DHT (get_dht): each table's class and slot, counts within the segment, nothing left over."""
        pos = 0
        while len(body) - pos > 16:
            index, bits = body[pos], body[pos + 1:pos + 17]
            count = sum(bits)
            if count > 256 or count > len(body) - pos - 17:
                raise JpegProblem(f"corrupt JPEG: bogus Huffman table definition at byte {at}")
            kind = 1 if index & 0x10 else 0
            slot = index - 0x10 if kind else index
            if slot >= 4:
                raise JpegProblem(f"corrupt JPEG: Huffman table index {index:#04x} out of range at byte {at}")
            self.huffman[kind, slot] = (bits, body[pos + 17:pos + 17 + count])
            pos += 17 + count
        if pos != len(body):
            raise _bogus("Huffman table", at)

    def quant_tables(self, body: bytes, at: int) -> None:
        """DQT (get_dqt): slots 0-3, 64 values of 8 or 16 bits each, nothing left over."""
        pos = 0
        while pos < len(body):
            slot, wide = body[pos] & 15, body[pos] >> 4
            if slot >= 4:
                raise JpegProblem(f"corrupt JPEG: quantisation table index {slot} out of range at byte {at}")
            pos += 1 + 64 * (2 if wide else 1)
            self.quant.add(slot)
        if pos != len(body):
            raise _bogus("quantisation table", at)

    def conditioning(self, body: bytes, at: int) -> None:
        """DAC (get_dac): pairs of (table, value); a DC table's lower bound at most its upper one."""
        if len(body) % 2:
            raise _bogus("arithmetic conditioning", at)
        for index, value in zip(body[::2], body[1::2], strict=True):
            if index >= 32 or (index < 16 and (value & 15) > (value >> 4)):
                raise JpegProblem(f"corrupt JPEG: bad arithmetic conditioning table at byte {at}")

    def scan(self, body: bytes, at: int) -> None:
        """SOS (get_sos, per_scan_setup, latch_quant_tables and the entropy decoder's start of pass)."""
        if self.sof is None:
            raise JpegProblem(f"corrupt JPEG: scan at byte {at} before any frame header")
        count = body[0] if body else 0
        if len(body) != 4 + 2 * count or not 1 <= count <= 4:
            raise _bogus("scan header", at)
        if self.single_scan:
            raise JpegProblem(f"corrupt JPEG: a second scan at byte {at} after one that held the whole "
                              "picture (libjpeg: didn't expect more than one scan)")
        chosen = []
        for i in range(count):
            cid = body[1 + 2 * i]
            # libjpeg-turbo's lookup: the first component at or after this position with that id
            index = next((ci for ci in range(i, min(len(self.components), 4))
                          if self.components[ci][0] == cid and ci not in chosen), None)
            if index is None:
                raise JpegProblem(f"corrupt JPEG: invalid component id {cid} in the scan at byte {at}")
            chosen.append(index)
        tables = [(body[2 + 2 * i] >> 4, body[2 + 2 * i] & 15) for i in range(count)]
        ss, se, approx = body[1 + 2 * count:4 + 2 * count]
        ah, al = approx >> 4, approx & 15
        blocks = sum(self.components[c][1] * self.components[c][2] for c in chosen)
        if count > 1 and blocks > _MAX_BLOCKS_IN_MCU:
            raise JpegProblem(f"corrupt JPEG: sampling factors too large for the interleaved scan at byte "
                              f"{at}")
        if self.sof not in _LOSSLESS:
            for c in chosen:
                slot = self.components[c][3]
                if c not in self.latched and slot not in self.quant:
                    raise JpegProblem(f"corrupt JPEG: quantisation table {slot} used by the scan at byte "
                                      f"{at} was never defined")
                self.latched.add(c)
        if self.sof in _PROGRESSIVE:
            self.progression(chosen, (ss, se, ah, al), at)
        elif self.sof not in _LOSSLESS and (ss, se, ah, al) != (0, 63, 0, 0):
            raise JpegProblem(f"corrupt JPEG: invalid scan parameters for a sequential JPEG (Ss={ss} Se={se} "
                              f"Ah={ah} Al={al}) in the scan at byte {at}")
        if self.sof in _SEQUENTIAL_HUFFMAN or self.sof == SOF_PROGRESSIVE:
            self.uses_huffman(tables, (ss, ah), at)
        self.scans += 1
        self.single_scan = self.scans == 1 and self.sof not in _PROGRESSIVE and count == len(self.components)

    def progression(self, chosen: list[int], params: tuple[int, int, int, int], at: int) -> None:
        """A progressive scan's parameters (start_pass_phuff_decoder): a DC band alone or an AC band of
        one component; a refinement one bit below the pass before; the bands each follows."""
        ss, se, ah, al = params
        bad = (se != 0) if ss == 0 else (ss > se or se > 63 or len(chosen) != 1)
        if bad or (ah != 0 and al != ah - 1) or al > 13:
            raise JpegProblem(f"corrupt JPEG: invalid progressive parameters Ss={ss} Se={se} Ah={ah} Al={al} "
                              f"in the scan at byte {at}")
        for c in chosen:
            bits = self.coef_bits[c]
            if ss > 0 and bits[0] < 0:
                raise _inconsistent(c, 0, at)
            band = bits[ss:se + 1]  # each coefficient's last Al (-1: never coded, as 0 here)
            if (max(band) > 0 if ah == 0 else (min(band) != ah or max(band) != ah)):
                raise _inconsistent(c, ss + next(k for k, b in enumerate(band) if max(b, 0) != ah), at)
            bits[ss:se + 1] = [al] * len(band)

    def uses_huffman(self, tables: list[tuple[int, int]], params: tuple[int, int], at: int) -> None:
        """The Huffman tables a scan decodes with: defined by then (a baseline frame has the standard
        tables in the slots 0 and 1 it leaves empty) and valid (jpeg_make_d_derived_tbl)."""
        ss, ah = params
        if self.sof in _SEQUENTIAL_HUFFMAN and not self.scans:
            for key in ((0, 0), (0, 1), (1, 0), (1, 1)):
                self.huffman.setdefault(key, _STANDARD)
        if self.sof in _SEQUENTIAL_HUFFMAN:
            used = [(0, dc) for dc, _ in tables] + [(1, ac) for _, ac in tables]
        elif ss == 0:  # progressive DC: its first pass decodes with the DC table, a refinement with none
            used = [(0, dc) for dc, _ in tables] if ah == 0 else []
        else:
            used = [(1, ac) for _, ac in tables]
        for kind, slot in used:
            table = self.huffman.get((kind, slot))
            name = f"{'AC' if kind else 'DC'} {slot}"
            if table is None:
                raise JpegProblem(f"corrupt JPEG: Huffman table {name} used by the scan at byte {at} was "
                                  "never defined")
            if table is not _STANDARD and not _valid_huffman(*table, dc=kind == 0):
                raise JpegProblem(f"corrupt JPEG: bad Huffman table {name} used by the scan at byte {at}")


_STANDARD = (b"", b"")  # a standard table (valid) that libjpeg puts in an empty baseline slot


# TurboJPEG's subsampling kinds (turbojpeg.h tjMCUWidth / tjMCUHeight in blocks): 4:4:4, 4:2:2, 4:2:0,
# 4:4:0, 4:1:1, 4:4:1
_KNOWN_SAMPLING = {"444": (1, 1), "422": (2, 1), "420": (2, 2), "440": (1, 2), "411": (4, 1), "441": (1, 4)}


def _turbojpeg_sampling(factors: list[tuple[int, int]]) -> bool:
    """Whether TurboJPEG (the API the strict decoder uses) knows these sampling factors (turbojpeg.c
    getSubsamp): grey always; else the luma's factors one of its kinds with every chroma component at 1x1
    (a fourth, K, component as the luma), 4:2:2 and 4:4:0 written with a 2x2 luma, or every component
    alike (4:4:4 written with larger factors)."""
    if len(factors) == 1:
        return True
    luma, others = factors[0], factors[1:]
    for kind, mcu in _KNOWN_SAMPLING.items():
        expected = [(1, 1), (1, 1), mcu][:len(others)]
        if luma == mcu and others == expected:
            return True
        if luma == (2, 2) and kind in ("422", "440"):
            if others == [mcu[::-1], mcu[::-1], (2, 2)][:len(others)]:
                return True
        if kind == "444" and luma[0] * luma[1] <= _MAX_BLOCKS_IN_MCU // 3 and all(f == luma for f in others):
            return True
    return False


def _valid_huffman(bits: bytes, values: bytes, dc: bool) -> bool:
    """Whether the code lengths make a prefix code in which no code is all ones (Figure C.2 as libjpeg
    checks it) and, for a DC table, every symbol is a bit count of at most 15."""
    code, lengths = 0, [n for n, count in enumerate(bits, 1) if count]
    for length in range(lengths[0], lengths[-1] + 1) if lengths else ():
        code += bits[length - 1]
        if code >= 1 << length:
            return False
        code <<= 1
    return not dc or all(symbol <= 15 for symbol in values)


def _bogus(what: str, at: int) -> JpegProblem:
    return JpegProblem(f"corrupt JPEG: bogus marker length of the {what} segment at byte {at}")


def _inconsistent(component: int, coefficient: int, at: int) -> JpegProblem:
    return JpegProblem(f"corrupt JPEG: inconsistent progression sequence for component {component} "
                       f"coefficient {coefficient} in the scan at byte {at}")


def exif_orientation(exif: bytes) -> int | None:
    """Tag 0x0112 of an EXIF block's first directory (a TIFF header, or ``Exif\\0\\0`` and one), or None
    when absent or unreadable."""
    exif = exif.removeprefix(_EXIF)
    order = {b"II": "little", b"MM": "big"}.get(exif[:2])
    if order is None or len(exif) < 8:
        return None
    first = int.from_bytes(exif[4:8], order)
    if first + 2 > len(exif):
        return None
    count = int.from_bytes(exif[first:first + 2], order)
    for entry in range(first + 2, min(first + 2 + 12 * count, len(exif) - 11), 12):
        if int.from_bytes(exif[entry:entry + 2], order) == 0x0112:
            kind = int.from_bytes(exif[entry + 2:entry + 4], order)
            width = {1: 1, 3: 2, 4: 4}.get(kind)  # BYTE, SHORT, LONG
            return int.from_bytes(exif[entry + 8:entry + 8 + width], order) if width else None
    return None


def xmp_orientation(xmp: bytes) -> int | None:
    """``tiff:Orientation`` of an XMP packet (what Pillow reads when the EXIF block has none)."""
    found = re.search(rb'tiff:Orientation(="|>)([0-9])', xmp)
    return int(found[2]) if found else None

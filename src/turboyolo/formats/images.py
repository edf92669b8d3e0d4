"""JPEG and PNG file structure: the integrity checks the scan and every decode share.

Neither Pillow nor OpenCV reports every damaged file. A PNG chunk with a bad CRC decodes as if fine
(Pillow checks CRCs only in ``verify()``); a JPEG whose entropy-coded data holds garbage decodes to
grey-smeared blocks, and OpenCV only prints "Corrupt JPEG data" to stderr. These walkers read the file's
structure from its bytes, cheaply (no pixel is decoded):

- PNG: signature, IHDR first, every chunk's CRC through IEND, at least one IDAT;
- JPEG: SOI, every marker segment's type and length up to EOI, a frame header before the first scan,
  and inside each scan only byte-stuffed ``FF 00``, fill bytes and restart markers in sequence (random
  bytes in a scan almost always contain an ``FF xx`` that is none of those).

Scan data overwritten by bytes that hold no ``FF`` (e.g. zeros) passes these walks; the decoder loses
its place in such data, which :func:`turboyolo.data.decode.probe_image` catches by decoding it
(libjpeg-turbo, its warnings as errors).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

import numpy as np

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
JPEG_SOI = b"\xff\xd8"

# Markers libjpeg accepts (jdmarker.c read_markers); anything else is fatal there, and corruption here.
_SOF = frozenset((0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF))
_SEGMENTS = _SOF | frozenset((0xC4, 0xCC, 0xDA, 0xDB, 0xDC, 0xDD, 0xFE)) | frozenset(range(0xE0, 0xF0))
_STANDALONE = frozenset(range(0xD0, 0xD8)) | {0x01}
_SOS, _EOI = 0xDA, 0xD9
_SOF_PROGRESSIVE = 0xC2
_NO_RESTARTS = b"\xff\xdd\x00\x04\x00\x00"  # DRI: restart interval 0


def sniff(head: bytes) -> str | None:
    """``"JPEG"``, ``"PNG"`` or None from a file's first bytes."""
    if head.startswith(PNG_SIGNATURE):
        return "PNG"
    if head.startswith(JPEG_SOI):
        return "JPEG"
    return None


def declared_size(data: bytes, kind: str | None) -> tuple[int, int] | None:
    """(width, height) a PNG's IHDR or a JPEG's frame header declares, or None when not found; read
    before any decoder sees the file, so a decompression bomb is refused by its header."""
    if kind == "PNG" and len(data) >= 24 and data[12:16] == b"IHDR":
        return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    if kind != "JPEG":
        return None
    pos, size = 2, len(data)
    while pos + 4 <= size and data[pos] == 0xFF:
        while pos < size and data[pos] == 0xFF:
            pos += 1
        if pos + 3 > size:
            return None
        marker = data[pos]
        if marker in _STANDALONE:
            pos += 1
            continue
        length = int.from_bytes(data[pos + 1:pos + 3], "big")
        if marker in _SOF and pos + 8 <= size:
            return int.from_bytes(data[pos + 6:pos + 8], "big"), int.from_bytes(data[pos + 4:pos + 6], "big")
        if marker == _SOS or length < 2:
            return None
        pos += 1 + length
    return None


def png_problem(data: bytes | memoryview) -> tuple[str | None, bool]:
    """(what is wrong with this PNG or None, whether an eXIf chunk follows the image data).

    Walks every chunk: length within the file, ASCII type, CRC-32 of type + data, IHDR first, IEND last.
    """
    view = memoryview(data)
    size = len(view)
    if bytes(view[:8]) != PNG_SIGNATURE:
        return "not a PNG file (bad signature)", False
    pos, seen_data, late_exif = 8, False, False
    while True:
        if pos + 12 > size:
            return f"truncated PNG: the file ends at byte {size} before the IEND chunk", late_exif
        length = int.from_bytes(view[pos:pos + 4], "big")
        kind = bytes(view[pos + 4:pos + 8])
        end = pos + 12 + length
        if not kind.isalpha():
            return f"damaged PNG: no chunk at byte {pos} (type {kind!r})", late_exif
        if length > 0x7FFFFFFF or end > size:
            return (f"truncated PNG: chunk {kind.decode()} at byte {pos} needs {length} bytes, the file ends "
                    f"at byte {size}"), late_exif
        if pos == 8 and kind != b"IHDR":
            return f"damaged PNG: the first chunk is {kind.decode()}, not IHDR", late_exif
        if zlib.crc32(view[pos + 4:end - 4]) != int.from_bytes(view[end - 4:end], "big"):
            return f"damaged PNG: CRC mismatch in chunk {kind.decode()} at byte {pos}", late_exif
        if kind == b"IDAT":
            seen_data = True
        elif kind == b"eXIf" and seen_data:
            late_exif = True
        elif kind == b"IEND":
            break
        pos = end
    if not seen_data:
        return "damaged PNG: no image data (IDAT chunk)", late_exif
    return None, late_exif


def _ff_bytes(data: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every FF of a JPEG file: (positions, the byte after each, which are restart markers, which end a
    scan), found once per file."""
    array = np.frombuffer(data, np.uint8)
    ff = np.flatnonzero(array[:-1] == 0xFF)
    after = array[ff + 1]
    restart = (after >= 0xD0) & (after <= 0xD7)
    return ff, after, restart, (after != 0x00) & (after != 0xFF) & ~restart


def jpeg_problem(data: bytes) -> str | None:
    """What is wrong with this JPEG's structure, or None (see the module docstring for the rules).

    Inside a scan ``FF 00`` is a stuffed FF, ``FF FF`` fill and ``FF D0``..``FF D7`` a restart marker;
    any other ``FF xx`` ends the scan and must be a marker that may follow one.

    Data after the end-of-image marker (camera trailers, a second picture in an MPO) is allowed.
    """
    size = len(data)
    if data[:2] != JPEG_SOI:
        return "not a JPEG file (no start-of-image marker)"
    pos, frame = 2, False
    ff = after = restart = ends_scan = None
    while True:
        if pos >= size:
            return f"truncated JPEG: the file ends at byte {size} before the end-of-image marker"
        if data[pos] != 0xFF:
            return f"corrupt JPEG: stray bytes at byte {pos} where a marker should start"
        while pos < size and data[pos] == 0xFF:  # fill bytes
            pos += 1
        if pos >= size:
            return f"truncated JPEG: the file ends at byte {size} inside a marker"
        marker, at = data[pos], pos - 1
        pos += 1
        if marker == _EOI:
            return None if frame else "corrupt JPEG: end-of-image marker before any image data"
        if marker in _STANDALONE:
            continue
        if marker not in _SEGMENTS:
            return f"corrupt JPEG: invalid marker 0xFF{marker:02X} at byte {at}"
        if pos + 2 > size:
            return f"truncated JPEG: the file ends at byte {size} inside a marker"
        length = int.from_bytes(data[pos:pos + 2], "big")
        if length < 2 or pos + length > size:
            what = "truncated" if length >= 2 else "corrupt"
            return f"{what} JPEG: marker 0xFF{marker:02X} at byte {at} declares {length} bytes past the end"
        pos += length
        if marker in _SOF:
            if frame:
                return f"corrupt JPEG: a second frame header (0xFF{marker:02X}) at byte {at}"
            frame = True
        elif marker == _SOS:
            if not frame:
                return f"corrupt JPEG: scan at byte {at} before any frame header"
            if ff is None:
                ff, after, restart, ends_scan = _ff_bytes(data)
            first = int(np.searchsorted(ff, pos))
            stops = np.flatnonzero(ends_scan[first:])
            if not len(stops):
                return (f"truncated JPEG: the image data that starts at byte {pos} runs to the end of the "
                        "file without an end-of-image marker")
            stop = first + int(stops[0])
            numbers = after[first:stop][restart[first:stop]].astype(np.int64) - 0xD0
            wrong = np.flatnonzero(numbers != np.arange(len(numbers)) % 8)
            if len(wrong):
                where = int(ff[first:stop][restart[first:stop]][wrong[0]])
                return (f"corrupt JPEG: restart marker out of sequence at byte {where} (garbage in the "
                        "image data)")
            pos = int(ff[stop])


def _segments(data: bytes) -> Iterator[tuple[int, int, int]]:
    """(marker, start, end) of each segment of a JPEG that passed :func:`jpeg_problem`, from the one after
    SOI to EOI; a scan's segment includes its entropy-coded data."""
    pos, ends_scan, ff = 2, None, None
    while True:
        while data[pos] == 0xFF:  # fill bytes may come before a marker
            pos += 1
        start = pos - 1  # the marker's own FF
        marker = data[pos]
        pos += 1
        if marker not in _STANDALONE and marker != _EOI:
            pos += int.from_bytes(data[pos:pos + 2], "big")
        if marker == _SOS:
            if ff is None:
                ff, _, _, ends_scan = _ff_bytes(data)
            first = int(np.searchsorted(ff, pos))
            pos = int(ff[first + int(np.flatnonzero(ends_scan[first:])[0])])
        yield marker, start, pos
        if marker == _EOI:
            return


def eighth_scale_jpeg(data: bytes) -> bytes | None:
    """A shorter JPEG whose decode at 1/8 scale equals this one's bit for bit, or None.

    At 1/8 scale libjpeg-turbo turns each 8x8 block of a full-resolution component (the luma, or every
    component of a 4:4:4 or grey picture) into one pixel from its DC coefficient alone: the AC
    coefficients of those components are entropy-decoded, the floor of a reduced decode, and then never
    read. A progressive JPEG keeps them in scans of their own (most of its bytes), so they can be left
    out: each such component's AC scans are replaced by one scan that codes all its AC coefficients as
    zero in a few bytes (end-of-band runs). Its coefficients are then as complete as in the whole file,
    which keeps libjpeg's block smoothing (applied where coefficients are missing) off as it was. The
    subsampled components are decoded at a larger scale and their scans stay.

    None unless the file is progressive with Huffman coding (SOF2) and every AC coefficient of each
    full-resolution component is refined to its last bit in it: there the two decodes are equal. The
    file must have passed :func:`jpeg_problem`; what is left out is not checked for damage (it cannot
    change the 1/8 decode; :func:`turboyolo.data.decode.probe_image` decodes it whole).
    """
    parts, full, refined = [data[:2]], {}, {}
    for marker, start, end in _segments(data):
        if marker in _SOF:
            if marker != _SOF_PROGRESSIVE:
                return None
            height = int.from_bytes(data[start + 5:start + 7], "big")
            width = int.from_bytes(data[start + 7:start + 9], "big")
            comps = [(data[start + 10 + 3 * i], data[start + 11 + 3 * i]) for i in range(data[start + 9])]
            if len({cid for cid, _ in comps}) != len(comps):  # libjpeg refuses such a file's scans
                return None
            largest = (max(s >> 4 for _, s in comps), max(s & 15 for _, s in comps))
            blocks = -(-width // 8) * -(-height // 8)
            full = {cid: blocks for cid, s in comps if (s >> 4, s & 15) == largest}
            refined = {cid: [-1] * 64 for cid in full}
        elif marker == _SOS:
            count = data[start + 4]
            ss, se, approx = data[start + 5 + 2 * count:start + 8 + 2 * count]
            if ss > 0 and data[start + 5] in full:
                if count != 1 or se > 63 or se < ss:
                    return None
                refined[data[start + 5]][ss:se + 1] = [approx & 15] * (se - ss + 1)
                continue
        elif marker == _EOI:
            if not full or any(any(bits[1:]) for bits in refined.values()):
                return None
            parts.append(_NO_RESTARTS)
            parts.extend(_zero_ac_scan(cid, blocks) for cid, blocks in full.items())
        parts.append(data[start:end])
    return b"".join(parts)


def _zero_ac_scan(component: int, blocks: int) -> bytes:
    """A progressive AC scan (coefficients 1-63, no successive approximation) of one component that sets
    every AC coefficient of its ``blocks`` blocks to zero, with the Huffman table it uses: end-of-band
    runs of up to 32767 blocks each, symbol ``r << 4`` (a run of 2**r + r more bits) coded as r in 4 bits."""
    bits, count = 0, 0
    while blocks:
        run = min(blocks, 32767)
        r = run.bit_length() - 1
        bits, count = (bits << (4 + r)) | (r << r) | (run - (1 << r)), count + 4 + r
        blocks -= run
    pad = -count % 8
    coded = ((bits << pad) | ((1 << pad) - 1)).to_bytes((count + pad) // 8, "big")
    coded = coded.replace(b"\xff", b"\xff\x00")  # byte stuffing
    table = bytes([0x10]) + bytes([0, 0, 0, 15] + [0] * 12) + bytes(range(0, 0xF0, 0x10))
    return (b"\xff\xc4" + (2 + len(table)).to_bytes(2, "big") + table
            + b"\xff\xda\x00\x08\x01" + bytes([component, 0x00, 1, 63, 0]) + coded)

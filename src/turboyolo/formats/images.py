"""JPEG and PNG file structure: the integrity checks the scan and every decode share.

Neither Pillow nor OpenCV reports every damaged file. A PNG chunk with a bad CRC decodes as if fine
(Pillow checks CRCs only in ``verify()``); a JPEG whose entropy-coded data holds garbage decodes to
grey-smeared blocks, and OpenCV only prints "Corrupt JPEG data" to stderr. These walkers read the file's
structure from its bytes, cheaply (no pixel is decoded):

- PNG: signature, IHDR first, every chunk's CRC through IEND, at least one IDAT;
- JPEG: every marker segment checked as libjpeg checks it, and inside each scan only byte-stuffed
  ``FF 00``, fill bytes and restart markers in sequence (:mod:`turboyolo.formats.jpeg`).

Image data that is wrong without breaking the structure (a JPEG's scan overwritten by bytes that hold no
``FF``, a PNG's compressed data damaged under valid CRCs) passes these walks; the first decode of the file
finds it (:func:`turboyolo.data.decode.decode_image`: libjpeg-turbo with its warnings as errors, zlib).
"""

from __future__ import annotations

import zlib

from turboyolo.formats.jpeg import (
    JPEG_SOI,
    SOF,
    SOF_PROGRESSIVE,
    SOS,
    STANDALONE,
    JpegHeader,
    JpegProblem,
    jpeg_header,
    jpeg_problem,
    segments,
)

__all__ = ["JpegHeader", "JpegProblem", "jpeg_header", "jpeg_problem", "declared_size", "eighth_scale_jpeg",
           "harmless_fixed", "png_problem", "sniff"]

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_EOI = 0xD9
_NO_RESTARTS = b"\xff\xdd\x00\x04\x00\x00"  # DRI: restart interval 0
_segments = segments  # the tests' name for it


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
        if marker in STANDALONE:
            pos += 1
            continue
        length = int.from_bytes(data[pos + 1:pos + 3], "big")
        if marker in SOF and pos + 8 <= size:
            return int.from_bytes(data[pos + 6:pos + 8], "big"), int.from_bytes(data[pos + 4:pos + 6], "big")
        if marker == SOS or length < 2:
            return None
        pos += 1 + length
    return None


def png_exif(data: bytes) -> bytes | None:
    """The payload of a PNG's last eXIf chunk (what Pillow holds once the image is loaded), or None; the
    file must have passed :func:`png_problem`."""
    pos, found = 8, None
    while pos + 8 <= len(data):
        length, kind = int.from_bytes(data[pos:pos + 4], "big"), data[pos + 4:pos + 8]
        if kind == b"eXIf":
            found = data[pos + 8:pos + 8 + length]
        elif kind == b"IEND":
            break
        pos += 12 + length
    return found


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
    full-resolution component is refined to its last bit in it: there the two decodes are equal.

    The file must have passed :func:`jpeg_header`, which checks the headers of every scan, the ones left
    out here included (their tables, parameters and place in the progression), as libjpeg would. The
    entropy-coded data left out is not read: damage there cannot change the 1/8 decode but makes the whole
    file's decode fail, so only a file whose whole decode already passed may be read this way (the
    loaders keep that record per run: :func:`turboyolo.data.decode.decode_image` ``verified``); any other
    file is decoded whole, which refuses it if it is damaged.
    """
    parts, full, refined = [data[:2]], {}, {}
    for marker, start, end in _segments(data):
        if marker in SOF:
            if marker != SOF_PROGRESSIVE:
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
        elif marker == SOS:
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


_ICC = b"ICC_PROFILE\x00"


def harmless_fixed(data: bytes, message: str) -> bytes | None:
    """The file with the cause of a harmless libjpeg warning taken out, so a strict decode can read the
    rest as it is; None when ``message`` names no such warning. The pixels are the same: a damaged ICC
    profile (colour metadata libjpeg does not apply) is dropped; a JFIF version other than 1.x and an
    unknown Adobe colour transform are set to what libjpeg assumes for them (version 1; YCbCr, or YCCK
    for four components). The file must have passed :func:`jpeg_header`."""
    spans = list(segments(data))
    components = next((data[start + 9] for marker, start, _ in spans if marker in SOF), 3)
    parts, changed = [data[:2]], False
    for marker, start, end in spans:
        body = data[start + 4:end]
        if "bad ICC marker" in message and marker == 0xE2 and body.startswith(_ICC):
            changed = True
            continue
        if "unknown JFIF revision" in message and marker == 0xE0 and body.startswith(b"JFIF\x00") \
                and len(body) > 5:
            parts.append(data[start:start + 9] + b"\x01" + data[start + 10:end])
            changed = True
        elif "Unknown Adobe color transform" in message and marker == 0xEE and body.startswith(b"Adobe") \
                and len(body) >= 12:
            assumed = b"\x02" if components == 4 else b"\x01"
            parts.append(data[start:start + 15] + assumed + data[start + 16:end])
            changed = True
        else:
            parts.append(data[start:end])
    return b"".join(parts) if changed else None

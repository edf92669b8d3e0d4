"""Text files that users write (labels, names, list files, ``.data`` files, cfgs): UTF-8, or the
encoding a byte-order mark names.

Windows editors start a file with a byte-order mark (Notepad's "UTF-8 with BOM", or UTF-16 for
"Unicode"); read as plain UTF-8, the mark would stay at the start of the first line and make it
another value ('\\ufeffapple', a label line that is "not a number").
"""

from __future__ import annotations

import codecs
from pathlib import Path

_MARKS = ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))


def decode_text(data: bytes, errors: str = "strict") -> str:
    """``data`` as text: after a byte-order mark in the encoding it names, else UTF-8 (``errors`` as
    for :meth:`bytes.decode`)."""
    for mark, encoding in _MARKS:
        if data.startswith(mark):
            return data[len(mark):].decode(encoding, errors)
    return data.decode("utf-8", errors)


def read_text(path: str | Path, errors: str = "strict") -> str:
    """The text of the file at ``path`` (:func:`decode_text`); raises OSError as :meth:`Path.read_bytes`."""
    return decode_text(Path(path).read_bytes(), errors)

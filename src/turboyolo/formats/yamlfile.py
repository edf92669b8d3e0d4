"""YAML as the package reads it, and typed option values.

One reader, :func:`read_yaml`, for every YAML file turboyolo opens (``--config``, ``--hyp``, a
``data.yaml``, the packaged recipes, a run's ``config.yaml``): safe types only, and aliases bounded. YAML's
``&anchor`` / ``*alias`` share one node, so a few hundred bytes of nested aliases describe a document of
billions of nodes (the "billion laughs"); PyYAML builds it as shared lists, and the first deep copy or
walk over it (``dataclasses.asdict``, a dump, a message) grows to gigabytes. A document whose nodes,
counted at every use of an alias, exceed the nodes written in the file by more than :data:`MAX_NODES` is
refused before anything is built (and a cycle of aliases always is).

:func:`typed` checks one value against its declared type (the annotation of an option's field:
``int``, ``float | None``, ``tuple[float, float]``, ...) and names the key and the file when it does not
fit: ``epochs: "ten"``, ``epochs: 1.5``, ``lr: nan``, ``augment: "yes"``.
"""

from __future__ import annotations

import math
import os
import re
from numbers import Integral, Real
from pathlib import Path
from typing import Any

import yaml

from turboyolo.errors import ConfigError

MAX_NODES = 100_000  # values aliases may add to a document (each use of an alias counts its whole node)
_COUNT_CAP = 10**15
_BUSY = -1  # an anchor whose node is being counted: an alias to it inside itself is a cycle


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader that refuses a document which aliases expand beyond :data:`MAX_NODES`."""

    def get_single_node(self):
        node = super().get_single_node()
        if node is not None:
            size, written = _expanded_size(node)
            if size < 0 or size > written + MAX_NODES:
                raise _TooLarge("a cycle of aliases" if size < 0 else
                                f"its aliases expand it by more than {MAX_NODES:,} values")
        return node


class _TooLarge(yaml.YAMLError):
    pass


def _expanded_size(root: yaml.Node) -> tuple[int, int]:
    """Nodes of ``root`` with every alias expanded (shared nodes counted once per use; -1 on a cycle),
    and the distinct nodes (as written).

    Iterative, memoised per node: linear in the file, however far the aliases expand.
    """
    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if not isinstance(node.value, list):  # a scalar
            sizes[key] = 1
            continue
        children = [item for pair in node.value for item in pair] if isinstance(
            node, yaml.MappingNode) else list(node.value)
        if children_done:
            total = 1 + sum(sizes[id(child)] for child in children)
            sizes[key] = min(total, _COUNT_CAP)  # no need to count past any bound
            continue
        if sizes.get(key) == _BUSY:
            return -1, len(sizes)
        if key in sizes:
            continue
        sizes[key] = _BUSY
        stack.append((node, True))
        for child in children:
            if sizes.get(id(child)) == _BUSY:
                return -1, len(sizes)
            if id(child) not in sizes:
                stack.append((child, False))
    return sizes[id(root)], len(sizes)


def parse_yaml(text: str, source: str) -> Any:
    """The YAML document ``text`` (safe types, aliases bounded); ``source`` names it in the error.

    Raises:
        ConfigError: not YAML, too deeply nested, or expanding beyond :data:`MAX_NODES`.
    """
    try:
        return yaml.load(text, Loader=_BoundedLoader)  # noqa: S506 - a SafeLoader subclass
    except _TooLarge as err:
        raise ConfigError(f"{source}: refused: {err} (a YAML alias bomb?); write the values out") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{source}: not valid YAML ({err}); fix the file") from None
    except RecursionError:
        raise ConfigError(f"{source}: refused: nested too deeply to be a configuration") from None


def read_yaml(path: str | Path, what: str = "") -> Any:
    """The YAML document of the file ``path`` (UTF-8; a byte-order mark is allowed).

    Args:
        path: the file.
        what: how the user gave it (``--config``, ``--hyp``); the error names it with the path.
    Raises:
        ConfigError: unreadable, not UTF-8, not YAML, or an alias bomb (:func:`parse_yaml`).
    """
    source = f"{what} {path}".strip()
    try:
        text = Path(path).read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{source}: not UTF-8 text ({err.reason} at byte {err.start}); save it as UTF-8"
                          ) from None
    except IsADirectoryError:
        raise ConfigError(f"{source}: is a folder; give the YAML file") from None
    except OSError as err:
        raise ConfigError(f"{source}: cannot read it ({err.strerror or err})") from None
    return parse_yaml(text, source)


# ----------------------------------------------------------------------------- typed values

_KINDS = {"int": "an integer", "float": "a number", "str": "a text", "bool": "true or false",
          "list": "a list", "None": "empty (null)"}


def typed(value: Any, kind: str, key: str, source: str = "") -> Any:
    """``value`` checked against ``kind``, an annotation such as ``int``, ``float | None``, ``str``,
    ``bool`` or ``tuple[float, float]`` (alternatives separated by ``|``; others are not checked).

    An integral float is an int (``2.0``), an int is a float; numbers are text where text is expected
    (``device: 0``); a list is a tuple; a number written as text is that number (``1e-3``, which YAML 1.1
    reads as text; ``"10"``). Never a bool for a number (``yes`` is not 1), never text for a
    number (``"ten"``, ``"nan"``), never a non-finite number (``.nan``, ``.inf``), never 1.5 for an int.

    Returns:
        the value in its declared type.
    Raises:
        ConfigError: naming ``source``, ``key``, what was expected and what was found.
    """
    alternatives = [alt.strip() for alt in kind.split("|")]
    for alt in alternatives:
        ok, converted = _match(value, alt)
        if ok:
            return converted
    if not any(alt in _KINDS or alt.startswith("tuple[") for alt in alternatives):
        return value  # a type this check does not know: left to the option's own check
    expected = " or ".join(_describe(alt) for alt in alternatives)
    where = f"{source}: " if source else ""
    raise ConfigError(f"{where}{key}: expected {expected}, got {_shown(value)}; fix the value")


_NUMBER = {"int": re.compile(r"^[-+]?[0-9]+$"),
           "float": re.compile(r"^[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$")}


def _match(value: Any, kind: str) -> tuple[bool, Any]:
    if kind == "None":
        return value is None, None
    if value is None:
        return False, None
    if kind == "bool":
        return isinstance(value, bool), value
    if isinstance(value, bool):
        return False, None
    if isinstance(value, str) and kind in ("int", "float") and _NUMBER[kind].match(value.strip()):
        value = float(value) if kind == "float" else int(value)  # YAML 1.1 reads 1e-3 as text
    if kind == "int":
        if isinstance(value, Integral):
            return True, int(value)
        whole = isinstance(value, Real) and math.isfinite(value) and float(value).is_integer()
        return whole, int(value) if whole else None
    if kind == "float":
        number = isinstance(value, Real) and math.isfinite(value)
        return number, float(value) if number else None
    if kind == "str":
        if isinstance(value, str):
            return True, value
        return (True, str(value)) if isinstance(value, Real | os.PathLike) else (False, None)
    if kind == "list":
        return isinstance(value, list | tuple), value
    if kind.startswith("tuple[") and kind.endswith("]"):
        parts = [part.strip() for part in kind[len("tuple["):-1].split(",")]
        if not isinstance(value, list | tuple) or len(value) != len(parts):
            return False, None
        items = [_match(item, part) for item, part in zip(value, parts, strict=True)]
        return all(ok for ok, _ in items), tuple(item for _, item in items)
    return False, None


def _describe(kind: str) -> str:
    if kind.startswith("tuple["):
        parts = kind[len("tuple["):-1].split(",")
        return f"a list of {len(parts)} {_KINDS.get(parts[0].strip(), parts[0]).removeprefix('a ')}s"
    return _KINDS.get(kind, kind)


def _shown(value: Any) -> str:
    if isinstance(value, str):
        return f"the text {value!r}" if len(value) < 60 else f"a text of {len(value)} characters"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value} (not a finite number)"
    if isinstance(value, dict | list | tuple):
        return f"a {'mapping' if isinstance(value, dict) else 'list'} of {len(value)} entries"
    return repr(value)

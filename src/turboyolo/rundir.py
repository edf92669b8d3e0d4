"""Run directories and the one output rule every command that writes follows.

Run directories: ``<project>/<name>``, numbered ``exp``, ``exp2``, ... never overwriting.

The output rule (each writer calls these before it writes):

- no output is one of the command's inputs (:func:`check_outputs`, refused even with ``--overwrite``);
- an existing file is replaced only when the user asked (``--overwrite``; :func:`check_outputs`);
- a reused run directory (``--exist-ok``) loses the files the previous run wrote there, listed in its
  manifest, so old and new outputs never mix (:func:`clear_previous_outputs`, :func:`record_outputs`);
- two inputs never share an output name (:class:`OutputNames`);
- ``train --resume`` writes only into the checkpoint's own run directory or the ``--project/--name``
  given (:func:`resume_run_dir`);
- a command that fails before writing anything leaves no empty run directory (:func:`removed_if_empty`);
- an output a later call reads back is replaced whole or not at all (:func:`write_atomically`).
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from turboyolo.errors import FlagError, OutputError, printable

MANIFEST = ".turboyolo-outputs.json"  # the files a command wrote into its run directory


def next_run_dir(project: str | Path, name: str = "exp", exist_ok: bool = False) -> Path:
    """Create and return a fresh run directory under ``project``.

    ``name`` is used as is when free (or when ``exist_ok``); otherwise ``name2``, ``name3``, ...
    Each candidate is claimed by creating it (``mkdir`` fails when it exists), so two runs started at
    the same moment get two directories, never one between them.
    Raises :class:`OutputError` when ``project`` cannot be written (read-only, full, no permission).
    """
    project = Path(project)
    candidate = project / name
    try:
        project.mkdir(parents=True, exist_ok=True)
        if exist_ok:
            candidate.mkdir(exist_ok=True)
            return candidate
        index = 1
        while True:
            try:
                candidate.mkdir()
                return candidate
            except FileExistsError:
                index += 1
                candidate = project / f"{name}{index}"
    except OSError as err:
        raise OutputError(f"{printable(candidate)}: cannot create the run directory ({err.strerror}); "
                          "choose a writable folder with --project") from None


def write_atomically(path: Path, text: str | Iterable[str]) -> Path:
    """``path`` replaced in one step (a temporary file beside it, renamed over it): a Ctrl-C or a full disk
    leaves the old file or the new one, never half of one, and no temporary file. ``text`` may come in
    pieces (an iterable of strings), so a large file is never one string in memory."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("w", encoding="utf-8", errors="surrogateescape") as handle:
            handle.writelines([text] if isinstance(text, str) else text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


class RealPaths:
    """``os.path.realpath`` of many files in few folders: each folder resolved once, then only a file that
    is itself a link resolved whole (one ``lstat`` a file, where ``realpath`` checks every component of
    every path: seconds at 100,000 images). For one batch of paths: a folder re-linked later is not seen."""

    def __init__(self) -> None:
        self._folders: dict[str, str] = {}

    def __call__(self, path: str | os.PathLike) -> str:
        folder, name = os.path.split(os.fspath(path))
        real = self._folders.get(folder)
        if real is None:
            real = self._folders[folder] = os.path.realpath(folder)
        full = os.path.join(real, name)
        return os.path.realpath(full) if name in ("", ".", "..") or os.path.islink(full) else full


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether two paths name one file: the same inode when both exist (links, hard links, ``./``),
    else the same absolute path with links resolved."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def check_outputs(outputs: Mapping[str, str | Path | None], inputs: Mapping[str, object], *,
                  overwrite: bool = False, overwrite_flag: str = "--overwrite") -> None:
    """The output rule for files named before anything is written.

    Args:
        outputs: flag (or description) -> file this command will write (``None``: not written).
        inputs: flag -> file (or list of files) this command reads (``None`` entries are skipped).
        overwrite: the user asked to replace existing outputs (``overwrite_flag``).
    Raises:
        OutputError: an output is one of the inputs (always), is a folder, or exists and
            ``overwrite`` is false; the message names the file(s), the flags and the fix.
    """
    named = [(flag, Path(str(path))) for flag, path in outputs.items() if path is not None]
    for out_flag, out in named:
        for in_flag, value in inputs.items():
            for source in value if isinstance(value, list | tuple) else [value]:
                if source is not None and same_file(out, str(source)):
                    raise OutputError(
                        f"{out_flag} {printable(out)} is the same file as the input {in_flag} "
                        f"{printable(source)}: writing it would replace the input; choose another "
                        f"output path")
        if out.is_dir():
            raise OutputError(f"{out_flag} {printable(out)} is a folder; name the file to write")
        _check_writable(out_flag, out)
        if out.exists() and not overwrite:
            raise OutputError(f"{out_flag} {printable(out)} exists; pass {overwrite_flag} to replace it, "
                              "or choose another output path")


def _check_writable(flag: str, out: Path) -> None:
    """Refuse an output whose nearest existing folder is a file or cannot be written, before any work."""
    folder = Path(os.path.abspath(out)).parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise OutputError(f"{flag} {printable(out)}: {printable(folder)} is a file, not a folder; choose "
                          "another output path")
    if not os.access(folder, os.W_OK):
        raise OutputError(f"{flag} {printable(out)}: the folder {printable(folder)} cannot be written "
                          "(read-only or no permission); choose a writable folder")


def existing_outputs(paths: Iterable[Path], overwrite: bool, what: str, flag: str = "--overwrite") -> None:
    """Refuse (:class:`OutputError`) when any of ``paths`` exists and ``overwrite`` is false, naming
    how many and the first few; ``what`` names the output folder or kind."""
    if overwrite:
        return
    taken = [path for path in paths if path.exists() or path.is_symlink()]
    if taken:
        shown = ", ".join(printable(p) for p in taken[:5]) + (f" and {len(taken) - 5} more"
                                                               if len(taken) > 5 else "")
        raise OutputError(f"{what}: {len(taken)} file(s) this would write exist already ({shown}); "
                          f"pass {flag} to replace them, or choose an empty output folder")


class OutputNames:
    """One output name per input, never shared: ``name(wanted, owner)`` returns ``wanted`` unless another
    owner claimed it, else ``<stem>_<source suffix><suffix>`` (``clip_png.txt``), then ``<stem>_2...``.

    ``inputs``: files the command reads; an output that would be one of them is refused
    (:class:`OutputError`), whatever its name.
    """

    def __init__(self, inputs: Iterable[Path] = ()):
        self.owners: dict[Path, object] = {}
        self.inputs = {os.path.realpath(p) for p in inputs}

    def name(self, wanted: Path, owner: object, source_suffix: str = "") -> Path:
        candidates = [wanted]
        if source_suffix:
            candidates.append(wanted.with_name(f"{wanted.stem}_{source_suffix.lstrip('.')}{wanted.suffix}"))
        numbered = (wanted.with_name(f"{wanted.stem}_{k}{wanted.suffix}") for k in range(2, 10_000))
        for path in itertools.chain(candidates, numbered):  # made as needed (not 10,000 per name)
            if self.owners.setdefault(path, owner) == owner:
                if os.path.realpath(path) in self.inputs:
                    raise OutputError(f"{printable(path)} is one of the inputs: writing it would replace "
                                      "the input; choose an output folder outside the inputs (--project)")
                return path
        raise OutputError(f"{printable(wanted)}: too many inputs share this output name")


def record_outputs(run_dir: Path, paths: Iterable[Path]) -> None:
    """Write the manifest of the files a command wrote into ``run_dir`` (relative paths), so the next
    run that reuses the directory (``--exist-ok``) can remove them."""
    run_dir = Path(run_dir)
    rel = sorted({os.path.relpath(p, run_dir) for p in paths})
    (run_dir / MANIFEST).write_text(json.dumps(rel, indent=0), encoding="utf-8", errors="surrogateescape")


def clear_previous_outputs(run_dir: Path, keep: Iterable[Path] = ()) -> str | None:
    """Before a command writes into a reused run directory: remove the files the previous run listed in
    its manifest (only those, only inside ``run_dir``), then the folders they leave empty.

    Returns a note for the user: what was removed, and any other files the directory still holds
    (named, never deleted: they are not known to be a previous run's outputs); ``None`` when the
    directory was empty. ``keep``: this run's inputs (a previous run's drawing given as an input stays).
    """
    run_dir = Path(run_dir)
    kept = {os.path.realpath(p) for p in keep}
    removed = 0
    try:
        listed = json.loads((run_dir / MANIFEST).read_text(encoding="utf-8", errors="surrogateescape"))
    except (OSError, ValueError):
        listed = []
    root = os.path.realpath(run_dir)
    for rel in listed if isinstance(listed, list) else []:
        path = run_dir / str(rel)
        real = os.path.realpath(path)
        if os.path.commonpath([root, real]) != root or not path.is_file() or real in kept:
            continue  # a manifest never removes anything outside the run directory, nor an input
        path.unlink()
        removed += 1
        _remove_empty_parents(path.parent, run_dir)
    (run_dir / MANIFEST).unlink(missing_ok=True)
    others = sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.is_file())
    notes = [f"{removed} file(s) of the previous run in {printable(run_dir)} removed (--exist-ok)"
             ] if removed else []
    if others:
        shown = ", ".join(printable(o) for o in others[:5]) + (" ..." if len(others) > 5 else "")
        notes.append(f"{printable(run_dir)} also holds {len(others)} file(s) this command did not write "
                     f"({shown}); left as they are")
    return "; ".join(notes) or None


def reuse_note(run_dir: Path) -> str | None:
    """For a command that rewrites its run directory in place (``train --exist-ok``): a note naming the
    files an earlier run left there, so the user knows which outputs are not this run's; ``None`` when
    the directory is empty."""
    earlier = sorted(str(p.relative_to(run_dir)) for p in Path(run_dir).rglob("*")
                     if p.is_file() and not p.name.startswith("."))
    if not earlier:
        return None
    shown = ", ".join(printable(e) for e in earlier[:5]) + (" ..." if len(earlier) > 5 else "")
    return (f"--exist-ok: {printable(run_dir)} already holds {len(earlier)} file(s) of an earlier run "
            f"({shown}); this run replaces those it writes again, the others are the earlier run's")


def check_outside(output: Path, folders: Iterable[Path], flag: str) -> None:
    """Refuse (:class:`OutputError`) an output folder inside (or equal to) a folder the command reads
    images from: its drawings and pictures would be read as images by the next run."""
    out = os.path.realpath(output)
    for folder in folders:
        real = os.path.realpath(folder)
        if out == real or out.startswith(real.rstrip(os.sep) + os.sep):
            raise OutputError(f"{flag} {printable(output)} lies inside the image folder {printable(folder)} "
                              "this command reads: its outputs (drawn .jpg files) would be read as images "
                              f"next time; choose a {flag} outside {printable(folder)}")


def _remove_empty_parents(folder: Path, stop: Path) -> None:
    while folder != stop and stop in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent


@contextmanager
def removed_if_empty(run_dir: Path, made: bool = True) -> Iterator[Path]:
    """``with removed_if_empty(run_dir):`` a command that fails (a bad flag found late, an error before
    its first output) leaves no empty run directory behind; a directory it did not make is kept."""
    try:
        yield run_dir
    except BaseException:
        if made:
            try:
                run_dir.rmdir()  # only when empty
            except OSError:
                pass
        raise


RUN_FILES = ("config.yaml", "model.cfg")  # what makes a folder a training run directory


def run_outputs(run_dir: Path) -> dict[str, Path]:
    """The files a training run writes at fixed names in its run directory (for :func:`check_outputs`:
    none of them may be one of the run's inputs, such as ``--weights <this run>/weights/last.pt``)."""
    names = (*RUN_FILES, "weights/last.pt", "weights/best.pt", "weights/last.weights", "weights/best.weights")
    return {f"the run's {name}": Path(run_dir) / name for name in names}


def training_run_of(checkpoint: str | Path) -> Path | None:
    """The training run directory a checkpoint sits in (``<run>/weights/<file>.pt`` beside
    ``<run>/config.yaml``), or ``None`` for a checkpoint copied out of its run."""
    folder = Path(os.path.realpath(checkpoint)).parent
    run = folder.parent
    if folder.name == "weights" and all((run / name).is_file() for name in RUN_FILES):
        return run
    return None


RESUME_OUTPUT = ("project", "name", "exist_ok")  # the options --resume takes to write elsewhere


def resume_run_dir(checkpoint: str | Path, output, given: Iterable[str]) -> tuple[Path, bool, str]:
    """Where ``turboyolo train --resume CHECKPOINT`` writes: (run directory, made now, why there).

    ``output`` has the run's ``project``, ``name`` and ``exist_ok``; ``given`` the options the user set.
    With ``--project`` and/or ``--name`` given: that run directory (a new ``<project>/<name>``, numbered
    when taken unless ``--exist-ok``; the checkpoint's own run when it is that one). Else the
    checkpoint's own run directory (:func:`training_run_of`); a checkpoint outside its run
    (``~/Downloads/last.pt``) is refused, so nothing is ever written beside it.
    """
    own = training_run_of(checkpoint)
    if {"project", "name"} & set(given):
        wanted = Path(output.project) / output.name
        if own is not None and same_file(wanted, own):
            return own, False, "the checkpoint's own run directory"
        made = next_run_dir(output.project, output.name, output.exist_ok)
        return made, not output.exist_ok, "--project/--name"
    if own is None:
        raise FlagError(
            f"--resume {printable(checkpoint)}: this checkpoint is not inside its run directory (a "
            "<run>/weights/ folder beside the run's config.yaml and model.cfg), so the resumed run has no "
            "folder of its own; pass --project/--name to say where it writes (nothing is written beside "
            "the checkpoint)")
    return own, False, "the checkpoint's own run directory"

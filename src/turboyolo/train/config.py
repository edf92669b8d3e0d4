"""Training settings: :class:`TrainConfig`, one of each option group of :mod:`turboyolo.train.config_groups`
(where every field is declared once, with its help text and flag spellings); the ``turboyolo train``
flags are generated from them; ``--config`` and ``--hyp`` files are read here.

A flag the user did not pass stays absent from the parsed namespace (``argparse.SUPPRESS``): the config
knows which values were given, so ``--resume`` can take exactly those (:meth:`TrainConfig.resumed`).
``TrainConfig.as_dict()`` (nested by group) is what ``config.yaml`` and every checkpoint store;
:meth:`TrainConfig.from_dict` also reads the flat dict of turboyolo 0.1 checkpoints.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from turboyolo.errors import FlagError, TurboYoloError
from turboyolo.formats.yamlfile import read_yaml, typed
from turboyolo.model.zoo import ARCHITECTURES
from turboyolo.options import add_flags as add_group_flags
from turboyolo.train.config_groups import (  # noqa: F401  (re-exported: the groups' one import path)
    AUGMENT_ON_CHOICES,
    BN_TRAIN_CHOICES,
    BOX_LOSSES,
    CACHE_CHOICES,
    LR_DECAYS,
    OPTIMIZERS,
    SCHEDULES,
    AugmentArgs,
    DataArgs,
    EvalArgs,
    LossArgs,
    OptimArgs,
    OutputArgs,
    RuntimeArgs,
    ScheduleArgs,
)

GROUPS: dict[str, type] = {
    "data_args": DataArgs,
    "schedule": ScheduleArgs,
    "optim": OptimArgs,
    "augment": AugmentArgs,
    "loss": LossArgs,
    "eval": EvalArgs,
    "runtime": RuntimeArgs,
    "output": OutputArgs,
}
# What --resume takes from the command line; everything else that shapes the numbers is the run's own.
RESUMABLE = ("epochs", "max_batches", "time_limit_min", "workers", "device", "wandb", "verbose")


@dataclass
class TrainConfig:
    """``turboyolo train`` settings: the inputs, then one group per concern.

    Build one with :meth:`build` (flat keyword names, as the flags), :meth:`from_flags` (parsed
    arguments) or :meth:`from_dict` (a checkpoint's or ``config.yaml``'s copy).
    """

    cfg: str = ""
    data: str = ""
    weights: str | None = None
    resume: str | None = None
    hyp: str | None = None  # the --hyp file the augment and loss values came from (they are stored too)
    data_args: DataArgs = field(default_factory=DataArgs)
    schedule: ScheduleArgs = field(default_factory=ScheduleArgs)
    optim: OptimArgs = field(default_factory=OptimArgs)
    augment: AugmentArgs = field(default_factory=AugmentArgs)
    loss: LossArgs = field(default_factory=LossArgs)
    eval: EvalArgs = field(default_factory=EvalArgs)
    runtime: RuntimeArgs = field(default_factory=RuntimeArgs)
    output: OutputArgs = field(default_factory=OutputArgs)
    given: tuple[str, ...] = ()  # option names set explicitly (flags passed, keywords given)
    from_file: tuple[str, ...] = ()  # of those, set by a --config or --hyp file and not by a flag

    def __post_init__(self) -> None:
        for group in GROUPS:
            getattr(self, group).check()
        if not self.cfg and self.weights in ARCHITECTURES and not Path(self.weights).exists():
            self.cfg = self.weights  # `--weights yolov4-tiny` alone: its canonical network
        if not self.cfg and not self.resume:
            raise FlagError("--model/--cfg is required (a Darknet .cfg, `turboyolo cfg` writes one; or an "
                            f"architecture: {', '.join(ARCHITECTURES)}), unless --resume names a checkpoint")
        if not self.data and not self.resume:
            raise FlagError("--data is required (a .data file or data.yaml)")

    # ------------------------------------------------------------------ construction
    @classmethod
    def build(cls, cfg: str = "", data: str = "", weights: str | None = None, resume: str | None = None,
              hyp: str | None = None, base: dict[str, Any] | None = None, **options: Any) -> TrainConfig:
        """From flat option names (``epochs=5, cache="ram"``), the Python API's spelling of the flags.

        ``base``: option values to start from (a ``--config`` file's, :func:`read_config`); then ``hyp``, a
        YAML file of augmentation and loss values (:func:`read_hyp`); options given here win over both.
        """
        groups: dict[str, dict[str, Any]] = {group: {} for group in GROUPS}
        base = dict(base or {})
        cfg, data, weights = (given or base.get(key) for key, given in
                              (("cfg", cfg), ("data", data), ("weights", weights)))
        hyp = hyp or base.get("hyp")
        for key in INPUTS:
            base.pop(key, None)
        hyp_values = read_hyp(hyp) if hyp else {}
        base, hyp_values, options = renamed(base), renamed(hyp_values), renamed(options)
        options = checked(options, "")  # the Python API's keywords (the flags' types are argparse's)
        for name, value in {**base, **hyp_values, **options}.items():
            group = OPTION_GROUP.get(name)
            if group is None:
                raise FlagError(f"unknown training option {name!r}; see `turboyolo train -h`")
            groups[group][name] = tuple(value) if isinstance(value, list) else value
        made = {group: GROUPS[group](**values) for group, values in groups.items()}
        return cls(cfg=str(cfg or ""), data=str(data or ""), weights=str(weights) if weights else None,
                   resume=str(resume) if resume else None, hyp=str(hyp) if hyp else None,
                   given=tuple(dict.fromkeys([*base, *options])),
                   from_file=tuple(key for key in dict.fromkeys([*base, *hyp_values]) if key not in options),
                   **made)

    @classmethod
    def from_flags(cls, args: argparse.Namespace) -> TrainConfig:
        """From ``turboyolo train``'s parsed flags (only those the user passed are present); with
        ``--config FILE`` the file's values first, the flags over them."""
        values = {name: getattr(args, name) for name in OPTION_GROUP if hasattr(args, name)}
        inputs = {key: getattr(args, key, None) for key in INPUTS}
        base: dict[str, Any] = {}
        if getattr(args, "config", None):
            base = read_config(args.config)
        return cls.build(inputs["cfg"] or "", inputs["data"] or "", inputs["weights"], inputs["resume"],
                         inputs["hyp"], base=base, **values)

    @classmethod
    def from_dict(cls, values: dict, source: str = "") -> TrainConfig:
        """From :meth:`as_dict` output, or the flat dict of a turboyolo 0.1 checkpoint; ``source`` (the
        checkpoint) is named when a value has the wrong type or range."""
        flat: dict[str, Any] = {}
        for key, value in values.items():
            if key in GROUPS and isinstance(value, dict):
                flat.update(value)
            else:
                flat[key] = value
        flat = renamed(flat)
        if "aug_scale_min" in flat or "aug_scale_max" in flat:  # 0.1 stored the zoom range as two fields
            flat["aug_scale"] = (flat.pop("aug_scale_min", 0.75), flat.pop("aug_scale_max", 1.25))
        flat.setdefault("obj_iou", False)  # saved before it became the default: trained with target 1
        if "optim" not in values and "lr_schedule" not in flat:  # saved by turboyolo 0.1: the cfg's schedule
            flat["lr_schedule"] = "darknet"  # and Darknet's BN momentum, as it was trained
            flat["bn_momentum"] = flat.get("bn_momentum") or 0.01
            flat["close_mosaic"] = flat.get("close_mosaic") or 0
        inputs = {key: flat.pop(key, None) for key in INPUTS}
        given = tuple(RENAMED.get(name, name) for name in flat.pop("given", ()) or ())
        from_file = tuple(RENAMED.get(name, name) for name in flat.pop("from_file", ()) or ())
        options = {key: value for key, value in flat.items() if key in OPTION_GROUP}
        if source:
            checked({**options, **{key: value for key, value in inputs.items() if value is not None}}, source)
        config = cls.build(inputs["cfg"] or "", inputs["data"] or "", inputs["weights"], inputs["resume"],
                           **options)  # the stored values, not the --hyp file again (it may be gone)
        config.given, config.from_file, config.hyp = given, from_file, inputs["hyp"]
        return config

    def as_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out["given"] = list(self.given)
        out["from_file"] = list(self.from_file)
        out["augment"]["aug_scale"] = list(self.augment.aug_scale)
        return out

    def resumed(self, passed: TrainConfig) -> TrainConfig:
        """This (saved) config with the options of :data:`RESUMABLE` that ``passed`` sets explicitly.

        Returns the merged config and leaves ``passed.given`` options outside :data:`RESUMABLE` to the
        caller to report as ignored.
        """
        refuse_new_inputs(self, passed)
        merged = TrainConfig.from_dict(self.as_dict())
        for name in passed.given:
            if name in RESUMABLE:
                group = OPTION_GROUP[name]
                setattr(getattr(merged, group), name, getattr(getattr(passed, group), name))
        merged.resume = passed.resume
        for group in GROUPS:
            getattr(merged, group).check()
        return merged

    def get(self, name: str) -> Any:
        """An option by its flat name (``config.get("epochs")``)."""
        return getattr(getattr(self, OPTION_GROUP[name]), name)

    def replace(self, **options: Any) -> TrainConfig:
        """A copy with options changed by their flat names (experiments, the demo recipe)."""
        values, options = self.as_dict(), renamed(options)
        for name, value in options.items():
            if name in INPUTS:
                values[name] = value
            elif name in OPTION_GROUP:
                values[OPTION_GROUP[name]][name] = value
            else:
                raise FlagError(f"unknown training option {name!r}; see `turboyolo train -h`")
        values["given"] = sorted(set(self.given) | set(options))
        values["from_file"] = [name for name in self.from_file if name not in options]
        return TrainConfig.from_dict(values)


OPTION_GROUP: dict[str, str] = {f.name: group for group, kind in GROUPS.items() for f in fields(kind)}
# The keys of a --hyp file: every augmentation and loss knob.
HYP_GROUPS = ("augment", "loss")
HYP_OPTIONS = tuple(f.name for group in HYP_GROUPS for f in fields(GROUPS[group]))
# what a run's config.yaml holds besides the options: read back by --config only as far as they are options
DERIVED_KEYS = ("given", "from_file", "sources", "pipeline", "plan")
RUN_KEYS = (*GROUPS, *(f.name for f in fields(TrainConfig) if f.name not in GROUPS), *DERIVED_KEYS)
INPUTS = ("cfg", "data", "weights", "resume", "hyp")  # what a run reads besides its options


# Options renamed since they were first stored (config.yaml, checkpoints, recipes, --hyp files): old -> new.
RENAMED = {"assign_iou_thresh": "assign_iou_thres"}  # 0.2: one spelling, the flag's


def renamed(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with the option names of :data:`RENAMED` spelled as now."""
    return {RENAMED.get(key, key): value for key, value in values.items()}


RECIPE_DIR = Path(__file__).parents[1] / "resources" / "recipes"
RECIPES = {path.stem: path for path in sorted(RECIPE_DIR.glob("*.yaml"))}  # packaged: --config trees


def read_config(path: str | Path) -> dict[str, Any]:
    """The values of a ``--config`` file, flat: a run's ``config.yaml`` (grouped by section) or a recipe
    (grouped or flat; a name of :data:`RECIPES`, such as ``trees``, is the packaged recipe of that
    sample), with ``cfg``, ``data`` and ``weights`` if it names them. Relative paths that do
    not exist from the working directory are taken from the file's folder. :data:`DERIVED_KEYS` (what a
    run derived) and ``resume`` are not read: a recipe starts a new run."""
    path = Path(path)
    if not path.exists() and str(path) in RECIPES:
        path = RECIPES[str(path)]
    if not path.exists():
        raise FlagError(f"--config {path}: no such file, and not a packaged recipe; the packaged recipes: "
                        f"{', '.join(RECIPES)} (or give a run's config.yaml or a recipe file)")
    loaded = read_yaml(path, "--config")
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise FlagError(f"--config {path}: expected a mapping of option names to values (as a run's "
                        "config.yaml)")
    flat: dict[str, Any] = {}
    for key, value in loaded.items():
        if key in GROUPS and isinstance(value, dict):
            flat.update(value)
        elif key not in (*DERIVED_KEYS, "resume"):
            flat[key] = value
    flat = renamed(flat)
    unknown = sorted(str(key) for key in set(flat) - set(OPTION_GROUP) - set(INPUTS))
    if unknown:
        raise FlagError(f"--config {path}: unknown key(s) {', '.join(unknown)}; the keys are those of a "
                        "run's config.yaml (the flags of `turboyolo train` with underscores)")
    for key in ("cfg", "data", "weights", "hyp"):
        value = flat.get(key)
        if isinstance(value, str) and value and not Path(value).is_absolute() and not Path(value).exists():
            beside = path.parent / value
            if beside.exists():
                flat[key] = str(beside)
    flat.pop("resume", None)
    flat = checked(flat, f"--config {path}")
    return {key: tuple(value) if isinstance(value, list) else value for key, value in flat.items()}


def read_hyp(path: str | Path) -> dict[str, Any]:
    """The option values of a ``--hyp`` YAML file: flat (``mosaic: 0.5``) or grouped as in a run's
    ``config.yaml`` (``augment: {mosaic: 0.5}``, ``loss: {...}``; a whole ``config.yaml`` works, its
    other sections are not read); keys are :data:`HYP_OPTIONS`."""
    loaded = read_yaml(path, "--hyp")
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise FlagError(f"--hyp {path}: expected a mapping of option names to values")
    flat: dict[str, Any] = {}
    run_config = any(isinstance(loaded.get(group), dict) for group in HYP_GROUPS)
    for key, value in loaded.items():
        if key in HYP_GROUPS and isinstance(value, dict):
            flat.update(value)
        elif not (run_config and key in RUN_KEYS):  # a run's config.yaml: only its recipe is read
            flat[key] = value
    flat = renamed(flat)
    unknown = sorted(set(flat) - set(HYP_OPTIONS))
    if unknown:
        raise FlagError(f"--hyp {path}: unknown key(s) {', '.join(map(str, unknown))}; the keys are the "
                        f"augmentation and loss options: {', '.join(HYP_OPTIONS)}")
    flat = checked(flat, f"--hyp {path}")
    return {key: tuple(value) if isinstance(value, list) else value for key, value in flat.items()}


def refuse_new_inputs(saved: TrainConfig, passed: TrainConfig) -> None:
    """``--resume`` continues the run's own network, weights and data: a ``--cfg``, ``--weights``,
    ``--data`` or ``--hyp`` other than the run's is refused (never silently dropped)."""
    for key in ("weights", "cfg", "data", "hyp"):  # --weights NAME alone also sets cfg: name --weights
        mine, given = getattr(saved, key), getattr(passed, key)
        if given and given != mine and not (mine and _same_file(mine, given)):
            raise FlagError(
                f"--resume {passed.resume} continues its run as it was set up (--{key} {mine or 'none'}); "
                f"--{key} {given} cannot change it: drop --{key} to continue, or start a new run from these "
                f"weights: `turboyolo train --config <run>/config.yaml --weights {passed.resume} "
                f"--{key} {given}`")


def _same_file(first: str, second: str) -> bool:
    try:
        return Path(first).resolve() == Path(second).resolve()
    except OSError:
        return False


# ---------------------------------------------------------------- values from files: typed and in range
# Each option's declared type (the field's annotation); a --config / --hyp file, a checkpoint's config and
# the Python API's keywords are held to it, and to the option's range, with the file and the key named.
OPTION_TYPES = {f.name: str(f.type) for kind in GROUPS.values() for f in fields(kind)}
OPTION_TYPES.update(dict.fromkeys(INPUTS, "str | None"))


def _flag(name: str) -> str:
    """The option ``name`` as its flag and keyword (``--time-limit / time_limit_min``)."""
    kind = GROUPS.get(OPTION_GROUP.get(name, ""))
    flags = next((f.metadata.get("flags") for f in fields(kind) if f.name == name), ()) if kind else ()
    flag = next((f for f in flags if f.startswith("--")), "--" + name.replace("_", "-"))
    return f"{flag} ({name})"


def checked(values: dict[str, Any], source: str) -> dict[str, Any]:
    """``values`` (flat option names) in their declared types (:func:`turboyolo.formats.yamlfile.typed`)
    and ranges (each group's ``check``); ``anchors`` may be a YAML list of numbers (or of pairs).

    Raises:
        ConfigError (a wrong type), FlagError (out of range): naming ``source`` (the file; empty for
            keywords and flags) and the key.
    """
    out = {}
    for key, value in values.items():
        if key == "anchors" and isinstance(value, list | tuple):
            items = [v for item in value for v in (item if isinstance(item, list | tuple) else [item])]
            value = ",".join(f"{typed(v, 'float', key, source):g}" for v in items)
        out[key] = typed(value, OPTION_TYPES.get(key, "?"), key if source else _flag(key), source)
    for group, kind in GROUPS.items():
        mine = {key: value for key, value in out.items() if OPTION_GROUP.get(key) == group}
        try:
            kind(**mine).check()  # the group's range checks, on this source's values alone
        except TurboYoloError as err:  # the same kind of error, the file named
            if not source:
                raise
            raise type(err)(f"{source}: {err}") from None
    return out


def add_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of every option of :class:`TrainConfig`, one argument group per config group
    (:func:`turboyolo.options.add_flags`: a flag not passed is absent from the namespace)."""
    add_group_flags(parser, GROUPS)

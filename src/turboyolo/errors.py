"""The project's user-facing error: its message names the file or flag and the fix.

The CLI prints it without a traceback and exits non-zero. Library code raises it for anything a user
can correct (a bad file, a bad flag, missing data); programming errors stay ordinary exceptions.
"""


class TurboYoloError(Exception):
    """A problem the user can fix; ``str(err)`` says what and how."""


class ConfigError(TurboYoloError):
    """A malformed or unsupported Darknet .cfg, .data or data.yaml."""


class WeightsError(TurboYoloError):
    """A weights file that does not fit the network it is loaded into."""


class DataError(TurboYoloError):
    """A data set that cannot be used (missing lists, no images, unreadable files)."""


class AssetError(TurboYoloError):
    """A pinned download that could not be fetched or verified."""


class FlagError(TurboYoloError):
    """A command-line value (or the matching Python API argument) that cannot work."""

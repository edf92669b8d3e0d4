"""Moved to :mod:`turboyolo.data.anchors`; this alias keeps ``turboyolo.anchors`` importing for one
release (0.2) and warns."""

import sys
import warnings

from turboyolo.data import anchors as _moved

warnings.warn("turboyolo.anchors moved to turboyolo.data.anchors; import it from there (the old path goes "
              "after 0.2)", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved

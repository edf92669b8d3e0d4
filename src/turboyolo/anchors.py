"""Moved to :mod:`turboyolo.data.anchors`;
this alias keeps ``turboyolo.anchors`` importing for one release."""

import sys

from turboyolo.data import anchors as _moved

sys.modules[__name__] = _moved

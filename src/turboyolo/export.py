"""Moved to :mod:`turboyolo.infer.export`;
this alias keeps ``turboyolo.export`` importing for one release."""

import sys

from turboyolo.infer import export as _moved

sys.modules[__name__] = _moved

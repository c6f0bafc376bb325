"""A re-export of ``tests/support/cgroups.py``, so that ``tests/e2e/test_saturation_e2e.py``
imports unchanged.
Remove once it imports from ``tests.support``.
"""

from .support.cgroups import *  # noqa: F403

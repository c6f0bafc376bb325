"""A re-export of ``tests/support/cgroups.py``, so that ``tests/e2e/checks.py``
imports unchanged.
Remove once it imports from ``tests.support``.
"""

from .support.cgroups import *  # noqa: F403

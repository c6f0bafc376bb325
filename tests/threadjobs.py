"""A re-export of ``tests/support/threadjobs.py``, so that ``tests/test_thread_series_by.py``
imports unchanged.
Remove once it imports from ``tests.support``.
"""

from .support.threadjobs import *  # noqa: F403

"""Processes of one group: a private runtime directory, worker slots, and the election.

A *group* is the processes of one service (its name, namespace and
environment, as the caller names it) of one user in one cgroup on one boot of
one host.
Everything here uses kernel-released ``flock`` locks on files in a directory
private to the user, so that a process that dies frees what it held with no
coordinator. Nothing here knows about OpenTelemetry.
"""

SLOT_ATTRIBUTE = "process_metrics.worker.slot"
"""The attribute that names a worker's slot (an int): on the worker's resource, and on the
points a supervisor reports for it."""

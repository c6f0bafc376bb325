"""Event-loop delays and utilisation: every asyncio loop of the process, probed.

``window``: the delays of one window. ``select_timing``: busy and idle time.
``probe``: the ticks on one loop, parked while it sleeps. ``discovery``: the
hook that finds loops. ``monitor``: the probes of all loops, their labels,
and reads.
"""

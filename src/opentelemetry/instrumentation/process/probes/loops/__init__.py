"""Event-loop delays and utilisation: every asyncio loop of the process, probed.

``window``: the delays of one window. ``select_timing``: busy and idle time.
``probe``: the timer on one loop. ``discovery``: the hook that finds loops.
``monitor``: the probes of all loops, their labels, and reads.
"""

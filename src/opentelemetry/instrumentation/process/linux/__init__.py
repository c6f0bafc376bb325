"""Direct reads of Linux kernel interfaces, where psutil has no API or costs per item.

psutil is the source of every value it offers at a cost that does not grow
with the work. The modules here read the kernel directly only where psutil has
no API (cgroup files, pressure stall information) or where its only API costs
something per item that the metrics do not need (ranking threads, counting
sockets). Each one is Linux-only, opens, reads and closes on every call (no
long-lived file descriptors), has a psutil fallback where psutil has the value,
and is checked against psutil in a test. Nothing here knows about OpenTelemetry.
"""

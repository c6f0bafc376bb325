"""What the sweeps add to the process: idle threads and loopback sockets, made and undone here."""

from __future__ import annotations

import resource
import socket
import struct
import threading


class IdleThreads:
    """Extra threads that wait on an event: alive, but doing nothing."""

    def __init__(self) -> None:
        self._threads: list[threading.Thread] = []
        self._release = threading.Event()

    def resize(self, n: int) -> None:
        if n < len(self._threads):
            self._release.set()
            for t in self._threads:
                t.join(timeout=10)
            self._threads, self._release = [], threading.Event()
        previous = threading.stack_size(256 << 10)  # 2,000 threads stay small
        try:
            while len(self._threads) < n:
                t = threading.Thread(target=self._release.wait, name="bench-idle", daemon=True)
                t.start()
                self._threads.append(t)
        finally:
            threading.stack_size(previous)

    def __len__(self) -> int:
        return len(self._threads)


class LoopbackSockets:
    """Established TCP connections on 127.0.0.1: both ends of each are sockets of this process."""

    def __init__(self) -> None:
        self._server: socket.socket | None = None
        self._made: list[socket.socket] = []

    def resize(self, n: int) -> None:
        """Hold ``n`` sockets (both ends of n/2 connections), besides the listening one."""
        if n < len(self._made):
            self.close()
        if n and self._server is None:
            _raise_fd_limit(n + 1000)
            self._server = socket.create_server(("127.0.0.1", 0), backlog=4096)
        while len(self._made) + 1 < n and self._server is not None:
            client = socket.create_connection(self._server.getsockname())
            accepted, _ = self._server.accept()
            self._made += [client, accepted]

    def close(self) -> None:
        for s in self._made:
            # Reset rather than close: no TIME_WAIT sockets are left behind for a minute.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
        self._made = []
        if self._server is not None:
            self._server.close()
            self._server = None

    def __len__(self) -> int:
        return len(self._made)


def _raise_fd_limit(needed: int) -> None:
    """Raise RLIMIT_NOFILE's soft limit to the hard limit when ``needed`` exceeds it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise RuntimeError(f"RLIMIT_NOFILE hard limit {hard} is under the {needed} fds needed")

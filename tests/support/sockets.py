"""Real loopback sockets in known TCP and UDP states, counted by (state, transport)."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable

Counts = dict[tuple[str | None, str], int]
LOOPBACK = "127.0.0.1"


def ipv6_loopback() -> bool:
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


def wait_for(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 5
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"never reached: {what}")
        time.sleep(0.005)


def tcp_state(sock: socket.socket) -> int:
    # struct tcp_info starts with tcpi_state.
    return socket.socket.getsockopt(sock, socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0]


class Scene:
    """Real loopback sockets in known states; ``created`` counts them by key."""

    def __init__(self) -> None:
        self.stack = contextlib.ExitStack()
        self.created: Counts = {}

    def keep(self, sock: socket.socket) -> socket.socket:
        self.stack.callback(sock.close)
        return sock

    def add(self, key: tuple[str | None, str], n: int = 1) -> None:
        self.created[key] = self.created.get(key, 0) + n

    def listener(self, family: int = socket.AF_INET, host: str = LOOPBACK) -> socket.socket:
        server = self.keep(socket.socket(family, socket.SOCK_STREAM))
        server.bind((host, 0))
        server.listen(64)
        self.add(("listen", "tcp"))
        return server

    def pair(self, server: socket.socket, host: str = LOOPBACK) -> tuple[socket.socket, ...]:
        client = self.keep(socket.create_connection((host, server.getsockname()[1])))
        accepted = self.keep(server.accept()[0])
        return client, accepted

    def established(self, server: socket.socket, host: str = LOOPBACK) -> None:
        self.pair(server, host)
        self.add(("established", "tcp"), 2)

    def time_wait(self, server: socket.socket) -> None:
        client, accepted = self.pair(server)
        client.close()  # the active closer ends in TIME_WAIT
        wait_for(lambda: tcp_state(accepted) == 8, "CLOSE_WAIT after the peer's FIN")
        accepted.close()
        self.add(("time_wait", "tcp"))

    def close_wait(self, server: socket.socket) -> None:
        client, accepted = self.pair(server)
        client.close()  # the peer closed, we did not: CLOSE_WAIT here, FIN_WAIT2 there
        wait_for(lambda: tcp_state(accepted) == 8, "CLOSE_WAIT")
        self.add(("close_wait", "tcp"))
        self.add(("fin_wait_2", "tcp"))

    def syn_sent(self, n: int) -> None:
        """Connections to a listener whose accept queue is full: their SYNs are dropped."""
        full = self.keep(socket.socket())
        full.bind((LOOPBACK, 0))
        full.listen(0)
        self.add(("listen", "tcp"))
        self.keep(socket.create_connection(full.getsockname()))  # fills the queue
        self.add(("established", "tcp"), 2)  # both ends, one not accepted yet
        for _ in range(n):
            client = self.keep(socket.socket())
            client.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                client.connect(full.getsockname())
            wait_for(lambda c=client: tcp_state(c) == 2, "SYN_SENT")
        self.add(("syn_sent", "tcp"), n)

    def syn_received(self) -> None:
        """TCP_DEFER_ACCEPT keeps the request in SYN_RECV until data comes."""
        server = self.keep(socket.socket())
        server.setsockopt(socket.IPPROTO_TCP, socket.TCP_DEFER_ACCEPT, 30)
        server.bind((LOOPBACK, 0))
        server.listen(8)
        self.add(("listen", "tcp"))
        self.keep(socket.create_connection(server.getsockname()))
        self.add(("established", "tcp"))  # the client end
        self.add(("syn_received", "tcp"))  # the server's request socket

    def udp(self, family: int = socket.AF_INET, host: str = LOOPBACK) -> None:
        bound = self.keep(socket.socket(family, socket.SOCK_DGRAM))
        bound.bind((host, 0))
        connected = self.keep(socket.socket(family, socket.SOCK_DGRAM))
        connected.connect(bound.getsockname()[:2])
        self.add((None, "udp"), 2)


def build_all_states(scene: Scene) -> None:
    # Bound, never listening nor connecting: in no /proc/net/tcp line, so not counted.
    scene.keep(socket.socket()).bind((LOOPBACK, 0))
    server = scene.listener()
    scene.established(server)
    scene.time_wait(server)
    scene.close_wait(server)
    scene.syn_sent(2)
    scene.syn_received()
    scene.udp()
    if ipv6_loopback():
        server6 = scene.listener(socket.AF_INET6, "::1")
        scene.established(server6, "::1")
        scene.udp(socket.AF_INET6, "::1")
        # A dual-stack listener: the accepted IPv4 peer is an IPv4-mapped AF_INET6 socket.
        dual = scene.keep(
            socket.create_server(("::", 0), family=socket.AF_INET6, dualstack_ipv6=True)
        )
        scene.add(("listen", "tcp"))
        scene.keep(socket.create_connection((LOOPBACK, dual.getsockname()[1])))
        mapped = scene.keep(dual.accept()[0])
        assert mapped.family == socket.AF_INET6 and mapped.getsockname()[0].startswith("::ffff:")
        scene.add(("established", "tcp"), 2)

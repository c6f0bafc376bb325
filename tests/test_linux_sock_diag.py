"""The netlink sock_diag connection count against psutil.net_connections() on real sockets."""

from __future__ import annotations

import errno
import os
import signal
import socket
import struct
import sys
import time
from collections.abc import Iterator

import psutil
import pytest

from opentelemetry.instrumentation.process.sources.host import _TCP_STATES

from .support.sockets import (
    LOOPBACK,
    Counts,
    Scene,
    build_all_states,
)

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="netlink sock_diag is Linux-only"
)

if sys.platform.startswith("linux"):
    from opentelemetry.instrumentation.process.linux import sock_diag
    from opentelemetry.instrumentation.process.linux.sock_diag import connection_counts


def psutil_counts() -> Counts:
    """What today's psutil path (sources._connections) counts."""
    counts: Counts = {}
    for conn in psutil.net_connections(kind="inet"):
        transport = "tcp" if conn.type == socket.SOCK_STREAM else "udp"
        status = conn.status
        state = None if status == psutil.CONN_NONE else _TCP_STATES.get(status, status.lower())
        counts[(state, transport)] = counts.get((state, transport), 0) + 1
    return counts


def read_both(tries: int = 30) -> tuple[Counts, Counts]:
    """psutil, the reader, psutil again: retried until both psutil reads agree."""
    for _ in range(tries):
        before = psutil_counts()
        ours = connection_counts()
        after = psutil_counts()
        if before == after:
            return before, ours
        time.sleep(0.05)
    raise AssertionError("other sockets kept changing on the host")


@pytest.fixture
def scene() -> Iterator[Scene]:
    s = Scene()
    with s.stack:
        yield s


def test_counts_equal_psutil_for_every_state(scene: Scene) -> None:
    build_all_states(scene)
    theirs, ours = read_both()
    assert ours == theirs
    # A socket leaves these states on its own (a FIN_WAIT_2 whose peer closed, on a busy
    # machine before the read): the others must all be there.
    passing = {"fin_wait_1", "fin_wait_2", "closing", "last_ack", "syn_sent", "syn_received"}
    for key, n in scene.created.items():
        if key[0] not in passing:
            assert ours.get(key, 0) >= n, (key, n, ours)
    assert sum(n for (state, _), n in ours.items() if state in passing), ours


def test_thousand_sockets_still_equal(scene: Scene) -> None:
    server = scene.listener()
    for _ in range(500):
        scene.established(server)
    theirs, ours = read_both()
    assert ours == theirs
    assert ours[("established", "tcp")] >= 1000


def test_no_descriptor_left_open(scene: Scene) -> None:
    build_all_states(scene)
    before = sorted(os.listdir("/proc/self/fd"))
    connection_counts()
    assert sorted(os.listdir("/proc/self/fd")) == before


def test_kernel_error_raises_its_errno_and_closes_the_socket(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No sock_diag handler for a protocol: the kernel answers NLMSG_ERROR -ENOENT."""
    by_family = sock_diag._by_family
    monkeypatch.setattr(sock_diag, "_by_family", lambda family, protocol: by_family(family, 200))
    before = sorted(os.listdir("/proc/self/fd"))
    with pytest.raises(OSError) as info:
        connection_counts()
    assert info.value.errno == errno.ENOENT
    assert str(info.value) == "[Errno 2] sock_diag: No such file or directory"
    assert sorted(os.listdir("/proc/self/fd")) == before


def test_refused_single_tcp_dump_falls_back_to_one_per_family(
    scene: Scene, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kernel refusing the older TCP request (EINVAL) still gets counted, per family."""
    build_all_states(scene)
    request = sock_diag._tcp_all_families()
    truncated = len(request) - 8  # shorter than struct inet_diag_req: the kernel says EINVAL
    short = truncated.to_bytes(4, sys.byteorder) + request[4:truncated]
    netlink = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, sock_diag.NETLINK_SOCK_DIAG)
    netlink.settimeout(5)
    with netlink as sock, pytest.raises(OSError) as info:
        sock_diag._dump(sock, short)
    assert info.value.errno == errno.EINVAL
    monkeypatch.setattr(sock_diag, "_tcp_all_families", lambda: short)
    theirs, ours = read_both()
    assert ours == theirs
    for key, n in scene.created.items():
        assert ours.get(key, 0) >= n, (key, n, ours)


def test_in_flight_reuseport_sockets_each_count(scene: Scene) -> None:
    """The one known difference: psutil's set merges unattributed twins, the kernel does not.

    Two UDP sockets bound to one port (SO_REUSEPORT) and then held only by a unix
    socket's queue (sent with SCM_RIGHTS, closed here) have no fd in any process:
    psutil lists both as (fd=-1, pid=None, same addresses), which its set keeps once.
    """
    first = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    first.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    first.bind((LOOPBACK, 0))
    second = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    second.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    second.bind(first.getsockname())
    port = first.getsockname()[1]
    left, _ = (scene.keep(s) for s in socket.socketpair())
    socket.send_fds(left, [b"x"], [first.fileno(), second.fileno()])
    first.close()
    second.close()
    mine = [c for c in psutil.net_connections(kind="udp4") if c.laddr and c.laddr.port == port]
    assert [(c.fd, c.pid) for c in mine] == [(-1, None)]  # two sockets, one entry
    theirs, ours = read_both()
    key = (None, "udp")
    assert ours[key] == theirs[key] + 1
    assert {k: v for k, v in ours.items() if k != key} == {
        k: v for k, v in theirs.items() if k != key
    }


def test_state_names_are_todays_names() -> None:
    """Every kernel state maps to psutil's status name after today's mapping."""
    statuses = {
        1: psutil.CONN_ESTABLISHED,
        2: psutil.CONN_SYN_SENT,
        3: psutil.CONN_SYN_RECV,
        4: psutil.CONN_FIN_WAIT1,
        5: psutil.CONN_FIN_WAIT2,
        6: psutil.CONN_TIME_WAIT,
        7: psutil.CONN_CLOSE,
        8: psutil.CONN_CLOSE_WAIT,
        9: psutil.CONN_LAST_ACK,
        10: psutil.CONN_LISTEN,
        11: psutil.CONN_CLOSING,
        12: psutil.CONN_SYN_RECV,
    }
    today = {n: _TCP_STATES.get(s, s.lower()) for n, s in statuses.items()}
    assert today == sock_diag.TCP_STATE_NAMES


def test_a_reply_that_never_comes_times_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel ignores a message without NLM_F_REQUEST: no answer, so a timeout, no hang."""
    request = bytearray(sock_diag._tcp_all_families())
    request[6:8] = (0x300).to_bytes(2, sys.byteorder)  # NLM_F_DUMP without NLM_F_REQUEST
    monkeypatch.setattr(sock_diag, "_tcp_all_families", lambda: bytes(request))
    monkeypatch.setattr(sock_diag, "_TIMEOUT_SECONDS", 0.2)
    before = sorted(os.listdir("/proc/self/fd"))

    def hung(signum: int, frame: object) -> None:
        raise AssertionError("connection_counts() hung")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.setitimer(signal.ITIMER_REAL, 3)
    try:
        with pytest.raises(TimeoutError):
            connection_counts()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert sorted(os.listdir("/proc/self/fd")) == before


def test_an_unprivileged_process_counts_too(scene: Scene) -> None:
    """sock_diag dumps need no privilege: a service running as nobody gets its counts."""
    from .support.forked import in_child

    server = scene.listener()
    port = server.getsockname()[1]

    def child() -> dict[str, object]:
        os.setgid(65534)
        os.setuid(65534)
        counts = {f"{k[0]}/{k[1]}": v for k, v in connection_counts().items()}
        listening = [c for c in psutil.net_connections("tcp4") if c.laddr.port == port]
        return {"uid": os.getuid(), "counts": counts, "listening": len(listening)}

    if os.getuid() != 0:
        pytest.skip("needs root to drop to nobody")
    got = in_child(child)
    assert got["uid"] == 65534
    assert got["listening"] == 1
    assert got["counts"]["listen/tcp"] >= 1  # type: ignore[index]


# -- the wire format, against include/uapi/linux/{netlink,inet_diag}.h --------------------

NLMSGHDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
INET_DIAG_SOCKID = 48  # sport, dport, src[4], dst[4], if, cookie[2]: all zero = every socket
EVERY_STATE = sum(1 << s for s in range(1, 13))  # ESTABLISHED .. NEW_SYN_RECV


def test_the_single_tcp_request_is_an_inet_diag_req_for_both_families() -> None:
    request = sock_diag._tcp_all_families()
    length, kind, flags, seq, pid = NLMSGHDR.unpack_from(request)
    assert (length, kind, flags, seq, pid) == (len(request), 18, 0x301, 1, 0)
    # struct inet_diag_req: family, src_len, dst_len, ext, sockid, states, dbs.
    family, src_len, dst_len, ext = struct.unpack_from("=BBBB", request, 16)
    sockid = request[20 : 20 + INET_DIAG_SOCKID]
    states, dbs = struct.unpack_from("=II", request, 20 + INET_DIAG_SOCKID)
    assert len(request) == 16 + 4 + INET_DIAG_SOCKID + 8
    # AF_UNSPEC: TCP of IPv4 and IPv6; no extension asked, so replies are bare messages.
    assert (family, src_len, dst_len, ext) == (socket.AF_UNSPEC, 0, 0, 0)
    assert sockid == bytes(INET_DIAG_SOCKID)
    assert (states, dbs) == (EVERY_STATE, 0)


@pytest.mark.parametrize("family", [socket.AF_INET, socket.AF_INET6])
@pytest.mark.parametrize("protocol", [socket.IPPROTO_TCP, socket.IPPROTO_UDP])
def test_a_per_family_request_is_an_inet_diag_req_v2(family: int, protocol: int) -> None:
    request = sock_diag._by_family(family, protocol)
    length, kind, flags, seq, pid = NLMSGHDR.unpack_from(request)
    assert (length, kind, flags, seq, pid) == (len(request), 20, 0x301, 1, 0)
    # struct inet_diag_req_v2: family, protocol, ext, pad, states, sockid.
    got = struct.unpack_from("=BBBBI", request, 16)
    assert got == (family, protocol, 0, 0, EVERY_STATE)
    assert request[24:] == bytes(INET_DIAG_SOCKID)


# -- replies the kernel does not send on demand: a scripted socket ---------------------


class Replies:
    """A netlink socket that answers with scripted datagrams (faults injected)."""

    def __init__(self, *datagrams: bytes) -> None:
        self.datagrams = list(datagrams)
        self.sent: list[bytes] = []

    def sendto(self, data: bytes, address: object) -> int:
        self.sent.append(data)
        return len(data)

    def recv(self, size: int) -> bytes:
        return self.datagrams.pop(0) if self.datagrams else b""


def message(kind: int, payload: bytes = b"", length: int | None = None) -> bytes:
    size = NLMSGHDR.size + len(payload)
    body = NLMSGHDR.pack(size if length is None else length, kind, 2, 1, 0) + payload
    return body + bytes(-len(body) % 4)


def socket_in(state: int, size: int = 72) -> bytes:
    """An inet_diag_msg reply: family, then the state byte, then the rest."""
    return message(20, bytes([socket.AF_INET, state]) + bytes(size - 18))


DONE = message(3, struct.pack("=i", 0))


def _dump(*datagrams: bytes) -> list[int]:
    return sock_diag._dump(Replies(*datagrams), b"request")  # type: ignore[arg-type]


def test_sockets_are_tallied_by_state_across_datagrams() -> None:
    tally = _dump(socket_in(1) + socket_in(10), socket_in(1) + DONE)
    assert tally[1] == 2 and tally[10] == 1 and sum(tally) == 3


def test_a_done_without_an_errno_ends_the_dump() -> None:
    # NLMSG_DONE may carry no payload: a bare header, the last bytes of the datagram.
    tally = _dump(socket_in(6) + message(3))
    assert tally[6] == 1 and sum(tally) == 1


def test_an_acknowledgement_is_not_a_socket() -> None:
    tally = _dump(message(2, struct.pack("=i", 0) + bytes(16)) + socket_in(1) + DONE)
    assert sum(tally) == 1


def test_messages_are_walked_by_their_own_lengths() -> None:
    # A payload holding bytes that read as a message header is not parsed as one.
    decoy = message(20, bytes([socket.AF_INET, 7]) + bytes(2), length=144)
    first = socket_in(1, size=48)
    second = message(20, bytes([socket.AF_INET, 10]) + bytes(30) + decoy + bytes(28))
    # The decoy sits at offset 96, the length of the message it is in.
    assert (len(first), len(second)) == (48, 96)
    assert (first + second)[96:116] == decoy
    tally = _dump(first + second + DONE)
    assert tally[1] == 1 and tally[10] == 1 and tally[7] == 0 and sum(tally) == 2


@pytest.mark.parametrize(
    ("datagrams", "error"),
    [
        ((), "[Errno 71] sock_diag: the dump ended without NLMSG_DONE"),
        ((socket_in(1),), "[Errno 71] sock_diag: the dump ended without NLMSG_DONE"),
        ((message(20, bytes(4), length=8),), "[Errno 71] sock_diag: message length 8"),
        ((message(20, bytes(4), length=15),), "[Errno 71] sock_diag: message length 15"),
        (
            (message(2, struct.pack("=i", -errno.EACCES)),),
            "[Errno 13] sock_diag: Permission denied",
        ),
        ((message(3, struct.pack("=i", -errno.EINVAL)),), "[Errno 22] sock_diag: Invalid argument"),
    ],
)
def test_a_malformed_or_failed_reply_is_an_oserror(
    datagrams: tuple[bytes, ...], error: str
) -> None:
    with pytest.raises(OSError) as info:
        _dump(*datagrams)
    assert str(info.value) == error


def test_request_sockets_and_full_ones_in_syn_recv_add_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Kernel states 3 (SYN_RECV) and 12 (NEW_SYN_RECV) are one name: their counts add.

    A full socket in SYN_RECV exists only with TCP Fast Open on the server side,
    which this host cannot be asked for: the kernel's TCP tally is scripted.
    """
    tally = [0] * 256
    tally[1], tally[3], tally[12] = 4, 2, 5
    monkeypatch.setattr(sock_diag, "_tcp_states", lambda sock: list(tally))
    counts = connection_counts()
    assert counts[("syn_received", "tcp")] == 7
    assert counts[("established", "tcp")] == 4
    assert {k for k in counts if k[1] == "tcp"} == {
        ("syn_received", "tcp"),
        ("established", "tcp"),
    }

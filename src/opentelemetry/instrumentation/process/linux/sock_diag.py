"""Counts of the TCP and UDP sockets of this network namespace, from netlink sock_diag.

Reads one ``NETLINK_SOCK_DIAG`` socket per call (opened, used, closed): one
TCP dump of IPv4 and IPv6 together (``TCPDIAG_GETSOCK``, or one
``SOCK_DIAG_BY_FAMILY`` request per family where it is refused), then UDP per
family. Returns counts of sockets (unit ``{connection}``) by state and
transport, the set psutil lists from ``/proc/net/{tcp,tcp6,udp,udp6}``,
without psutil's walk of every process's fds. The requests, the states and the
one difference with psutil: docs/design.md, "Socket counts from netlink sock_diag".
"""

from __future__ import annotations

import errno
import operator
import os
import socket
import struct

__all__ = ["connection_counts"]

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
# The older inet_diag request: TCP of every family in one walk of the kernel's tables.
TCPDIAG_GETSOCK = 18
_NLM_F_REQUEST = 0x1
_NLM_F_DUMP = 0x300  # NLM_F_ROOT | NLM_F_MATCH
_NLMSG_ERROR = 2
_NLMSG_DONE = 3

# TCP_ESTABLISHED (1) .. TCP_NEW_SYN_RECV (12); not TCP_BOUND_INACTIVE (13).
_ALL_STATES = sum(1 << state for state in range(1, 13))

# Kernel TCP state numbers (include/net/tcp_states.h) to the names today's psutil
# path produces: psutil's status, through sources._TCP_STATES, lower-cased.
TCP_STATE_NAMES: dict[int, str] = {
    1: "established",
    2: "syn_sent",
    3: "syn_received",
    4: "fin_wait_1",
    5: "fin_wait_2",
    6: "time_wait",
    7: "closed",
    8: "close_wait",
    9: "last_ack",
    10: "listen",
    11: "closing",
    # Request sockets are reported as SYN_RECV; kept should a kernel send this.
    12: "syn_received",
}

# nlmsghdr: length, type, flags, sequence, port id.
_HEADER = struct.Struct("=IHHII")
# inet_diag_req_v2: family, protocol, ext, pad, states, then a zeroed inet_diag_sockid.
_REQUEST_V2 = struct.Struct("=IHHIIBBBxI48x")
# inet_diag_req: family, src_len, dst_len, ext, a zeroed inet_diag_sockid, states, dbs.
_REQUEST_V1 = struct.Struct("=IHHIIBBBB48xII")
_LENGTH_TYPE = struct.Struct("=IH")
_ERRNO = struct.Struct("=i")
# Offset of inet_diag_msg.idiag_state in a reply: after the 16-byte header and idiag_family.
_STATE_OFFSET = _HEADER.size + 1
_RECEIVE_SIZE = 32768
# A reply that never ends must not hang the collection: give up (and fall back) after this.
_TIMEOUT_SECONDS = 5.0
# A kernel without the older request answers one of these: use one request per family.
_NO_COMPAT = (errno.EINVAL, errno.ENOENT, errno.EOPNOTSUPP)


def connection_counts() -> dict[tuple[str | None, str], int]:
    """Sockets of this network namespace by ``(network.connection.state, network.transport)``.

    Keys are as today's psutil path makes them: the TCP state name (``"established"``,
    ``"listen"``, ``"time_wait"``, ``"syn_received"``, ``"fin_wait_1"``, ``"closed"``,
    ...) or ``None`` for UDP, and ``"tcp"`` or ``"udp"``. Values are socket
    counts, over IPv4 and IPv6 together; keys with no socket are absent.

    Raises:
        OSError: the direct read is unusable here; the caller should fall back to
            psutil. From ``socket()``: ``EAFNOSUPPORT``/``EPROTONOSUPPORT`` (no
            netlink or no sock_diag), ``EACCES``/``EPERM`` (a sandbox forbids it),
            ``EMFILE``. From the kernel's ``NLMSG_ERROR`` reply, with its errno:
            ``ENOENT`` when the ``inet_diag``/``tcp_diag``/``udp_diag`` module is
            missing, ``EINVAL`` for a request this kernel does not understand.
            ``EPROTO`` for a malformed reply; ``TimeoutError`` when a reply stalls
            for 5 s.
    """
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG) as sock:
        sock.settimeout(_TIMEOUT_SECONDS)
        tcp = _tcp_states(sock)
        udp = sum(_dump(sock, _by_family(socket.AF_INET, socket.IPPROTO_UDP)))
        udp += sum(_dump(sock, _by_family(socket.AF_INET6, socket.IPPROTO_UDP)))
    counts: dict[tuple[str | None, str], int] = {}
    for state, count in enumerate(tcp):
        name = TCP_STATE_NAMES.get(state)
        if count and name is not None:
            key = (name, "tcp")
            counts[key] = counts.get(key, 0) + count
    if udp:
        counts[(None, "udp")] = udp
    return counts


def _tcp_states(sock: socket.socket) -> list[int]:
    """TCP sockets of both families by kernel state number: one dump, else two."""
    try:
        return _dump(sock, _tcp_all_families())
    except OSError as exc:
        if exc.errno not in _NO_COMPAT:
            raise
    return _tcp_by_family(sock)


def _tcp_by_family(sock: socket.socket) -> list[int]:
    ipv4 = _dump(sock, _by_family(socket.AF_INET, socket.IPPROTO_TCP))
    ipv6 = _dump(sock, _by_family(socket.AF_INET6, socket.IPPROTO_TCP))
    return list(map(operator.add, ipv4, ipv6))  # two tallies of 256 states each


def _tcp_all_families() -> bytes:
    """TCPDIAG_GETSOCK dump: the kernel walks TCP once for IPv4 and IPv6 together."""
    size = _REQUEST_V1.size
    return _REQUEST_V1.pack(
        size, TCPDIAG_GETSOCK, _NLM_F_REQUEST | _NLM_F_DUMP, 1, 0, 0, 0, 0, 0, _ALL_STATES, 0
    )


def _by_family(family: int, protocol: int) -> bytes:
    """SOCK_DIAG_BY_FAMILY dump of one family and protocol, every state."""
    size = _REQUEST_V2.size
    return _REQUEST_V2.pack(
        size,
        SOCK_DIAG_BY_FAMILY,
        _NLM_F_REQUEST | _NLM_F_DUMP,
        1,
        0,
        family,
        protocol,
        0,
        _ALL_STATES,
    )


def _dump(sock: socket.socket, request: bytes) -> list[int]:
    """Send one dump request; the sockets it lists, counted by kernel state number."""
    sock.sendto(request, (0, 0))
    tally = [0] * 256
    unpack = _LENGTH_TYPE.unpack_from
    while True:
        data = sock.recv(_RECEIVE_SIZE)
        if not data:
            raise OSError(errno.EPROTO, "sock_diag: the dump ended without NLMSG_DONE")
        offset, end = 0, len(data)
        while offset + _HEADER.size <= end:
            length, kind = unpack(data, offset)
            if length < _HEADER.size:
                raise OSError(errno.EPROTO, f"sock_diag: message length {length}")
            if kind == _NLMSG_DONE:
                _raise_if_error(data, offset, length)
                return tally
            if kind == _NLMSG_ERROR:
                _raise_if_error(data, offset, length)
            else:
                tally[data[offset + _STATE_OFFSET]] += 1
            offset += (length + 3) & ~3


def _raise_if_error(data: bytes, offset: int, length: int) -> None:
    """Raise the negative errno that an NLMSG_ERROR or NLMSG_DONE payload carries."""
    if length < _HEADER.size + _ERRNO.size:
        return
    (code,) = _ERRNO.unpack_from(data, offset + _HEADER.size)
    if code < 0:
        raise OSError(-code, f"sock_diag: {os.strerror(-code)}")

"""How the process's open-file limit is shared among the listeners' sockets (F9).

Every socket a listener holds is a file descriptor, and so is every file the sink opens itself (Delta
commits and reads, the config log, its decode workers' pipes). The connection limits are Kafka's
(``listener.name.<l>.max.connections``, ``max.connections.per.ip``) and know nothing of the
open-file limit: with their defaults the listeners may hold about 32,000 sockets, while a host or a
container can cap the process at 1,024 descriptors, soft and hard. Without a share, one client's
1,000 idle connections there leave nothing for the sink's own files or for other clients: every
``accept`` fails with EMFILE, each failure logs a traceback, and the sink serves nobody.

``share_descriptors`` keeps ``RESERVED_DESCRIPTORS`` (or a quarter of the limit, if less) plus those
open at start for the sink's own use, and gives each listener the sockets it may hold at once:

- all it may want (its ``max.connections`` plus the sockets that may wait at its gate) when the sum
  over listeners fits;
- else a share of what is left in proportion to what it wants (at least one), and the sink says so
  once at start.

A listener at its share closes a new socket at once (the HTTP and Kafka gates, ``GateLimits
.max_sockets``; grpcio through its ``grpc.max_allowed_incoming_connections``), so a flood on one
listener leaves the others, and the sink's own files, their descriptors.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

__all__ = [
    "RESERVED_DESCRIPTORS",
    "DescriptorShares",
    "descriptors_in_use",
    "open_file_limit",
    "share_descriptors",
]

RESERVED_DESCRIPTORS: Final = 256
"""Descriptors kept for the sink's own files beyond those open at start: a Delta commit opens a few
at once, the decode workers hold pipes, grpcio and the event loop a handful more."""


@dataclass(frozen=True, slots=True)
class DescriptorShares:
    """Each listener's sockets: what its limits allow (``wanted``) and what it may hold (``shares``)."""

    open_file_limit: int
    for_sockets: int
    wanted: Mapping[str, int]
    shares: Mapping[str, int]

    @property
    def reduced(self) -> bool:
        """Some listener may hold fewer sockets than its limits allow."""
        return self.shares != self.wanted

    def message(self) -> str:
        """The start-up warning when ``reduced``."""
        listeners = ", ".join(
            f"{name} {self.shares[name]:,} (of {self.wanted[name]:,})" for name in self.shares
        )
        return (
            f"The open-file limit ({self.open_file_limit:,}) leaves {self.for_sockets:,} descriptors for "
            f"sockets, fewer than the connection limits allow ({sum(self.wanted.values()):,}): each "
            f"listener holds at most its share, and closes a socket over it at once: {listeners}. Raise "
            "the limit (ulimit -n, systemd's LimitNOFILE, the container runtime's nofile) to serve more"
        )


def share_descriptors(
    limit: int, in_use: int, wanted: Mapping[str, int], reserved: int = RESERVED_DESCRIPTORS
) -> DescriptorShares:
    """Share ``limit`` descriptors, ``in_use`` of them open now, among the listeners' ``wanted``
    sockets (see the module docstring)."""
    for_sockets = max(0, limit - in_use - min(reserved, limit // 4))
    total = sum(wanted.values())
    if total <= for_sockets:
        return DescriptorShares(limit, for_sockets, dict(wanted), dict(wanted))
    shares = {name: max(1, for_sockets * want // total) for name, want in wanted.items()}
    return DescriptorShares(limit, for_sockets, dict(wanted), shares)


def open_file_limit() -> int:
    """The process's soft ``RLIMIT_NOFILE`` (an unlimited one as the largest int a limit holds)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 2**63 - 1 if soft == resource.RLIM_INFINITY else soft


def descriptors_in_use() -> int:
    """The descriptors the process has open now (0 where ``/proc/self/fd`` or ``/dev/fd`` is missing)."""
    for directory in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(directory))
        except OSError:
            continue
    return 0

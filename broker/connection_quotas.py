"""Connection limits: Kafka's ConnectionQuotas (max.connections, per listener, per IP) for asyncio.

Kafka's semantics and how kbroker maps them:

- ``max.connections.per.ip`` / ``max.connections.per.ip.overrides`` (``host:count,...``; host names
  are resolved when the setting is read): a connection that would go past its address's limit is
  closed at once, as Kafka's acceptor does (TooManyConnectionsException, one INFO line).
- ``max.connections`` (broker-wide) and ``listener.name.<l>.max.connections``: Kafka's acceptor
  stops accepting while the limit is reached, so new connections wait in the kernel's accept
  backlog until a slot frees. asyncio cannot stop accepting on a listening socket, so kbroker
  accepts and *holds* the connection instead: nothing is read from it and it is not counted
  until a slot frees, then it is admitted (the per-IP check happens then, as in Kafka). Held
  connections play the role of the accept backlog: at most ``BACKLOG`` per listener wait (beyond
  that they are closed, where Kafka's kernel would drop the SYN), and a client that gives up and
  closes leaves the queue. They do count as open sockets while held.
- Kafka's inter-broker listener is protected (KIP-402) when there are several listeners: it is not
  held back by ``max.connections`` (only by its own listener limit), and when its connections take
  the broker past the limit, the least recently active connection of another listener is closed.
- The three ``max.connections*`` settings are dynamic (cluster-wide defaults or per broker): a
  raised limit admits held connections at once; a lowered one closes nothing already admitted
  (Kafka likewise). ``listener.name.<l>.max.connections`` is read from the static config only.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

log = logging.getLogger("broker.server")

INT_MAX = 2**31 - 1
BACKLOG = 1024  # the listen() backlog kbroker's listeners use
NAMES = ("max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides")


class Conn(Protocol):
    peer: tuple[str, int]
    listener_name: str
    last_activity: float

    def hold(self) -> None: ...

    def admit(self) -> None: ...

    def close(self) -> None: ...


def parse_overrides(value: str) -> dict[str, int]:
    """``host:count,host:count`` -> address -> count (Kafka resolves each host with getByName)."""
    out: dict[str, int] = {}
    for item in (value or "").split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        if not sep or not host:
            raise ValueError(f"Invalid value {value} for configuration max.connections.per.ip.overrides: "
                             f"Map entry '{item}' is not of the form host:count")
        try:
            n = int(count)
        except ValueError:
            raise ValueError(f"Invalid value {value} for configuration max.connections.per.ip.overrides: "
                             f"'{count}' is not a number") from None
        out[_address(host.strip("[]"))] = n
    return out


def _address(host: str) -> str:
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return socket.gethostbyname(host)


class ConnectionQuotas:
    def __init__(self, get: Callable[[str], Any], raw: Callable[[str], str | None], listeners: list[str],
                 inter_broker: str | None) -> None:
        self._get = get
        self._raw = raw
        self._listeners = listeners
        self._protected = inter_broker if len(listeners) > 1 else None
        self.total = 0
        self._per_ip: dict[str, int] = {}
        self._per_listener: dict[str, int] = dict.fromkeys(listeners, 0)
        self._waiting: dict[str, deque[Conn]] = {name: deque() for name in listeners}
        self._admitted: dict[str, set[Conn]] = {name: set() for name in listeners}
        self.reload()

    def reload(self) -> None:
        """(Re)read the limits; called at start and after a dynamic change of one of NAMES."""
        self.max_total = int(self._get("max.connections"))
        self.max_per_ip = int(self._get("max.connections.per.ip"))
        try:
            self.overrides = parse_overrides(self._get("max.connections.per.ip.overrides") or "")
        except (ValueError, OSError) as e:
            log.error("ignoring max.connections.per.ip.overrides: %s", e)
            self.overrides = {}
        self.max_listener = {}
        for name in self._listeners:
            value = self._raw(f"listener.name.{name.lower()}.max.connections")
            self.max_listener[name] = int(value) if value not in (None, "") else INT_MAX
        self._admit_waiting()

    def _slot_available(self, listener: str) -> bool:
        if self._per_listener.get(listener, 0) >= self.max_listener.get(listener, INT_MAX):
            return False
        return listener == self._protected or self.total < self.max_total

    def accept(self, conn: Conn) -> None:
        """A new connection: admitted, held until a slot frees, or closed."""
        listener = conn.listener_name
        if self._waiting[listener] or not self._slot_available(listener):
            if len(self._waiting[listener]) >= BACKLOG:
                log.info("closing connection from %s:%s: %d connections already wait for a slot on listener %s",
                         *conn.peer, BACKLOG, listener)
                conn.close()
                return
            log.debug("connection from %s:%s waits for a slot: max.connections=%d reached (listener %s: %d of %d)",
                      *conn.peer, self.max_total, listener, self._per_listener[listener], self.max_listener[listener])
            self._waiting[listener].append(conn)
            conn.hold()
            return
        self._admit(conn)

    def _admit(self, conn: Conn) -> bool:
        ip = conn.peer[0]
        count = self._per_ip.get(ip, 0)
        limit = self.overrides.get(ip, self.max_per_ip)
        if count >= limit:
            log.info("Rejected connection from %s, address already has the configured maximum of %d connections.",
                     ip, limit)
            conn.close()
            return False
        self._per_ip[ip] = count + 1
        self.total += 1
        listener = conn.listener_name
        self._per_listener[listener] += 1
        self._admitted[listener].add(conn)
        conn.admit()
        if listener == self._protected and self.total > self.max_total:
            self._close_lru()
        return True

    def _close_lru(self) -> None:
        """KIP-402: make room for an inter-broker connection by closing another listener's least recently active one."""
        others = [c for name, conns in self._admitted.items() if name != self._protected for c in conns]
        if others:
            victim = min(others, key=lambda c: c.last_activity)
            log.info("closing connection from %s:%s on listener %s: max.connections=%d reached by inter-broker "
                     "connections", *victim.peer, victim.listener_name, self.max_total)
            victim.close()

    def release(self, conn: Conn) -> None:
        """The connection closed (admitted or held)."""
        listener = conn.listener_name
        if conn in self._admitted[listener]:
            self._admitted[listener].discard(conn)
            ip = conn.peer[0]
            left = self._per_ip.get(ip, 1) - 1
            if left > 0:
                self._per_ip[ip] = left
            else:
                self._per_ip.pop(ip, None)
            self.total -= 1
            self._per_listener[listener] -= 1
            self._admit_waiting()
        else:
            try:
                self._waiting[listener].remove(conn)
            except ValueError:
                pass

    def _admit_waiting(self) -> None:
        for listener, queue in self._waiting.items():
            while queue and self._slot_available(listener):
                self._admit(queue.popleft())

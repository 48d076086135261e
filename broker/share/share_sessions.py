"""Share sessions (KIP-932, Kafka's ShareSessionCache): the partitions a share consumer member
fetches from this broker, and the epoch its ShareFetch / ShareAcknowledge requests must carry.

A session is keyed by (group id, member id). ShareFetch with epoch 0 opens one (replacing the
member's previous session here; acknowledgements are not allowed in it: INVALID_REQUEST), with
-1 it is the member's last request (acknowledgements only; the session ends afterwards and the
member's acquired records are released), any other epoch must match the session's
(INVALID_SHARE_SESSION_EPOCH; no session: SHARE_SESSION_NOT_FOUND) and is then incremented
(1, 2, ... wrapping to 1). A request adds partitions to the session and forgets those it lists in
ForgottenTopicsData. ShareAcknowledge never opens a session (epoch 0: INVALID_SHARE_SESSION_EPOCH).

At most ``group.share.max.share.sessions`` sessions exist (SHARE_SESSION_LIMIT_REACHED beyond).
A session belongs to the connection that opened it: when that connection closes (the consumer
crashed or closed), the session ends as with epoch -1, and when a group has no session left on
this broker its share-partitions are dropped from memory (Kafka's onGroupEmpty: the next fetch
reads their state again, e.g. after an offset reset).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from protocol.errors import ErrorCode

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
MAX_EPOCH = 2**31 - 1

SessionKey = tuple[str, str]  # (group id, member id)
PartitionKey = tuple[str, int]  # (topic name, partition)


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= MAX_EPOCH or epoch < 0 else epoch + 1


@dataclass(slots=True)
class ShareSession:
    key: SessionKey
    epoch: int
    connection_id: int
    # In the order first seen: (topic, partition) -> topic id.
    partitions: dict[PartitionKey, object] = field(default_factory=dict)


class SessionError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class ShareSessionCache:
    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self.sessions: dict[SessionKey, ShareSession] = {}
        self._by_connection: dict[int, set[SessionKey]] = {}
        self.evictions = 0  # sessions ended by their connection closing

    def __len__(self) -> int:
        return len(self.sessions)

    def get(self, key: SessionKey) -> ShareSession | None:
        return self.sessions.get(key)

    def partition_count(self) -> int:
        return sum(len(s.partitions) for s in self.sessions.values())

    def group_has_sessions(self, group_id: str) -> bool:
        return any(k[0] == group_id for k in self.sessions)

    def fetch_context(self, group_id: str, member_id: str, epoch: int, add: dict[PartitionKey, object],
                      forget: list[PartitionKey], acks_present: bool, connection_id: int) -> ShareSession:
        """The session a ShareFetch works in (Kafka's SharePartitionManager.newContext); raises
        SessionError with Kafka's code."""
        key = (group_id, member_id)
        if epoch == FINAL_EPOCH:
            session = self.sessions.get(key)
            if session is None:
                raise SessionError(ErrorCode.SHARE_SESSION_NOT_FOUND, f"Share session {key} not found.")
            return session
        if epoch == INITIAL_EPOCH:
            if acks_present:
                raise SessionError(ErrorCode.INVALID_REQUEST,
                                   "Acknowledge data present in the initial ShareFetch request.")
            self.remove(key)
            if len(self.sessions) >= self.max_entries:
                raise SessionError(ErrorCode.SHARE_SESSION_LIMIT_REACHED,
                                   f"The share session cache is full ({self.max_entries} sessions).")
            session = ShareSession(key, next_epoch(INITIAL_EPOCH), connection_id, dict(add))
            self.sessions[key] = session
            self._by_connection.setdefault(connection_id, set()).add(key)
            return session
        session = self.sessions.get(key)
        if session is None:
            raise SessionError(ErrorCode.SHARE_SESSION_NOT_FOUND, f"Share session {key} not found.")
        if session.epoch != epoch:
            raise SessionError(ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                               f"Expected share session epoch {session.epoch}, but got {epoch}.")
        for pk in forget:
            session.partitions.pop(pk, None)
        for pk, tid in add.items():
            session.partitions.setdefault(pk, tid)
        session.epoch = next_epoch(session.epoch)
        return session

    def acknowledge_context(self, group_id: str, member_id: str, epoch: int) -> ShareSession:
        """The session a ShareAcknowledge works in (Kafka's acknowledgeSessionUpdate)."""
        if epoch == INITIAL_EPOCH:
            raise SessionError(ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                               "ShareAcknowledge cannot open a share session (epoch 0).")
        key = (group_id, member_id)
        session = self.sessions.get(key)
        if session is None:
            raise SessionError(ErrorCode.SHARE_SESSION_NOT_FOUND, f"Share session {key} not found.")
        if epoch == FINAL_EPOCH:
            return session
        if session.epoch != epoch:
            raise SessionError(ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                               f"Expected share session epoch {session.epoch}, but got {epoch}.")
        session.epoch = next_epoch(session.epoch)
        return session

    def remove(self, key: SessionKey) -> ShareSession | None:
        session = self.sessions.pop(key, None)
        if session is not None:
            keys = self._by_connection.get(session.connection_id)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_connection[session.connection_id]
        return session

    def on_disconnect(self, connection_id: int) -> list[ShareSession]:
        """The sessions the closed connection held, removed."""
        out = []
        for key in list(self._by_connection.pop(connection_id, ())):
            session = self.sessions.pop(key, None)
            if session is not None:
                out.append(session)
                self.evictions += 1
        return out

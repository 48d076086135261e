"""One broker's Schema Registry: the replayed store, the operations, the REST listener and the
produce-path validation, started and stopped by the broker with the interface it hands over
(registry.access.RegistryAccess)."""

from __future__ import annotations

import logging
import ssl

from registry.access import RegistryAccess
from registry.http_api import Authenticate, RegistryServer
from registry.service import SchemaRegistry
from registry.store import SchemaStore
from registry.validation import RecordChecker, TopicValidation

log = logging.getLogger("registry")

# A produce whose records name an id this broker has not replayed yet waits (at most this long)
# for what its replica of _schemas already holds to be committed and applied, then checks again.
VALIDATION_CATCH_UP_S = 2.0


class RegistryNode:
    def __init__(self, access: RegistryAccess, listener: str | None, *, max_schema_bytes: int,
                 ssl_context: ssl.SSLContext | None = None, client_ssl: ssl.SSLContext | None = None,
                 authenticate: Authenticate | None = None) -> None:
        self.store = SchemaStore(access)
        self.registry = SchemaRegistry(self.store, max_schema_bytes=max_schema_bytes)
        self.server = (RegistryServer(self.registry, listener, ssl_context=ssl_context, client_ssl=client_ssl,
                                      authenticate=authenticate) if listener else None)

    async def start(self) -> tuple[str, int] | None:
        self.store.catch_up()
        self.store.start()
        return await self.server.start() if self.server is not None else None

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop()
        await self.store.stop()

    def _record_name(self, schema_id: int) -> str | None:
        stored = self.store.state.schemas.get(schema_id)
        if stored is None:
            return None
        try:
            return self.registry.parse_stored(stored).record_name()
        except Exception:  # noqa: BLE001 - an unparsable stored schema names no record
            return None

    async def validate(self, topic: str, settings: TopicValidation,
                       records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]]
                       ) -> list[tuple[int, str]]:
        """(batch index, message) for every refused record of one batch ([] = accept)."""
        errors = RecordChecker(self.store.state, self._record_name).check(topic, settings, records)
        if errors and self.store.maybe_behind():
            # Maybe registered a moment ago through another broker: settle what is here, retry.
            await self.store.settle(VALIDATION_CATCH_UP_S)
            errors = RecordChecker(self.store.state, self._record_name).check(topic, settings, records)
        return errors

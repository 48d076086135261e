"""Shared test helpers: a kbroker subprocess (:mod:`.broker_proc`) and blocking raw-protocol I/O (:mod:`.wire`)."""

from .broker_proc import BrokerError, BrokerProcess, free_port
from .wire import ConnectionClosed, RawConnection, send_raw, send_request

__all__ = ["BrokerError", "BrokerProcess", "ConnectionClosed", "RawConnection", "free_port", "send_raw",
           "send_request"]

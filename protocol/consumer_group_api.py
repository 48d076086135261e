"""KIP-848 ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69) wire structs.

kafka-python 3.0 ships no schema for these APIs, so their Kafka message definitions live in
protocol/schemas/ and the classes are built the way kafka-python builds its own (JSON-driven
ApiMessage subclasses). Importing this module registers them in the API table.
"""

from __future__ import annotations

from kafka.protocol.api_message import ApiMessage

from protocol.api_table import ApiSpec, register


class ConsumerGroupHeartbeatRequest(ApiMessage, load_json="protocol.schemas"):
    pass


class ConsumerGroupHeartbeatResponse(ApiMessage, load_json="protocol.schemas"):
    pass


class ConsumerGroupDescribeRequest(ApiMessage, load_json="protocol.schemas"):
    pass


class ConsumerGroupDescribeResponse(ApiMessage, load_json="protocol.schemas"):
    pass


for _req, _resp in ((ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse),
                    (ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse)):
    register(ApiSpec(_req.API_KEY, _req.name.removesuffix("Request"), _req, _resp, _req.max_version))

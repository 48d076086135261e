"""KIP-932 share-group wire structs: the client APIs, the share-state RPCs and the admin APIs.

kafka-python 3.0 ships no schema for these APIs, so their Kafka message definitions live in
protocol/schemas/ (Kafka 4.2's, without the docs) and the classes are built the way kafka-python
builds its own (JSON-driven ApiMessage subclasses). Importing this module registers them in the
API table:

- ShareGroupHeartbeat (76) v1, ShareGroupDescribe (77) v1, ShareFetch (78) v1,
  ShareAcknowledge (79) v1: what share consumers send (librdkafka 2.15+ sends v1 of each);
- InitializeShareGroupState (83), ReadShareGroupState (84), WriteShareGroupState (85),
  DeleteShareGroupState (86), ReadShareGroupStateSummary (87), all v0: between share-partition
  leaders / group coordinators and the share coordinator;
- DescribeShareGroupOffsets (90), AlterShareGroupOffsets (91), DeleteShareGroupOffsets (92), v0:
  the admin APIs behind `kbroker share-groups`.

Version 0 of the client APIs (Kafka 4.0's early access) was removed from Kafka in 4.1; it is
not served, and these structs do not encode it.
"""

from __future__ import annotations

from kafka.protocol.api_message import ApiMessage

from protocol.api_table import ApiSpec, register


class ShareGroupHeartbeatRequest(ApiMessage, load_json="protocol.schemas"):
    pass


class ShareGroupHeartbeatResponse(ApiMessage, load_json="protocol.schemas"):
    pass


class ShareGroupDescribeRequest(ApiMessage, load_json="protocol.schemas"):
    pass


class ShareGroupDescribeResponse(ApiMessage, load_json="protocol.schemas"):
    pass


class ShareFetchRequest(ApiMessage, load_json="protocol.schemas"):
    pass


class ShareFetchResponse(ApiMessage, load_json="protocol.schemas"):
    pass


class ShareAcknowledgeRequest(ApiMessage, load_json="protocol.schemas"):
    pass


class ShareAcknowledgeResponse(ApiMessage, load_json="protocol.schemas"):
    pass


class InitializeShareGroupStateRequest(ApiMessage, load_json="protocol.schemas"):
    pass


class InitializeShareGroupStateResponse(ApiMessage, load_json="protocol.schemas"):
    pass


class ReadShareGroupStateRequest(ApiMessage, load_json="protocol.schemas"):
    pass


class ReadShareGroupStateResponse(ApiMessage, load_json="protocol.schemas"):
    pass


class WriteShareGroupStateRequest(ApiMessage, load_json="protocol.schemas"):
    pass


class WriteShareGroupStateResponse(ApiMessage, load_json="protocol.schemas"):
    pass


class DeleteShareGroupStateRequest(ApiMessage, load_json="protocol.schemas"):
    pass


class DeleteShareGroupStateResponse(ApiMessage, load_json="protocol.schemas"):
    pass


class ReadShareGroupStateSummaryRequest(ApiMessage, load_json="protocol.schemas"):
    pass


class ReadShareGroupStateSummaryResponse(ApiMessage, load_json="protocol.schemas"):
    pass


class DescribeShareGroupOffsetsRequest(ApiMessage, load_json="protocol.schemas"):
    pass


class DescribeShareGroupOffsetsResponse(ApiMessage, load_json="protocol.schemas"):
    pass


class AlterShareGroupOffsetsRequest(ApiMessage, load_json="protocol.schemas"):
    pass


class AlterShareGroupOffsetsResponse(ApiMessage, load_json="protocol.schemas"):
    pass


class DeleteShareGroupOffsetsRequest(ApiMessage, load_json="protocol.schemas"):
    pass


class DeleteShareGroupOffsetsResponse(ApiMessage, load_json="protocol.schemas"):
    pass


PAIRS = (
    (ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse),
    (ShareGroupDescribeRequest, ShareGroupDescribeResponse),
    (ShareFetchRequest, ShareFetchResponse),
    (ShareAcknowledgeRequest, ShareAcknowledgeResponse),
    (InitializeShareGroupStateRequest, InitializeShareGroupStateResponse),
    (ReadShareGroupStateRequest, ReadShareGroupStateResponse),
    (WriteShareGroupStateRequest, WriteShareGroupStateResponse),
    (DeleteShareGroupStateRequest, DeleteShareGroupStateResponse),
    (ReadShareGroupStateSummaryRequest, ReadShareGroupStateSummaryResponse),
    (DescribeShareGroupOffsetsRequest, DescribeShareGroupOffsetsResponse),
    (AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsResponse),
    (DeleteShareGroupOffsetsRequest, DeleteShareGroupOffsetsResponse),
)

for _req, _resp in PAIRS:
    register(ApiSpec(_req.API_KEY, _req.name.removesuffix("Request"), _req, _resp, _req.max_version))

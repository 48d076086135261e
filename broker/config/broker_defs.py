"""Broker config definitions, as data: Kafka's names, types, defaults, validation and dynamic flag.

An entry with ``topic=`` supplies the default of that topic-level config (Kafka's
ServerTopicConfigSynonyms). kbroker's own extensions carry the ``kbroker.`` prefix.
"""

from __future__ import annotations

from typing import Any

from broker.config.kafka_broker_configs import KAFKA_BROKER_CONFIGS
from broker.config.types import INT_MAX, LONG_MAX, ConfigDef
from broker.config.validators import (
    GZIP_LEVEL,
    LZ4_LEVEL,
    ZSTD_LEVEL,
    ListenersValidator,
    NonEmptyList,
    ProtocolMapValidator,
    Validator,
    ValidList,
    ValidString,
    at_least,
    between,
)

COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
CLEANUP_POLICIES = ("compact", "delete")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "WARN", "ERROR", "CRITICAL")  # Python logging names

# Kafka 3.x accepted segment.bytes >= 14 (the v0 record overhead); Kafka 4.0 raised the floor to 1 MiB
# and added an internal override for tests.  kbroker keeps the 3.x floor: small segments are how
# roll, retention and compaction get tested without writing gigabytes.
MIN_SEGMENT_BYTES = 14


def _b(name: str, type_: str, default: Any, doc: str, valid: Validator | None = None, *, dynamic: bool = False,
       topic: str | None = None) -> ConfigDef:
    if isinstance(default, bool):
        default = "true" if default else "false"
    elif default is not None:
        default = str(default)
    return ConfigDef(name, type_, default, doc, valid, dynamic, topic)


_WEEK_MS = 7 * 24 * 3600 * 1000
_DAY_MS = 24 * 3600 * 1000

_BROKER_DEFS: list[ConfigDef] = [
    # --- identity and networking
    _b("node.id", "int", None, "Id of this node in the cluster; kbroker uses 1 when neither node.id nor broker.id is set.",
       at_least(-1)),
    _b("broker.id", "int", -1, "Legacy name of the node id; used when node.id is not set.", at_least(-1)),
    _b("process.roles", "list", "broker,controller",
       "Roles this process plays (informational: a kbroker node is always broker and controller).",
       ValidList(("broker", "controller"))),
    _b("cluster.id", "string", None,
       "kbroker extension: cluster id to use; when unset one is generated and stored in meta.properties."),
    _b("listeners", "list", "PLAINTEXT://127.0.0.1:9092",
       "Comma-separated NAME://host:port addresses to listen on; an empty host or 0.0.0.0 binds all interfaces.",
       ListenersValidator()),
    _b("advertised.listeners", "list", None,
       "Addresses given to clients in Metadata; defaults to listeners with wildcard hosts replaced by 127.0.0.1.",
       ListenersValidator()),
    _b("listener.security.protocol.map", "string",
       "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
       "Maps each listener name to its security protocol.", ProtocolMapValidator()),
    _b("socket.request.max.bytes", "int", 104857600, "Largest request frame the server accepts.", at_least(1)),
    _b("socket.send.buffer.bytes", "int", 102400,
       "SO_SNDBUF for client sockets in Kafka (-1: the OS default). Accepted and reported, not applied: kbroker "
       "leaves socket buffer sizes to the OS's autotuning."),
    _b("socket.receive.buffer.bytes", "int", 102400,
       "SO_RCVBUF for client sockets in Kafka (-1: the OS default). Accepted and reported, not applied: kbroker "
       "leaves socket buffer sizes to the OS's autotuning."),
    _b("queued.max.requests", "int", 500, "Requests queued per server before reading from sockets pauses.",
       at_least(1)),
    _b("queued.max.request.bytes", "long", 268435456,
       "Upper bound on the memory of requests being read and queued; reading from sockets pauses while it is "
       "reached. Kafka's default is -1 (unbounded); kbroker defaults to 256 MiB. 0 or -1 = unbounded.", at_least(-1)),
    _b("connections.max.idle.ms", "long", 600000,
       "Close connections that have had no request in flight and no bytes received or sent for this long.",
       at_least(1)),
    # --- connection limits and client quotas (broker/connection_quotas.py, security/quotas.py)
    _b("max.connections", "int", INT_MAX,
       "Connections the broker holds at once (listener.name.<l>.max.connections per listener, static). At the "
       "limit new connections wait, unread, until one closes (Kafka stops accepting); the inter-broker listener "
       "is exempt when there are several listeners.", at_least(0), dynamic=True),
    _b("max.connections.per.ip", "int", INT_MAX,
       "Connections allowed from one address; one more is closed at once.", at_least(0), dynamic=True),
    _b("max.connections.per.ip.overrides", "string", "",
       "Per-address exceptions to max.connections.per.ip, as host:count,host:count (host names are resolved).",
       dynamic=True),
    _b("quota.window.num", "int", 11, "Samples kept to measure client byte rates against their quotas.",
       at_least(2)),
    _b("quota.window.size.seconds", "int", 1, "Length of one client-quota sample window.", at_least(1)),
    # --- security (TLS, SASL): security/tls.py, security/sasl.py; each ssl.* / sasl.enabled.mechanisms
    # name may be overridden per listener as listener.name.<listener>.<name>, as in Kafka. Dynamic
    # (per-broker) like Kafka's, but listeners are built at start: a dynamic change applies at the next start.
    _b("connections.max.reauth.ms", "long", 0,
       "KIP-368: SASL sessions end after this long; clients re-authenticate on the same connection "
       "(SaslAuthenticate v1+ is told the session lifetime), a request after expiry closes the connection. "
       "0 = sessions never expire."),
    _b("sasl.enabled.mechanisms", "list", "GSSAPI",
       "SASL mechanisms SASL listeners accept. kbroker serves PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512; any other "
       "(Kafka's default GSSAPI included) refuses start-up when a SASL listener exists.", dynamic=True),
    _b("ssl.keystore.type", "string", "JKS", "Key store format; kbroker reads PEM only (set PEM).", dynamic=True),
    _b("ssl.keystore.location", "string", None, "PEM file holding the private key and the certificate chain.", dynamic=True),
    _b("ssl.keystore.certificate.chain", "password", None, "Inline PEM certificate chain (with ssl.keystore.key).", dynamic=True),
    _b("ssl.keystore.key", "password", None, "Inline PEM private key (with ssl.keystore.certificate.chain).", dynamic=True),
    _b("ssl.key.password", "password", None, "Password of an encrypted private key.", dynamic=True),
    _b("ssl.truststore.type", "string", "JKS", "Trust store format; kbroker reads PEM only (set PEM).", dynamic=True),
    _b("ssl.truststore.location", "string", None, "PEM file of the CA certificates client certificates are checked against.", dynamic=True),
    _b("ssl.truststore.certificates", "password", None, "Inline PEM CA certificates (instead of ssl.truststore.location).", dynamic=True),
    _b("ssl.client.auth", "string", "none",
       "Client certificates: none, requested or required. On SASL_SSL listeners only the listener-prefixed form "
       "applies (KIP-684).", ValidString(("none", "requested", "required")), dynamic=True),
    _b("ssl.enabled.protocols", "list", "TLSv1.2,TLSv1.3", "TLS versions accepted (TLSv1.2, TLSv1.3).", dynamic=True),
    _b("ssl.cipher.suites", "list", "",
       "TLS 1.2 cipher suites (IANA or OpenSSL names); empty = the TLS library's defaults. TLS 1.3 suites "
       "cannot be narrowed.", dynamic=True),
    _b("ssl.principal.mapping.rules", "string", "DEFAULT",
       "Rules mapping a client certificate's subject (RFC 2253) to the principal name: DEFAULT keeps it, "
       "RULE:pattern/replacement/[L|U] rewrites it."),
    _b("message.max.bytes", "int", 1048588,
       "Largest record batch (after compression) the broker accepts; topic default for max.message.bytes.",
       at_least(0), dynamic=True, topic="max.message.bytes"),
    _b("fetch.max.bytes", "int", 57671680, "Upper bound on the bytes returned for one fetch request.",
       at_least(1024)),
    _b("replica.fetch.max.bytes", "int", 1048576, "Bytes a follower tries to fetch per partition.", at_least(0)),
    _b("max.incremental.fetch.session.cache.slots", "int", 1000, "Number of incremental fetch sessions kept.",
       at_least(0)),
    # Accepted so that a stock Kafka server.properties loads without warnings; they do not change
    # kbroker's behaviour (one event loop per process, no separate controller quorum).
    _b("controller.listener.names", "list", None,
       "Listener names used by the KRaft controller; kbroker does not advertise these to clients."),
    _b("inter.broker.listener.name", "string", None, "Listener used between brokers (defaults to the first listener)."),
    _b("controller.quorum.voters", "list", "", "KRaft voter set (accepted and ignored: kbroker has no Raft quorum)."),
    _b("controller.quorum.bootstrap.servers", "list", "",
       "KRaft controller bootstrap addresses (accepted and ignored)."),
    # Thread counts: dynamic (cluster-wide) as in Kafka, within Kafka's half-to-double rule
    # (broker/handlers/configs.py), and without effect: kbroker has no such thread pools.
    _b("num.network.threads", "int", 3, "Network threads in Kafka (accepted and ignored: kbroker uses one event loop).",
       at_least(1), dynamic=True),
    _b("num.io.threads", "int", 8, "Request handler threads in Kafka (accepted and ignored).", at_least(1),
       dynamic=True),
    _b("num.recovery.threads.per.data.dir", "int", 1, "Threads per data dir for log recovery (accepted and ignored).",
       at_least(1), dynamic=True),
    _b("log.cleaner.threads", "int", 1, "Log cleaner threads (kbroker runs cleaning in an executor).", at_least(0),
       dynamic=True),
    # --- topics
    _b("num.partitions", "int", 1, "Partition count for auto-created topics and CreateTopics without a count.",
       at_least(1)),
    _b("default.replication.factor", "int", 1, "Replication factor for auto-created topics and CreateTopics without one.",
       at_least(1)),
    _b("auto.create.topics.enable", "boolean", True, "Create a topic when a client asks for metadata of an unknown one."),
    _b("delete.topic.enable", "boolean", True, "Allow DeleteTopics; when false topics cannot be deleted."),
    _b("min.insync.replicas", "int", 1, "Replicas that must acknowledge an acks=all write.", at_least(1),
       dynamic=True, topic="min.insync.replicas"),
    _b("unclean.leader.election.enable", "boolean", False, "Allow an out-of-sync replica to become leader.",
       dynamic=True, topic="unclean.leader.election.enable"),
    _b("compression.type", "string", "producer",
       "Final compression of topic data; 'producer' keeps what the producer sent.",
       ValidString(COMPRESSION_TYPES), dynamic=True, topic="compression.type"),
    _b("compression.gzip.level", "int", -1, "Gzip level used when compression.type is gzip.", GZIP_LEVEL,
       dynamic=True, topic="compression.gzip.level"),
    _b("compression.lz4.level", "int", 9, "LZ4 level used when compression.type is lz4.", LZ4_LEVEL,
       dynamic=True, topic="compression.lz4.level"),
    _b("compression.zstd.level", "int", 3, "Zstd level used when compression.type is zstd.", ZSTD_LEVEL,
       dynamic=True, topic="compression.zstd.level"),
    # --- log storage
    _b("log.dirs", "list", None, "Directories holding partition data; overrides log.dir.", NonEmptyList()),
    _b("log.dir", "list", "./data", "Data directory used when log.dirs is not set.", NonEmptyList()),
    _b("log.segment.bytes", "int", 1073741824, "Size at which a log segment is rolled.",
       at_least(MIN_SEGMENT_BYTES), dynamic=True, topic="segment.bytes"),
    _b("log.roll.ms", "long", None, "Time after which a segment is rolled; overrides log.roll.hours.", at_least(1),
       dynamic=True, topic="segment.ms"),
    _b("log.roll.hours", "int", 168, "Hours after which a segment is rolled (used when log.roll.ms is unset).",
       at_least(1), topic="segment.ms"),
    _b("log.roll.jitter.ms", "long", None, "Random jitter subtracted from the roll time; overrides log.roll.jitter.hours.",
       at_least(0), dynamic=True, topic="segment.jitter.ms"),
    _b("log.roll.jitter.hours", "int", 0, "Roll jitter in hours (used when log.roll.jitter.ms is unset).", at_least(0),
       topic="segment.jitter.ms"),
    _b("log.retention.ms", "long", None,
       "Time to keep a segment before deleting it; -1 keeps forever. Wins over minutes and hours.",
       at_least(-1), dynamic=True, topic="retention.ms"),
    _b("log.retention.minutes", "int", None, "Retention in minutes; used when log.retention.ms is unset.",
       topic="retention.ms"),
    _b("log.retention.hours", "int", 168, "Retention in hours; used when ms and minutes are unset.",
       topic="retention.ms"),
    _b("log.retention.bytes", "long", -1, "Maximum partition size before old segments are deleted; -1 is unlimited.",
       dynamic=True, topic="retention.bytes"),
    _b("log.retention.check.interval.ms", "long", 300000, "How often segments are checked for deletion.",
       at_least(1)),
    _b("log.segment.delete.delay.ms", "long", 60000, "Delay before a deleted segment's files are removed.",
       at_least(0), dynamic=True, topic="file.delete.delay.ms"),
    _b("log.index.interval.bytes", "int", 4096, "Bytes of log between offset index entries.", at_least(0),
       dynamic=True, topic="index.interval.bytes"),
    _b("log.index.size.max.bytes", "int", 10485760, "Maximum size of an offset index file.", at_least(4),
       dynamic=True, topic="segment.index.bytes"),
    _b("log.preallocate", "boolean", False, "Kafka preallocates whole segment files with it; kbroker accepts and reports it but does not act on it "
       "(kbroker.log.preallocate.ahead reserves blocks ahead of fast-filling segments instead).", dynamic=True,
       topic="preallocate"),
    _b("log.flush.interval.messages", "long", LONG_MAX, "Messages appended before a partition is fsynced.",
       at_least(1), dynamic=True, topic="flush.messages"),
    _b("log.flush.interval.ms", "long", None,
       "Max time data may sit unflushed; falls back to log.flush.scheduler.interval.ms.", dynamic=True,
       topic="flush.ms"),
    _b("log.flush.scheduler.interval.ms", "long", LONG_MAX, "How often the flusher checks whether logs need fsync.",
       topic="flush.ms"),
    _b("log.flush.offset.checkpoint.interval.ms", "int", 60000,
       "How often the recovery-point checkpoint file is written.", at_least(0)),
    _b("log.flush.start.offset.checkpoint.interval.ms", "int", 60000,
       "How often the log-start-offset checkpoint file is written.", at_least(0)),
    _b("log.cleanup.policy", "list", "delete", "Default cleanup policy: delete, compact, or both.",
       ValidList(CLEANUP_POLICIES), dynamic=True, topic="cleanup.policy"),
    _b("log.cleaner.enable", "boolean", True, "Run the log cleaner (needed for compacted topics)."),
    _b("log.cleaner.backoff.ms", "long", 15000, "Sleep between cleaner passes when nothing is cleanable.",
       at_least(0), dynamic=True),
    _b("log.cleaner.delete.retention.ms", "long", _DAY_MS, "How long tombstones are kept on compacted topics.",
       at_least(0), dynamic=True, topic="delete.retention.ms"),
    _b("log.cleaner.min.cleanable.ratio", "double", 0.5, "Dirty/total ratio that makes a log eligible for cleaning.",
       between(0, 1), dynamic=True, topic="min.cleanable.dirty.ratio"),
    _b("log.cleaner.min.compaction.lag.ms", "long", 0, "Minimum age before a record may be compacted.",
       at_least(0), dynamic=True, topic="min.compaction.lag.ms"),
    _b("log.cleaner.max.compaction.lag.ms", "long", LONG_MAX, "Maximum time a record stays ineligible for compaction.",
       at_least(1), dynamic=True, topic="max.compaction.lag.ms"),
    _b("log.message.timestamp.type", "string", "CreateTime",
       "Whether batch timestamps are the producer's (CreateTime) or the append time (LogAppendTime).",
       ValidString(TIMESTAMP_TYPES), dynamic=True, topic="message.timestamp.type"),
    _b("log.message.timestamp.before.max.ms", "long", LONG_MAX,
       "How far in the past a CreateTime timestamp may be before the batch is rejected.", at_least(0),
       dynamic=True, topic="message.timestamp.before.max.ms"),
    _b("log.message.timestamp.after.max.ms", "long", LONG_MAX,
       "How far in the future a CreateTime timestamp may be before the batch is rejected.", at_least(0),
       dynamic=True, topic="message.timestamp.after.max.ms"),
    _b("log.message.downconversion.enable", "boolean", True,
       "Allow down-conversion for old fetch versions (kbroker serves v2 batches only).", dynamic=True,
       topic="message.downconversion.enable"),
    # --- group coordinator / __consumer_offsets
    _b("offsets.topic.num.partitions", "int", 50, "Partitions of __consumer_offsets (fixed once created).",
       at_least(1)),
    _b("offsets.topic.replication.factor", "short", 3,
       "Replication factor of __consumer_offsets (capped at the live broker count by kbroker).", at_least(1)),
    _b("offsets.topic.segment.bytes", "int", 104857600, "Segment size of __consumer_offsets.", at_least(1)),
    _b("offsets.retention.minutes", "int", 10080, "How long committed offsets of an empty group are kept.",
       at_least(1)),
    _b("offsets.retention.check.interval.ms", "long", 600000, "How often stale offsets are looked for.",
       at_least(1)),
    _b("offsets.commit.timeout.ms", "int", 5000, "Time an offset commit waits for its write to be replicated.",
       at_least(1)),
    _b("group.initial.rebalance.delay.ms", "int", 3000,
       "Delay before the first rebalance of a new group, to let more members join.", at_least(0)),
    _b("group.min.session.timeout.ms", "int", 6000, "Smallest session timeout a classic group member may ask for."),
    _b("group.max.session.timeout.ms", "int", 1800000, "Largest session timeout a classic group member may ask for."),
    _b("group.max.size", "int", INT_MAX, "Maximum members in one classic group.", at_least(1)),
    _b("group.consumer.heartbeat.interval.ms", "int", 5000, "Heartbeat interval for consumer-protocol groups.",
       at_least(1)),
    _b("group.consumer.session.timeout.ms", "int", 45000, "Session timeout for consumer-protocol groups.",
       at_least(1)),
    _b("group.consumer.min.session.timeout.ms", "int", 45000,
       "Lower bound of group.consumer.session.timeout.ms (a smaller one is raised to it).", at_least(1)),
    _b("group.consumer.max.session.timeout.ms", "int", 60000,
       "Upper bound of group.consumer.session.timeout.ms (a larger one is lowered to it).", at_least(1)),
    _b("group.consumer.min.heartbeat.interval.ms", "int", 5000,
       "Lower bound of group.consumer.heartbeat.interval.ms (a smaller one is raised to it).", at_least(1)),
    _b("group.consumer.max.heartbeat.interval.ms", "int", 15000,
       "Upper bound of group.consumer.heartbeat.interval.ms (a larger one is lowered to it).", at_least(1)),
    # --- KIP-932 share groups (coordinator/share_*.py, broker/share/), Kafka 4.2's names and bounds
    _b("group.share.enable", "boolean", False,
       "Serve share groups even when the share.version feature is not finalized (Kafka's internal switch)."),
    _b("group.share.session.timeout.ms", "int", 45000, "Session timeout for share group members.", at_least(1)),
    _b("group.share.min.session.timeout.ms", "int", 45000,
       "Lower bound of group.share.session.timeout.ms (a smaller one is raised to it).", at_least(1)),
    _b("group.share.max.session.timeout.ms", "int", 60000,
       "Upper bound of group.share.session.timeout.ms (a larger one is lowered to it).", at_least(1)),
    _b("group.share.heartbeat.interval.ms", "int", 5000, "Heartbeat interval for share group members.", at_least(1)),
    _b("group.share.min.heartbeat.interval.ms", "int", 5000,
       "Lower bound of group.share.heartbeat.interval.ms (a smaller one is raised to it).", at_least(1)),
    _b("group.share.max.heartbeat.interval.ms", "int", 15000,
       "Upper bound of group.share.heartbeat.interval.ms (a larger one is lowered to it).", at_least(1)),
    _b("group.share.max.size", "int", 200, "Maximum members in one share group.", between(1, 1000)),
    _b("group.share.initialize.retry.interval.ms", "int", 30000,
       "After this long an unfinished initialization of a share-partition's state is retried.", at_least(1)),
    _b("group.share.record.lock.duration.ms", "int", 30000,
       "How long a share consumer holds the records it acquired (acquisition lock), unless the group sets "
       "share.record.lock.duration.ms.", between(1000, 3600000)),
    _b("group.share.min.record.lock.duration.ms", "int", 15000,
       "Lower bound of the record lock duration (broker and group level).", between(1000, 30000)),
    _b("group.share.max.record.lock.duration.ms", "int", 60000,
       "Upper bound of the record lock duration (broker and group level).", between(30000, 3600000)),
    _b("group.share.delivery.count.limit", "int", 5,
       "Deliveries after which a record that is released again (or whose lock expires) is archived.",
       between(2, 10)),
    _b("group.share.partition.max.record.locks", "int", 2000,
       "Records in flight (between the share-partition start and end offsets) per share-partition.",
       between(100, 10000)),
    _b("group.share.max.share.sessions", "int", 2000, "Share sessions (ShareFetch) this broker keeps.",
       at_least(1)),
    _b("share.coordinator.state.topic.num.partitions", "int", 50,
       "Partitions of __share_group_state (fixed once created).", at_least(1)),
    _b("share.coordinator.state.topic.replication.factor", "short", 3,
       "Replication factor of __share_group_state (capped at the live broker count by kbroker).", at_least(1)),
    _b("share.coordinator.state.topic.min.isr", "short", 2, "min.insync.replicas of __share_group_state.",
       at_least(1)),
    _b("share.coordinator.state.topic.segment.bytes", "int", 104857600, "Segment size of __share_group_state.",
       at_least(MIN_SEGMENT_BYTES)),
    _b("share.coordinator.snapshot.update.records.per.snapshot", "int", 500,
       "ShareUpdate records of one share-partition between two ShareSnapshot records.", at_least(0)),
    _b("share.coordinator.write.timeout.ms", "int", 5000,
       "How long a share-state request keeps trying to reach its share coordinator.", at_least(1)),
    _b("share.coordinator.state.topic.prune.interval.ms", "int", 300000,
       "How often records of __share_group_state no longer needed are deleted.", at_least(1)),
    # --- transaction coordinator / __transaction_state / producer state
    _b("transaction.state.log.num.partitions", "int", 50, "Partitions of __transaction_state (fixed once created).",
       at_least(1)),
    _b("transaction.state.log.replication.factor", "short", 3,
       "Replication factor of __transaction_state (capped at the live broker count by kbroker).", at_least(1)),
    _b("transaction.state.log.min.isr", "int", 2, "min.insync.replicas of __transaction_state.", at_least(1)),
    _b("transaction.state.log.segment.bytes", "int", 104857600, "Segment size of __transaction_state.",
       at_least(1)),
    _b("transaction.max.timeout.ms", "int", 900000, "Largest transaction timeout a producer may request.",
       at_least(1)),
    _b("transactional.id.expiration.ms", "int", _WEEK_MS,
       "Idle time after which a transactional id's state is expired.", at_least(1)),
    _b("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", 10000,
       "How often timed-out transactions are looked for and aborted.", at_least(1)),
    _b("transaction.remove.expired.transaction.cleanup.interval.ms", "int", 3600000,
       "How often expired transactional ids are removed.", at_least(1)),
    _b("transaction.two.phase.commit.enable", "boolean", False,
       "Allow producers to use two-phase commit (KIP-939: InitProducerId enable2Pc). When false such a "
       "request gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED."),
    _b("producer.id.expiration.ms", "int", _DAY_MS,
       "Idle time after which a partition forgets an idempotent producer's state.", at_least(1), dynamic=True),
    _b("producer.id.expiration.check.interval.ms", "int", 600000, "How often expired producer ids are removed.",
       at_least(1)),
    # --- kbroker extensions
    _b("kbroker.log.level", "string", "INFO", "kbroker extension: level of the broker's own logging.",
       ValidString(LOG_LEVELS, case_insensitive=True), dynamic=True),
    _b("kbroker.max.partitions", "int", 10000,
       "kbroker extension: most partitions this broker holds. CreateTopics, CreatePartitions and automatic topic "
       "creation that would go past it fail with POLICY_VIOLATION; internal topics are not counted against it.",
       at_least(1)),
    _b("kbroker.shutdown.timeout.ms", "int", 20000,
       "kbroker extension: how long a stop (SIGTERM/SIGINT) may take. Past it the process logs an error and "
       "exits with code 1 without a clean-shutdown marker (the next start recovers the logs).",
       at_least(1)),
    _b("kbroker.log.cache.window.bytes", "long", 256 << 20,
       "kbroker extension: how much of each segment's newest written bytes stays in the page cache. Appended "
       "bytes are handed to the kernel for writeback every 8 MiB; once written, what lies further behind the "
       "segment's end is dropped from the page cache, so the cache does not grow into never-used memory and "
       "the dirty backlog stays small (storage/write_behind.py). A consumer reading further behind reads from "
       "disk. -1 never drops written data (Kafka's behaviour); durability is the same either way.",
       at_least(-1)),
    _b("kbroker.log.preallocate.ahead", "boolean", True,
       "kbroker extension: on ext4, while a segment fills 8 MiB in under a second, reserve the blocks of the "
       "next 16 MiB past its end (fallocate, keeping the file's size), so appends skip ext4's delayed-allocation "
       "work (about 0.08 CPU-ms per MB here). The reservation is freed when the segment rolls or closes, and at "
       "the next start after a crash (storage/write_behind.py). false: appends allocate as they come. Kafka's "
       "log.preallocate is a different setting."),
    _b("kbroker.malloc.tuning", "boolean", True,
       "kbroker extension: at start, set glibc malloc's mmap and trim thresholds (32 MiB, 128 MiB) so that "
       "request and response buffers of up to 32 MiB are reused from the heap instead of being mapped and "
       "faulted in anew for each request (broker/malloc_tuning.py). Costs up to 128 MiB of freed memory kept "
       "mapped by a busy broker."),
    _b("kbroker.prometheus.listener", "string", None,
       "kbroker extension: where to serve Prometheus metrics, as http://HOST:PORT (e.g. http://127.0.0.1:9404; "
       "GET /metrics). Unset: no metrics endpoint. Names follow Strimzi's JMX-exporter rules (docs/operations.md)."),
    # --- Schema Registry (registry/, docs/schema-registry.md)
    _b("kbroker.schema.registry.listener", "string", None,
       "kbroker extension: where this broker serves Confluent Schema Registry's REST API, as http://HOST:PORT or "
       "https://HOST:PORT (TLS from the broker's ssl.* settings). Unset: no registry (and topics with "
       "confluent.*.schema.validation refuse their records)."),
    _b("kbroker.schema.registry.advertised.listener", "string", None,
       "kbroker extension: the registry URL other brokers forward writes to (unset: the listener, with the "
       "broker's advertised host when the listener binds a wildcard address)."),
    _b("kbroker.schema.registry.topic.replication.factor", "int", 3,
       "kbroker extension: replicas of the _schemas topic when the registry creates it (at most the live "
       "brokers; Confluent's kafkastore.topic.replication.factor).", at_least(1)),
    _b("kbroker.schema.registry.max.schema.bytes", "int", 524288,
       "kbroker extension: largest schema text the registry accepts (UTF-8 bytes); larger ones are refused "
       "with error 42209.", at_least(1024)),
    _b("kbroker.schema.registry.basic.auth", "boolean", False,
       "kbroker extension: require HTTP basic authentication on the registry listener, with a user name and "
       "password the brokers accept (a SCRAM credential or a PLAIN user of a SASL listener)."),
    # --- cluster mode (etcd; cluster/ and docs/cluster-design.md)
    _b("kbroker.etcd.endpoints", "string", None,
       "kbroker extension: comma-separated etcd URLs (http://host:port). When set the broker runs in cluster "
       "mode: node.id is required, membership, controller election and metadata live in etcd."),
    _b("kbroker.etcd.username", "string", None, "kbroker extension: etcd user name (etcd authentication)."),
    _b("kbroker.etcd.password", "password", None, "kbroker extension: password of kbroker.etcd.username."),
    _b("kbroker.etcd.ssl.cafile", "string", None,
       "kbroker extension: PEM file of the CA certificates that sign etcd's server certificate, for https:// "
       "endpoints (unset: the system roots)."),
    _b("kbroker.etcd.ssl.certfile", "string", None,
       "kbroker extension: PEM client certificate presented to etcd (etcd --client-cert-auth); with "
       "kbroker.etcd.ssl.keyfile."),
    _b("kbroker.etcd.ssl.keyfile", "string", None,
       "kbroker extension: PEM private key of kbroker.etcd.ssl.certfile (unencrypted)."),
    _b("broker.session.timeout.ms", "int", 9000,
       "Cluster mode: TTL of the broker's etcd lease; a broker whose lease expires loses its leaderships.",
       at_least(1)),
    _b("broker.heartbeat.interval.ms", "int", 2000,
       "Cluster mode: how often the broker refreshes its etcd lease.", at_least(1)),
    _b("initial.broker.registration.timeout.ms", "int", 60000,
       "Cluster mode: how long a starting broker keeps trying to join when etcd answers too slowly "
       "(requests past their deadline), before it exits.", at_least(1)),
    _b("controlled.shutdown.enable", "boolean", True,
       "Cluster mode: on a stop (SIGTERM) the broker first hands its leaderships to other ISR members and "
       "leaves the ISRs it follows in."),
    _b("controlled.shutdown.max.retries", "int", 3,
       "Cluster mode: rounds of controlled shutdown over the partitions whose change lost a compare-and-swap.",
       at_least(0)),
    _b("controlled.shutdown.retry.backoff.ms", "long", 5000,
       "Cluster mode: pause between controlled shutdown rounds.", at_least(0)),
    _b("broker.rack", "string", None,
       "Rack of this broker; cluster mode places a partition's replicas on different racks where it can."),
    # --- replication (cluster mode, broker/replication/)
    _b("replica.lag.time.max.ms", "long", 30000,
       "Cluster mode: a follower that has not caught up with the leader's log end for this long leaves the ISR.",
       at_least(1)),
    _b("replica.fetch.wait.max.ms", "int", 500, "Cluster mode: longest wait of a follower's fetch for new data.",
       at_least(0)),
    _b("replica.fetch.min.bytes", "int", 1, "Cluster mode: bytes a follower's fetch waits for.", at_least(1)),
    _b("replica.fetch.response.max.bytes", "int", 10485760,
       "Cluster mode: bytes a follower's fetch asks for in all partitions.", at_least(0)),
    _b("replica.fetch.backoff.ms", "int", 1000,
       "Cluster mode: pause of a follower after a fetch error before it tries that leader again (an answer "
       "that the leader does not lead the partition yet: 10 ms first, doubling up to this).", at_least(0)),
    _b("num.replica.fetchers", "int", 1,
       "Cluster mode: fetcher tasks per leader a follower fetches from (partitions move on their next change).",
       at_least(1), dynamic=True),
    _b("replica.high.watermark.checkpoint.interval.ms", "long", 5000,
       "Cluster mode: how often each log dir's replication-offset-checkpoint (high watermarks) is written.",
       at_least(1)),
    _b("auto.leader.rebalance.enable", "boolean", True,
       "Cluster mode: the controller moves leadership back to preferred replicas that are live and in the ISR."),
    _b("leader.imbalance.check.interval.seconds", "long", 300,
       "Cluster mode: how often the controller checks the leader balance.", at_least(1)),
    _b("leader.imbalance.per.broker.percentage", "int", 10,
       "Cluster mode: share of a broker's preferred partitions led elsewhere before it is rebalanced "
       "(0: rebalance every partition, as KRaft).", at_least(0)),
    # --- authorization (security/authorizer.py)
    _b("authorizer.class.name", "string", "",
       "ACLs are enforced when this names Kafka's standard authorizer "
       "(org.apache.kafka.metadata.authorizer.StandardAuthorizer, kafka.security.authorizer.AclAuthorizer or the "
       "alias 'standard'); empty (or any other value) allows every request."),
    _b("super.users", "string", "",
       "Principals (e.g. User:admin) separated by semicolons that every ACL check allows."),
    _b("allow.everyone.if.no.acl.found", "boolean", False,
       "With the authorizer on: allow an operation on a resource that has no ACL at all."),
]

BROKER_CONFIGS: dict[str, ConfigDef] = {d.name: d for d in _BROKER_DEFS}


# Every other config of Kafka 3.9's broker definition (kafka_broker_configs.py) is accepted too, in
# server.properties and through AlterConfigs where Kafka allows dynamic updates: stored, described
# with Kafka's type and default, but kbroker does not act on it. kbroker's own definitions above win.
NO_EFFECT_DOC = "Kafka broker config, accepted for compatibility; kbroker does not act on it."
NO_EFFECT_BROKER_CONFIGS: dict[str, ConfigDef] = {
    k.name: ConfigDef(k.name, k.type, k.default, NO_EFFECT_DOC, dynamic=k.dynamic)
    for k in KAFKA_BROKER_CONFIGS.values()
    if k.name not in BROKER_CONFIGS
}
BROKER_CONFIGS.update(NO_EFFECT_BROKER_CONFIGS)

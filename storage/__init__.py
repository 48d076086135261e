"""Partition logs in Kafka's on-disk format: segments, indexes, recovery, retention, compaction."""

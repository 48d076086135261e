"""Replication in cluster mode (issue 14): Kafka's follower-fetch protocol between brokers.

* ``leader`` — what a partition leader keeps about its followers (log end offsets, caught-up
  times), the high watermark as the minimum over the ISR, and the waits of acks=all produces;
* ``isr`` — ISR shrink and expand decided by the leader and written as a compare-and-swap on the
  partition epoch in etcd (Kafka's AlterPartition), plus the periodic lag check;
* ``truncation`` — where a follower whose log diverges from the leader's truncates to (Kafka's
  AbstractFetcherThread rules on the Fetch ``diverging_epoch``);
* ``fetcher`` — the follower's fetcher tasks: Fetch requests to the leaders, appends of the
  batches exactly as the leader wrote them.

Single-node mode never starts any of it: a partition's high watermark is its log end offset.
"""

"""KIP-932 share groups, partition side: the in-flight window of each share-partition (pure logic),
the manager that keeps those windows on the partition leader and persists them through the share
coordinator, the share sessions of ShareFetch / ShareAcknowledge, and the client of the share-state
RPCs (local call or inter-broker request)."""

"""JSON message definitions (Kafka's format) for APIs kafka-python ships no schema for."""

"""Kafka wire protocol: framing, request/response headers, the API table and a small async client."""

"""The Schema Registry (issue 30): Confluent Schema Registry's REST API served by each broker, with
schemas kept in the compacted ``_schemas`` topic.

``state`` replays ``_schemas`` records (``records``, Confluent's format); ``store`` keeps that replay
current and writes on the primary through the interface the broker hands over (``access``);
``service`` holds the operations, ``http_api`` the aiohttp front end, ``formats`` one module per
schema format, ``validation`` the broker-side check of produced records, ``node`` ties them together.
It never imports ``broker`` (design.md).
"""

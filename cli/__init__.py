"""The ``kbroker`` command (``cli.main``) and its client-side tools: they talk to brokers only as Kafka clients.

One module per command family (``groups``, ``transactions``, ...), each with a ``main(argv) -> int``.
``kbroker serve`` and ``kbroker dump-log`` are thin entries into ``broker/`` and ``storage/``,
imported only when called.
"""

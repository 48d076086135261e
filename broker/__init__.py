"""The broker: asyncio server, request handlers, metadata, configuration and the CLI."""

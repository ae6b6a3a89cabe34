"""The sans-IO Kafka protocol: generated message codec, framing, record batches.

Nothing in this package does I/O or imports trio.
"""

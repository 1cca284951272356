"""Benchmarks of case-ledger against the disk's limit and against peers (``python -m benchmarks``)."""

"""``ledger.sqlite``: the connection and its transactions, the ``sql/`` files, the fair writer
lock and read-only access. Stores opaque canonical bytes; knows no event type, rule or config."""

"""The services a user calls: one operation = one transaction (``session``), the budget, scope
and evidence managers, the lifecycle facade, the ``Case`` on SQLite and ``MemoryCase`` in memory."""

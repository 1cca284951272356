"""Browsing a case in Datasette: the metadata, canned questions and picture (``metadata``, no
Datasette needed) and ``ledger serve``'s read-only server (``server``, the optional extra ``web``)."""

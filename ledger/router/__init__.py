"""The reference router: read-only tools over a package's own inputs (``reference``) and the
re-check of stored tool results against the package (``check``)."""

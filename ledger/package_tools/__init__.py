"""Whole-package work: replay, export, verify, import, JSON-Lines journals, the demo, with the
manifest and atomic file writes they share."""

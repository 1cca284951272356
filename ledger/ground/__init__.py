"""The ground floor: error codes, canonical JSON, times, path checks, JSON Schemas, TOML
configuration and where the package's data lives. Imports nothing else of the library."""

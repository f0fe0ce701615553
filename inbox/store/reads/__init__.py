"""The read model: queries that only read, for the API, the console, the CLI and metrics."""

"""The schema: tables, the ledger's day partitions, and the migrations (package data)."""

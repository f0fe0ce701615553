"""The peers of ``bench.drain_peers``: one small module per PostgreSQL queue, each run by
``.venv-peers/bin/python -m bench.peers.<module>`` (that venv holds the peers; the
project's does not). Each module answers ``prepare`` (its schema, then the jobs of a
workload) and ``work`` (one worker process: set up, say ready, start on the go file)."""

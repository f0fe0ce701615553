"""What the benchmarks share (for now all in ``procs``; split by topic next)."""

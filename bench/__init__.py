"""The benchmarks, run from the checkout's root: ``python -m bench.ingest``, ``bench.drain``,
``bench.deliver``, ``bench.scale``. What they share is ``bench.common``; the figures are in
bench/README.md."""

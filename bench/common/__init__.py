"""What the benchmarks share, by topic:

- ``procs``: paths, a fresh migrated database, the processes a benchmark starts (the web
  server, celery workers and beat: ``Proc``) and the waits until they answer or progress;
- ``load``: signed requests and their bodies, wrk and its Lua script, an open-loop sender;
- ``cpu``: CPU accounting from /proc (``Sampler``, ``window``), waiting for a quiet
  machine, the speed probe;
- ``ceiling``: ``bench.limits``' arithmetic (counts per event, the events/s a commit
  ceiling allows, pgbench's output, the Limits table);
- ``baselines``: what the benchmarks compare against, served by processes of their own:
  the hand-written ingest receivers (``python -m web --app
  bench.common.baselines:handwritten``) and raw Celery's no-op task (``celery -A
  bench.common.baselines:raw_app``). Nothing in it connects on import.
"""

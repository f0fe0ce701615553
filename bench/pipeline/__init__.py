"""The whole pipeline on one machine (``python -m bench.pipeline``; see ``__main__``)."""

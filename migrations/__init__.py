"""The Alembic migrations of the inbox's schema, one revision per file in ``versions/``.

A package of its own so that an installed wheel carries them: ``inbox migrate`` finds
this folder with ``importlib.resources`` and needs no ``alembic.ini``. Write a revision
by hand, named ``NNNN_what_it_does.py``, chained on the newest one.
"""

"""Celery workers: thin tasks over the plain functions in ``inbox``."""

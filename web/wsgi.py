"""The WSGI entry point for gunicorn: ``gunicorn web.wsgi:app``."""

from web import create_app

app = create_app()

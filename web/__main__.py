"""``python -m web``: the web process (see web/serve.py)."""

from web.serve import main

main()

"""What the edges catch from the store, as the store wraps it.

The web's error handlers register these (a driver error that reaches a view becomes the
inbox's own: a refused value is a 400, anything else a 503); nothing above the services
names the store's connection machinery or its driver.
"""

from __future__ import annotations

from inbox.store.db.errors import DRIVER_ERRORS, STORE_ERRORS, wrap

__all__ = ["DRIVER_ERRORS", "STORE_ERRORS", "wrap"]

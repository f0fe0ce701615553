"""The console's blueprint, on which its view modules register (``web.ui``)."""

from __future__ import annotations

from flask import Blueprint
from flask.sansio.blueprints import BlueprintSetupState

from web.ui import security

ui = Blueprint("ui", __name__, url_prefix="/ui")


@ui.record_once
def _configure(state: BlueprintSetupState) -> None:
    security.configure(state.app, state.url_prefix or "/ui")

"""Webhook Inbox: at-least-once webhook deliveries in, exactly-once decisions out.

The names below are the public API for playbook authors (docs/playbooks.md): import
them from ``inbox``, never from the modules they live in, which may move::

    from inbox import Playbook, PermanentError, StepContext, register

Importing this package stays cheap: it loads the pure domain only (no web framework,
broker or database driver), because the CLI and the receiver import it too.
"""

from inbox.domain.errors import InboxError, PermanentError, PlaybookError, RetryableError
from inbox.domain.ordering import Newer
from inbox.domain.playbooks import EVENT_TYPE, EventView, Playbook, StepContext, register

__version__ = "0.1.0"

__all__ = [
    "EVENT_TYPE",
    "EventView",
    "InboxError",
    "Newer",
    "PermanentError",
    "Playbook",
    "PlaybookError",
    "RetryableError",
    "StepContext",
    "__version__",
    "register",
]

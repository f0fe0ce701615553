"""Webhook Inbox: at-least-once webhook deliveries in, exactly-once decisions out."""

__version__ = "0.1.0"

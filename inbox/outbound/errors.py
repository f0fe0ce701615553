"""Why a delivery attempt got no response: one class per ``kind`` the courier records."""

from __future__ import annotations

from inbox.domain.errors import InboxError


class DeliveryError(InboxError):
    """A delivery attempt failed before a response was received. ``kind`` classifies it."""

    kind: str = "error"


class Blocked(DeliveryError):
    """The destination resolves to an address the SSRF guard refuses."""

    kind = "blocked"


class ConnectError(DeliveryError):
    """The connection was refused, reset or unreachable, or TLS failed."""

    kind = "connect"


class ProtocolError(ConnectError):
    """The endpoint's reply was not a valid HTTP/1.x response (kind stays "connect")."""


class DNSError(DeliveryError):
    """The host name did not resolve."""

    kind = "dns"


class Timeout(DeliveryError):
    """No complete response header within the timeout."""

    kind = "timeout"


class InvalidURL(DeliveryError):
    """The URL cannot be delivered to: not http/https, no host, user information, bad port."""

    kind = "invalid_url"

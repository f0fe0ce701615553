"""A sender for every scheme, written from each provider's documentation, independently of
``inbox.domain.signatures`` (no import from it): what the provider would send.

``SIGNERS[name].request(event_id, ts, url)`` returns (headers, body) of a valid delivery
carrying the provider's own event id ``event_id`` where the provider has one. Where it has
none, ``event_id`` still tells events apart inside the body, and a retry (same event id,
later ``ts``) sends the same body again, as those providers do.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from urllib.parse import quote_plus

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

Headers = dict[str, str]
JSON = "application/json"
FORM = "application/x-www-form-urlencoded"


def mac(secret: bytes | str, message: bytes, algo: str = "sha256") -> bytes:
    key = secret.encode() if isinstance(secret, str) else secret
    return hmac.new(key, message, getattr(hashlib, algo)).digest()


def hx(secret: bytes | str, message: bytes, algo: str = "sha256") -> str:
    return mac(secret, message, algo).hex()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def dumps(doc: object) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


@dataclass
class Signer:
    name: str
    secret: str  # what the source is configured with
    build: Callable[[str, int, str], tuple[Headers, bytes]]  # (event id, ts, url)
    dedup: bool = True  # the provider sends an id of its own that redeliveries repeat
    timestamped: bool = False
    content_type: str = JSON
    # How to change one signed byte when the body is not (all) signed: Mailgun.
    tamper: Callable[[Headers, bytes], tuple[Headers, bytes]] | None = None
    options: dict[str, object] = field(default_factory=dict)

    def request(self, event_id: str, ts: int, url: str) -> tuple[Headers, bytes]:
        headers, body = self.build(event_id, ts, url)
        return {"content-type": self.content_type, **headers}, body

    def tampered(self, event_id: str, ts: int, url: str) -> tuple[Headers, bytes]:
        headers, body = self.request(event_id, ts, url)
        if self.tamper is not None:
            return self.tamper(headers, body)
        i = len(body) // 2
        return headers, body[:i] + bytes([body[i] ^ 0x01]) + body[i + 1 :]


SIGNERS: dict[str, Signer] = {}


def signer(name: str, secret: str, **kw: object) -> Callable[..., object]:
    def register(build: Callable[[str, int, str], tuple[Headers, bytes]]) -> object:
        SIGNERS[name] = Signer(name, secret, build, **kw)  # type: ignore[arg-type]
        return build

    return register


# ----------------------------------------------------------------- header over the body


def _body_mac(name, secret, header, prefix="", algo="sha256", enc="hex", ids=None, **kw):
    """Providers that MAC the raw body; ``ids(event_id)`` gives (headers, json doc)."""

    def build(event_id: str, ts: int, url: str) -> tuple[Headers, bytes]:
        extra, doc = ids(event_id) if ids else ({}, {"id": event_id})
        body = dumps(doc)
        digest = mac(secret, body, algo)
        value = digest.hex() if enc == "hex" else b64(digest)
        return {header: prefix + value, **extra}, body

    SIGNERS[name] = Signer(name, secret, build, **kw)


_body_mac(
    "github",
    "gh-secret",
    "x-hub-signature-256",
    "sha256=",
    ids=lambda i: ({"x-github-delivery": i, "x-github-event": "push"}, {"zen": "z"}),
)
_body_mac(
    "shopify",
    "shop-secret",
    "x-shopify-hmac-sha256",
    enc="base64",
    ids=lambda i: ({"x-shopify-webhook-id": i, "x-shopify-topic": "orders/create"}, {"a": 1}),
)
_body_mac(
    "intercom",
    "ic-secret",
    "x-hub-signature",
    "sha1=",
    "sha1",
    ids=lambda i: ({}, {"type": "notification_event", "id": i, "topic": "ping"}),
)
_body_mac(
    "pagerduty",
    "pd-secret",
    "x-pagerduty-signature",
    "v1=",
    ids=lambda i: ({}, {"event": {"id": i, "event_type": "incident.triggered"}}),
)
_body_mac(
    "typeform",
    "tf-secret",
    "typeform-signature",
    "sha256=",
    enc="base64",
    ids=lambda i: ({}, {"event_id": i, "event_type": "form_response"}),
)
_body_mac(
    "bitbucket",
    "bb-secret",
    "x-hub-signature",
    "sha256=",
    ids=lambda i: ({"x-request-uuid": i, "x-event-key": "repo:push"}, {"push": {}}),
)
_body_mac(
    "sentry",
    "se-secret",
    "sentry-hook-signature",
    ids=lambda i: ({"request-id": i, "sentry-hook-resource": "issue"}, {"action": "created"}),
)
_body_mac(
    "vercel",
    "ve-secret",
    "x-vercel-signature",
    algo="sha1",
    ids=lambda i: ({}, {"id": i, "type": "deployment.succeeded"}),
)
_body_mac(
    "lemonsqueezy",
    "ls-secret",
    "x-signature",
    dedup=False,
    ids=lambda i: (
        {"x-event-name": "order_created"},
        {"meta": {"event_name": "order_created"}, "data": {"type": "orders", "id": i}},
    ),
)
_body_mac(
    "jira",
    "ji-secret",
    "x-hub-signature",
    "sha256=",
    ids=lambda i: ({"x-atlassian-webhook-identifier": i}, {"webhookEvent": "jira:issue_created"}),
)
_body_mac(
    "dropbox",
    "db-secret",
    "x-dropbox-signature",
    dedup=False,
    ids=lambda i: ({}, {"list_folder": {"accounts": ["dbid:" + i]}}),
)
_body_mac(
    "meta",
    "meta-app-secret",
    "x-hub-signature-256",
    "sha256=",
    dedup=False,
    ids=lambda i: ({}, {"object": "whatsapp_business_account", "entry": [{"id": i}]}),
)
_body_mac(
    "coinbase-commerce",
    "cc-secret",
    "x-cc-webhook-signature",
    ids=lambda i: ({}, {"id": 1, "event": {"id": i, "type": "charge:confirmed"}}),
)


@signer("linear", "li-secret", timestamped=True)
def _linear(event_id: str, ts: int, url: str) -> tuple[Headers, bytes]:
    body = dumps({"type": "Issue", "action": "create", "webhookTimestamp": ts * 1000})
    return {"linear-signature": hx("li-secret", body), "linear-delivery": event_id}, body


# ----------------------------------------------------------------- timestamped templates


@signer("stripe", "whsec_stripe", timestamped=True)
def _stripe(event_id: str, ts: int, url: str) -> tuple[Headers, bytes]:
    body = dumps({"id": event_id, "type": "charge.succeeded"})
    sig = hx("whsec_stripe", f"{ts}.".encode() + body)
    return {"stripe-signature": f"t={ts},v1={sig}"}, body


@signer("slack", "sl-secret", timestamped=True)
def _slack(event_id: str, ts: int, url: str) -> tuple[Headers, bytes]:
    body = dumps({"type": "event_callback", "event_id": event_id, "event": {"type": "message"}})
    sig = "v0=" + hx("sl-secret", f"v0:{ts}:".encode() + body)
    return {"x-slack-request-timestamp": str(ts), "x-slack-signature": sig}, body


@signer("hmac", "tenant-secret", timestamped=True)
def _hmac(event_id: str, ts: int, url: str) -> tuple[Headers, bytes]:
    body = dumps({"n": 1})
    sig = hx("tenant-secret", f"{ts}.".encode() + body)
    return {"x-timestamp": str(ts), "x-signature": sig, "idempotency-key": event_id}, body


SVIX_KEY = b"svix-test-key-32-bytes-long!!!!!"
SVIX_SECRET = "whsec_" + b64(SVIX_KEY)


def _svix(prefix: str) -> Callable[[str, int, str], tuple[Headers, bytes]]:
    def build(event_id: str, ts: int, url: str) -> tuple[Headers, bytes]:
        body = dumps({"type": "user.created", "data": {}})
        sig = b64(mac(SVIX_KEY, f"{event_id}.{ts}.".encode() + body))
        return {f"{prefix}-id": event_id, f"{prefix}-timestamp": str(ts),
                f"{prefix}-signature": f"v1,{sig}"}, body  # fmt: skip

    return build


for _name, _prefix in (("standard", "webhook"), ("clerk", "svix"), ("resend", "svix")):
    SIGNERS[_name] = Signer(_name, SVIX_SECRET, _svix(_prefix), timestamped=True)


@signer("paddle", "pdl_ntfset_01abc_secret", timestamped=True)
def _paddle(event_id: str, ts: int, url: str) -> tuple[Headers, bytes]:
    body = dumps({"event_id": event_id, "event_type": "transaction.completed"})
    sig = hx("pdl_ntfset_01abc_secret", f"{ts}:".encode() + body)
    return {"paddle-signature": f"ts={ts};h1={sig}"}, body


@signer("zoom", "zoom-secret-token", timestamped=True, dedup=False)
def _zoom(event_id: str, ts: int, url: str) -> tuple[Headers, bytes]:
    # event_ts is when the event happened: a retry sends it unchanged.
    doc = {"event": "meeting.started", "event_ts": 1_700_000_000_000, "payload": {"id": event_id}}
    body = dumps(doc)
    sig = "v0=" + hx("zoom-secret-token", f"v0:{ts}:".encode() + body)
    return {"x-zm-request-timestamp": str(ts), "x-zm-signature": sig}, body


@signer("calendly", "cal-key", timestamped=True, dedup=False)
def _calendly(event_id: str, ts: int, url: str) -> tuple[Headers, bytes]:
    body = dumps({"event": "invitee.created", "payload": {"uri": event_id}})
    return {
        "calendly-webhook-signature": f"t={ts},v1={hx('cal-key', f'{ts}.'.encode() + body)}"
    }, body


@signer("mux", "mux-secret", timestamped=True)
def _mux(event_id: str, ts: int, url: str) -> tuple[Headers, bytes]:
    body = dumps({"id": event_id, "type": "video.asset.ready"})
    return {"mux-signature": f"t={ts},v1={hx('mux-secret', f'{ts}.'.encode() + body)}"}, body


@signer("twitch", "twitch-secret-123", timestamped=True)
def _twitch(event_id: str, ts: int, url: str) -> tuple[Headers, bytes]:
    body = dumps({"subscription": {"type": "channel.follow"}, "event": {}})
    stamp = datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.123456789Z")
    sig = "sha256=" + hx("twitch-secret-123", event_id.encode() + stamp.encode() + body)
    return {
        "twitch-eventsub-message-id": event_id,
        "twitch-eventsub-message-timestamp": stamp,
        "twitch-eventsub-message-signature": sig,
        "twitch-eventsub-message-type": "notification",
        "twitch-eventsub-subscription-type": "channel.follow",
    }, body


@signer("hubspot", "hs-client-secret", timestamped=True)
def _hubspot(event_id: str, ts: int, url: str) -> tuple[Headers, bytes]:
    body = dumps([{"eventId": event_id, "subscriptionType": "contact.creation"}])
    ms = str(ts * 1000)
    sig = b64(mac("hs-client-secret", b"POST" + url.encode() + body + ms.encode()))
    return {"x-hubspot-signature-v3": sig, "x-hubspot-request-timestamp": ms}, body


@signer("square", "sq-signature-key")
def _square(event_id: str, ts: int, url: str) -> tuple[Headers, bytes]:
    body = dumps({"event_id": event_id, "type": "payment.updated"})
    return {
        "x-square-hmacsha256-signature": b64(mac("sq-signature-key", url.encode() + body))
    }, body


def _mailgun_tamper(headers: Headers, body: bytes) -> tuple[Headers, bytes]:
    doc = json.loads(body)
    doc["signature"]["token"] = doc["signature"]["token"][:-1] + "X"
    return headers, dumps(doc)


@signer("mailgun", "mg-signing-key", timestamped=True, tamper=_mailgun_tamper)
def _mailgun(event_id: str, ts: int, url: str) -> tuple[Headers, bytes]:
    token = hashlib.sha256(event_id.encode()).hexdigest()[:50]
    sig = hx("mg-signing-key", f"{ts}{token}".encode())
    doc = {"signature": {"timestamp": str(ts), "token": token, "signature": sig},
           "event-data": {"id": event_id, "event": "delivered"}}  # fmt: skip
    return {}, dumps(doc)


# ----------------------------------------------------------------- tokens and asymmetric


def _credential_tamper(name: str) -> Callable[[Headers, bytes], tuple[Headers, bytes]]:
    """Token schemes sign nothing: the byte to change is in the credential itself."""

    def tamper(headers: Headers, body: bytes) -> tuple[Headers, bytes]:
        value = headers[name]
        return headers | {name: value[:-2] + chr(ord(value[-2]) ^ 1) + value[-1]}, body

    return tamper


@signer("gitlab", "gl-token", tamper=_credential_tamper("x-gitlab-token"))
def _gitlab(event_id: str, ts: int, url: str) -> tuple[Headers, bytes]:
    headers = {"x-gitlab-token": "gl-token", "x-gitlab-event-uuid": event_id}
    return headers | {"x-gitlab-event": "Push Hook"}, dumps({"object_kind": "push"})


@signer("postmark", "pm-user:pm-pass", dedup=False, tamper=_credential_tamper("authorization"))
def _postmark(event_id: str, ts: int, url: str) -> tuple[Headers, bytes]:
    auth = "Basic " + b64(b"pm-user:pm-pass")
    return {"authorization": auth}, dumps({"RecordType": "Delivery", "MessageID": event_id})


@signer("token", "static-token", tamper=_credential_tamper("authorization"))
def _token(event_id: str, ts: int, url: str) -> tuple[Headers, bytes]:
    return {"authorization": "Bearer static-token", "idempotency-key": event_id}, dumps({})


@signer("twilio", "tw-auth-token", content_type=FORM)
def _twilio(event_id: str, ts: int, url: str) -> tuple[Headers, bytes]:
    params = {"MessageSid": "SM" + event_id, "Body": "hi there"}
    data = url + "".join(k + params[k] for k in sorted(params))
    body = "&".join(f"{k}={quote_plus(v)}" for k, v in params.items()).encode()
    sig = b64(mac("tw-auth-token", data.encode(), "sha1"))
    return {"x-twilio-signature": sig, "i-twilio-idempotency-token": event_id}, body


ED_KEY = ed25519.Ed25519PrivateKey.from_private_bytes(b"discord-test-key-32-bytes-long!!")
ED_PUBLIC = ED_KEY.public_key().public_bytes(
    serialization.Encoding.Raw, serialization.PublicFormat.Raw
)


def _discord(doc: Callable[[str], object]) -> Callable[[str, int, str], tuple[Headers, bytes]]:
    def build(event_id: str, ts: int, url: str) -> tuple[Headers, bytes]:
        body = dumps(doc(event_id))
        sig = ED_KEY.sign(str(ts).encode() + body).hex()
        return {"x-signature-ed25519": sig, "x-signature-timestamp": str(ts)}, body

    return build


SIGNERS["discord"] = Signer(
    "discord",
    ED_PUBLIC.hex(),
    _discord(
        lambda i: {
            "version": 1,
            "type": 1,
            "event": {"type": "ENTITLEMENT_CREATE", "data": {"id": i}},
        }
    ),
    timestamped=True,
    dedup=False,
)
SIGNERS["discord-interactions"] = Signer(
    "discord-interactions",
    ED_PUBLIC.hex(),
    _discord(lambda i: {"id": i, "type": 2, "data": {"name": "hello"}}),
    timestamped=True,
)

EC_KEY = ec.derive_private_key(424242, ec.SECP256R1())
EC_PUBLIC = b64(
    EC_KEY.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
)


@signer("sendgrid", EC_PUBLIC, timestamped=True)
def _sendgrid(event_id: str, ts: int, url: str) -> tuple[Headers, bytes]:
    body = dumps([{"sg_event_id": event_id, "event": "delivered"}]) + b"\r\n"
    sig = b64(EC_KEY.sign(str(ts).encode() + body, ec.ECDSA(hashes.SHA256())))
    return {
        "x-twilio-email-event-webhook-signature": sig,
        "x-twilio-email-event-webhook-timestamp": str(ts),
    }, body

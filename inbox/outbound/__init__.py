"""Outbound webhook delivery: an HTTP client for tenants' endpoints, guarded against SSRF."""

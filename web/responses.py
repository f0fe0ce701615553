"""The name ``BufferedResponse``, which is Flask's ``Response`` now.

It stays only while ``web/ingest.py`` imports it (that module is being rewritten
elsewhere); delete this module once nothing does.
"""

from flask import Response as BufferedResponse

__all__ = ["BufferedResponse"]

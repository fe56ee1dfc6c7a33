# Run: python3 -m pytest Tests/hostile -q   (loaded by test_schemathesis.py through SCHEMATHESIS_HOOKS; not a test)
"""Schemathesis hooks for stowd's openapi.yaml.

The tus PATCH of a storage link takes `application/offset+octet-stream`, a media type schemathesis
has no serializer for ("Serialization not possible"); its bytes are sent as for octet-stream.
"""
import schemathesis

schemathesis.serializer.alias("application/offset+octet-stream", "application/octet-stream")

# Run: python3 -m pytest Tests/hostile -q   (loaded by test_schemathesis.py through SCHEMATHESIS_HOOKS; not a test)
"""Schemathesis hooks for stowd's openapi.yaml.

The tus PATCH of a storage link takes `application/offset+octet-stream`, a media type schemathesis
has no serializer for ("Serialization not possible"); its bytes are sent as for octet-stream.
"""
import schemathesis

schemathesis.serializer.alias("application/offset+octet-stream", "application/octet-stream")


@schemathesis.hook
def before_call(context, case, kwargs):
    _cap_feed_wait(case)
    _cap_lock_wait(case)


def _cap_lock_wait(case):
    """A lock request waits up to `wait_ms` for a lock another owner holds (two generated requests
    can meet on one inode): at most 1000 within the 30 s timeout (waits are tested in LockTests)."""
    if not case.path.endswith("/locks") or not isinstance(case.body, dict):
        return
    wait = case.body.get("wait_ms")
    if isinstance(wait, int) and not isinstance(wait, bool) and wait > 1000:
        case.body["wait_ms"] = 1000


def _cap_feed_wait(case):
    """The change feed's long poll waits up to `wait` seconds and its stream never ends on its own:
    within schemathesis's 30 s request timeout, `wait` is at most 1 and `stream` off (both are
    tested in ChangeFeedTests). Values that are not numbers stay, to reach the 400s."""
    if not case.path.endswith("/changes") or not isinstance(case.query, dict):
        return
    wait = case.query.get("wait")
    try:
        if wait is not None and int(str(wait)) > 1:
            case.query["wait"] = 1
    except ValueError:
        pass
    if "stream" in case.query:
        case.query["stream"] = "false"

"""failure_kind: what kind of failure a failed search was."""

from __future__ import annotations

import pytest

from hopgym.errors import HTTPError, RetrievalError
from hopgym.retrieval.failures import FAILURE_KINDS, failure_kind


def _chained(outer: Exception, inner: Exception) -> Exception:
    try:
        try:
            raise inner
        except Exception as exc:
            raise outer from exc
    except Exception as exc:  # noqa: BLE001
        return exc


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (
            RetrievalError(
                "failed after 3 attempt(s) (http://h:9/retrieve: cannot connect: [Errno 111] "
                "Connection refused)"
            ),
            "connection",
        ),
        (RetrievalError("(http://h:1: connection lost: RemoteDisconnected: closed)"), "connection"),
        (ConnectionRefusedError(111, "Connection refused"), "connection"),
        (
            RetrievalError("failed after 2 attempt(s) (http://h:1: no reply within 5 s (timeout=5))"),
            "timeout",
        ),
        (TimeoutError("timed out"), "timeout"),
        (
            _chained(RetrievalError("refused the request"), HTTPError("x", status=404, cause="HTTP 404: no")),
            "http_status",
        ),
        (RetrievalError("failed after 3 attempt(s) (http://h:1: HTTP 503: busy)"), "http_status"),
        (RetrievalError("the server returned a document without 'contents'"), "other"),
        (KeyError("x"), "other"),
    ],
)
def test_failure_kind(exc, kind):
    assert kind in FAILURE_KINDS
    assert failure_kind(exc) == kind

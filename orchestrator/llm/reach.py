"""Whether a server answers at a URL at all, before a run does any work (free: one GET, no model call)."""

from __future__ import annotations

import urllib.error
import urllib.request

from orchestrator.llm.base import one_line

REACH_TIMEOUT_S = 10.0


def unreachable(url: str, timeout_s: float = REACH_TIMEOUT_S) -> str | None:
    """None when an HTTP server answers a GET of `url` with any status (the proxy settings of the environment
    apply); else why not, in one line (refused, no such host, timed out)."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="GET"), timeout=timeout_s):
            return None
    except urllib.error.HTTPError:
        return None  # a status is an answer: 401, 403 and 404 all mean a server is there
    except (urllib.error.URLError, OSError, ValueError) as err:
        reason = getattr(err, "reason", err)
        return one_line(f"{type(reason).__name__}: {reason}")

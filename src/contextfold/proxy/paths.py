"""Where a proxied request goes: the upstream's base URL plus the request's path, never
outside the base's path (SPEC Y8).

`--upstream http://host/tenant-a/v1` and `GET /v1/../../../admin` must not reach `/admin`:
the HTTP client normalises dot segments when it parses the joined URL, and an upstream may
decode `%2e%2e` or `%2f` and normalise again. So a path with a segment that is, or decodes
to, `.` or `..`, or that hides a slash or backslash, is refused (`unsafe_segment`; the
proxy's guard answers 400), and the joined URL is checked to stay under the base anyway.
"""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

_DECODE_ROUNDS = 3  # `%252e` is `%2e` after one round, `.` after two


def unsafe_segment(path: str) -> str | None:
    """The first segment of a (once-decoded) request path that could climb out of a
    prefix: `.`, `..`, or one that decodes to those or to something with a slash or
    backslash in it; None when every segment is plain."""
    for segment in path.split("/"):
        decoded = segment
        for _ in range(_DECODE_ROUNDS):
            if decoded in (".", "..") or "\\" in decoded or "/" in decoded:
                return segment
            again = unquote(decoded)
            if again == decoded:
                break
            decoded = again
        if decoded in (".", "..") or "\\" in decoded or "/" in decoded:
            return segment
    return None


def upstream_url(base: str, path: str, query: str) -> str:
    """`base` + `path` (+ `?query`); a leading `/v1` is not doubled when `base` ends with it.
    ValueError when the path is unsafe or the result would not be under `base`'s path."""
    if unsafe_segment(path) is not None:
        raise ValueError(f"the path {path[:200]!r} could leave the upstream's path")
    base = base.rstrip("/")
    if base.endswith("/v1") and (path == "/v1" or path.startswith("/v1/")):
        path = path[3:]
    url = base + path + (f"?{query}" if query else "")
    prefix = urlsplit(base).path.rstrip("/")
    if not (urlsplit(url).path + "/").startswith(prefix + "/"):
        raise ValueError(f"the path {path[:200]!r} leaves the upstream's path {prefix!r}")
    return url

# Run: python3 -m pytest Tests/hostile -q   (from the repository root; needs a built .build/debug/stowd or STOW_BIN_DIR)
"""What an attacker sends to `stowd`, route by route.

Every case sends one hostile request (or a few) and asserts:
  * the answer is a refusal — a 4xx with the usual JSON error payload `{"message", "code"}` —
    never a 5xx, and never a dropped connection where an answer is due (reads that may succeed,
    such as odd `Range` headers, must give a consistent 200/206/304/412/416 instead);
  * the process is still alive and `GET /healthz` answers 200 afterwards;
  * nothing already stored changed: the bytes of `keep.txt` (public) and `keepdir/private.bin`,
    their records, and the namespace listing;
  * for the cases marked `memory`, the server's resident memory (VmRSS, and VmHWM reset before
    the case where the kernel allows it) stays under MEMORY_BOUND_MIB.

One server serves a whole module; a case that kills it, or changes what it stores, gets a fresh
one for the next case (see conftest.py). The failing cases are the bugs: none is marked xfail.
"""
from __future__ import annotations

import base64
import json
import os
import struct
import threading
import time
from dataclasses import dataclass
from typing import Callable
from urllib.parse import quote

import pytest

from stowlib import (
    EMPTY_PATH, INT64_MAX, INT64_MIN, KEEP_BYTES, KEEP_PATH, NS, PREFIX, PRIVATE_BYTES, PRIVATE_PATH, RawConnection, Resp, Stowd,
    error_payload_problems, refusal_problems,
)

MEMORY_BOUND_MIB = 300
MiB = 1 << 20


def v1(p: str) -> str:
    return f"{PREFIX}/v1.0/namespaces/{NS}/{p}"


def v2(p: str) -> str:
    return f"{PREFIX}/v2.0/namespaces/{NS}/{p}"


SIGN_URLS = f"{PREFIX}/v1.0/sign-urls"
COPY = f"{PREFIX}/v1.0/uploads/copy"
NAMESPACES = f"{PREFIX}/v1.0/namespaces"
TUS = "/tus/files"

# ---------------------------------------------------------------------------------------------
# The case registry


@dataclass
class Case:
    name: str
    run: Callable[[Stowd], "Resp | list[str]"]
    judge: Callable[[Resp], list[str]]
    memory: bool = False


CASES: list[Case] = []
_NAMES: set[str] = set()


def add(name: str, run: Callable, judge: Callable | None = None, memory: bool = False) -> None:
    assert name not in _NAMES, f"duplicate case name {name}"
    _NAMES.add(name)
    CASES.append(Case(name, run, judge or REFUSE, memory))


def REFUSE(r: Resp) -> list[str]:
    return refusal_problems(r)


def REFUSE_OR_CLOSE(r: Resp) -> list[str]:
    """Cut-off requests: the server may answer 4xx or close; never 5xx."""
    return refusal_problems(r, no_answer_ok=True)


def NOTHING_DUE(r: Resp) -> list[str]:
    """The client closed: only survival and the stored state are judged (after the case)."""
    if r.status is not None and r.status >= 500:
        return [f"server error {r.short()}"]
    return []


def refuse(*statuses: int, codes: tuple[str, ...] | None = None) -> Callable[[Resp], list[str]]:
    return lambda r: refusal_problems(r, statuses=statuses or None, codes=codes)


def answer_in(*allowed: int) -> Callable[[Resp], list[str]]:
    """A request that may succeed (a read, a listing) or be refused; never 5xx; 4xx in JSON."""

    def judge(r: Resp) -> list[str]:
        if r.status is None:
            return [f"no answer where one was due: {r.error}"]
        if r.status not in allowed:
            return [f"expected one of {list(allowed)}, got {r.short()}"]
        if r.status >= 400:
            return error_payload_problems(r)
        return []

    return judge


def range_judge(data: bytes, allowed=(200, 206, 416)) -> Callable[[Resp], list[str]]:
    """A ranged read: a status in `allowed`, and headers and bytes consistent with it."""

    def judge(r: Resp) -> list[str]:
        if r.status is None:
            return [f"no answer where one was due: {r.error}"]
        if r.status not in allowed:
            return [f"expected one of {list(allowed)}, got {r.short()} (Content-Range {r.headers.get('content-range')!r})"]
        head = r.method == "HEAD"
        p: list[str] = []
        if r.status == 200:
            if head:
                if r.headers.get("content-length") != str(len(data)):
                    p.append(f"200 with Content-Length {r.headers.get('content-length')!r}, the file has {len(data)}")
            elif r.body != data:
                p.append(f"200 but the body is not the file ({len(r.body)} bytes)")
        elif r.status == 206:
            cr = r.headers.get("content-range", "")
            try:
                unit, rest = cr.split(" ", 1)
                span, total = rest.split("/")
                a, b = (int(x) for x in span.split("-"))
                assert unit == "bytes" and int(total) == len(data) and 0 <= a <= b < len(data)
            except Exception:
                return [f"206 with a bad Content-Range {cr!r}"]
            if r.headers.get("content-length") != str(b - a + 1):
                p.append(f"206 {cr} with Content-Length {r.headers.get('content-length')!r}")
            if not head and r.body != data[a:b + 1]:
                p.append(f"206 {cr} but the body is not those bytes")
        elif r.status == 416:
            if r.headers.get("content-range") != f"bytes */{len(data)}":
                p.append(f"416 with Content-Range {r.headers.get('content-range')!r}")
            p += error_payload_problems(r)
        elif r.status >= 400:
            p += error_payload_problems(r)
        return p

    return judge


# ---------------------------------------------------------------------------------------------
# Building blocks


def jbytes(doc) -> bytes:
    return json.dumps(doc).encode()


def post_raw_json(s: Stowd, method: str, path: str, body: bytes, content_type: str = "application/json",
                  auth: bool = True, extra: list | None = None) -> Resp:
    head = s.head_bytes(method, path, [("Content-Type", content_type), ("Content-Length", str(len(body)))] + (extra or []), auth=auth)
    r = s.raw(head + body)
    r.method = method
    return r


def chunked(pieces) -> "iter[bytes]":
    for p in pieces:
        if p:
            yield b"%x\r\n" % len(p) + p + b"\r\n"
    yield b"0\r\n\r\n"


def repeat_bytes(unit: bytes, total: int, chunk: int = MiB):
    block = (unit * (chunk // len(unit) + 1))[:chunk]
    sent = 0
    while sent < total:
        n = min(chunk, total - sent)
        yield block[:n]
        sent += n


def fresh_upload(s: Stowd, size: int = 2, defer: bool = False, name: str | None = None) -> dict:
    name = name or f"hostile/upload-{time.monotonic_ns()}.bin"
    return s.start_upload(name, size, defer=defer)


def tus_create(s: Stowd, length: int = 2, name: str | None = None) -> str:
    """A tus upload made at /tus/files; answers its path."""
    name = name or f"hostile/tus-{time.monotonic_ns()}.bin"
    meta = f"namespace {base64.b64encode(NS.encode()).decode()},path {base64.b64encode(name.encode()).decode()}"
    r = s.request("POST", TUS, headers={"Tus-Resumable": "1.0.0", "Upload-Length": str(length), "Upload-Metadata": meta})
    assert r.status == 201, f"setup: tus creation answered {r.short()}"
    loc = r.headers["location"]
    return loc[loc.index("/tus/"):]


def tus_meta(**kv: bytes | str) -> str:
    return ",".join(f"{k} {base64.b64encode(v if isinstance(v, bytes) else v.encode()).decode()}" for k, v in kv.items())


# =============================================================================================
# 1. Ranges on a public /cdn file (and on a private one, with a token)

RANGES = {
    "0-int64max": ("bytes=0-9223372036854775807", (200, 206)),
    "int64max-open": ("bytes=9223372036854775807-", (416,)),
    "int64max-int64max": ("bytes=9223372036854775807-9223372036854775807", (416,)),
    "suffix-int64min": ("bytes=-9223372036854775808", (200, 206, 416)),
    "suffix-int64max": ("bytes=-9223372036854775807", (200, 206)),
    "0-2pow63": ("bytes=0-9223372036854775808", (200, 206, 416)),
    "0-2pow64": ("bytes=0-18446744073709551616", (200, 206, 416)),
    "2pow64-open": ("bytes=18446744073709551616-", (200, 416)),
    "uint64max-open": ("bytes=18446744073709551615-", (200, 416)),
    "30-digits-open": ("bytes=999999999999999999999999999999-", (200, 416)),
    "suffix-30-digits": ("bytes=-999999999999999999999999999999", (200, 206, 416)),
    "suffix-zero": ("bytes=-0", (200, 416)),
    "suffix-one": ("bytes=-1", (206,)),
    "last-byte": (f"bytes={len(KEEP_BYTES) - 1}-{len(KEEP_BYTES) - 1}", (206,)),
    "start-at-size": (f"bytes={len(KEEP_BYTES)}-", (416,)),
    "negative-start": ("bytes=-5-10", (200, 416)),
    "double-minus": ("bytes=--1", (200, 416)),
    "reversed": ("bytes=10-5", (200, 416)),
    "plus-sign": ("bytes=+1-2", (200, 416)),
    "hex": ("bytes=0x10-0x20", (200, 416)),
    "exponent": ("bytes=1e3-", (200, 416)),
    "empty-spec": ("bytes=", (200, 416)),
    "only-dash": ("bytes=-", (200, 416)),
    "multiple": ("bytes=0-0,1-1,2-2", (200, 206, 416)),
    "multiple-overlapping-huge": ("bytes=0-9223372036854775807,-9223372036854775808", (200, 206, 416)),
    "many-ranges-20000": ("bytes=" + ",".join(["0-0"] * 20000), (200, 206, 416, 431, 400)),
    "other-unit": ("items=0-1", (200,)),
    "no-unit": ("0-1", (200,)),
    "spaces": ("bytes = 0 - 1", (200, 206, 416)),
    "tab": ("bytes=\t0-1", (200, 206, 416)),
    "garbage": ("\x7f\x01\x02", (200, 400)),
}

for _name, (_value, _allowed) in RANGES.items():
    for _method in ("GET", "HEAD"):
        def _run(s: Stowd, value=_value, method=_method) -> Resp:
            head = s.head_bytes(method, f"/cdn/{NS}/{KEEP_PATH}", [("Range", value)], auth=False)
            r = s.raw(head, head_request=(method == "HEAD"))
            r.method = method
            return r

        add(f"cdn-public-range-{_name}-{_method}", _run, range_judge(KEEP_BYTES, _allowed))

# The same on a public file of no bytes: every range is unsatisfiable (or the Range is ignored).
for _name, (_value, _allowed) in RANGES.items():
    def _run(s: Stowd, value=_value) -> Resp:
        return s.raw(s.head_bytes("GET", f"/cdn/{NS}/{EMPTY_PATH}", [("Range", value)], auth=False))

    add(f"cdn-empty-file-range-{_name}", _run, range_judge(b"", (200, 416, 400, 431)))

for _name in ("0-int64max", "int64max-open", "suffix-int64min", "0-2pow63"):
    _value, _allowed = RANGES[_name]

    def _run(s: Stowd, value=_value) -> Resp:
        return s.request("GET", f"/cdn/{NS}/{PRIVATE_PATH}", headers={"Range": value})

    add(f"cdn-private-token-range-{_name}", _run, range_judge(PRIVATE_BYTES, _allowed))

    def _run_signed(s: Stowd, value=_value) -> Resp:
        r = s.request("POST", SIGN_URLS, {"expiry": 600, "urls": [f"/cdn/{NS}/{PRIVATE_PATH}"]})
        assert r.status == 200, f"setup: sign-urls: {r.short()}"
        url = r.json()["urls"][0]["signed_url"]
        path = url[url.index("/cdn/"):]
        return s.request("GET", path, headers={"Range": value}, auth=False)

    add(f"cdn-private-signed-range-{_name}", _run_signed, range_judge(PRIVATE_BYTES, _allowed))

# Conditional headers that an attacker fills with junk: a consistent answer, no crash.
CONDITIONALS = {
    "if-none-match-10000-etags": ("If-None-Match", ", ".join(f'"{i:032x}"' for i in range(10000))),
    "if-match-10000-etags": ("If-Match", ", ".join(f'"{i:032x}"' for i in range(10000))),
    "if-match-lone-quote": ("If-Match", '"'),
    "if-none-match-weak-garbage": ("If-None-Match", 'W/"\x01\x02'),
    "if-modified-since-garbage": ("If-Modified-Since", "Sun, 99 Foo 99999 99:99:99 GMT"),
    "if-range-garbage": ("If-Range", '"nope"'),
}
for _name, (_h, _v) in CONDITIONALS.items():
    def _run(s: Stowd, h=_h, v=_v) -> Resp:
        head = s.head_bytes("GET", f"/cdn/{NS}/{KEEP_PATH}", [(h, v), ("Range", "bytes=0-9223372036854775807")], auth=False)
        return s.raw(head)

    add(f"cdn-{_name}", _run, lambda r: range_judge(KEEP_BYTES, (200, 206, 304, 412, 416, 431, 400))(r) if r.status != 304 else [])

# =============================================================================================
# 2. The storage link (PUT / PATCH / HEAD / DELETE), numbers and signatures


def _patch_head(s: Stowd, path: str, offset, length, auth: bool = False, extra: list | None = None) -> bytes:
    hs = [("Tus-Resumable", "1.0.0"), ("Content-Type", "application/offset+octet-stream"), ("Upload-Offset", str(offset))]
    if length is not None:
        hs.append(("Content-Length", str(length)))
    return s.head_bytes("PATCH", path, hs + (extra or []), auth=auth)


def _after_one_byte(s: Stowd, defer: bool = False) -> str:
    st = fresh_upload(s, 0 if defer else 2, defer=defer)
    link = s.link_of(st)
    r = s.patch_link(st, 0, b"x")
    assert r.status == 204, f"setup: PATCH of the first byte answered {r.short()}"
    return link


def _run_patch_cl_after_one(s: Stowd, cl: str, defer: bool = False) -> Resp:
    """An answer is due at once: the declared length alone takes the upload past its size."""
    link = _after_one_byte(s, defer)
    r = s.raw(_patch_head(s, link, 1, cl), timeout=10)
    r.method = "PATCH"
    return r


add("link-patch-content-length-int64max-after-1-byte", lambda s: _run_patch_cl_after_one(s, str(INT64_MAX)), refuse(413))
add("link-patch-content-length-int64max-minus-1-after-1-byte", lambda s: _run_patch_cl_after_one(s, str(INT64_MAX - 1)), refuse(413))
add("link-deferred-patch-content-length-int64max-after-1-byte", lambda s: _run_patch_cl_after_one(s, str(INT64_MAX), defer=True), refuse(413))
add("link-patch-content-length-2pow63-after-1-byte", lambda s: _run_patch_cl_after_one(s, str(2**63)))
add("link-patch-content-length-2pow64-after-1-byte", lambda s: _run_patch_cl_after_one(s, str(2**64)))
add("link-patch-content-length-negative-after-1-byte", lambda s: _run_patch_cl_after_one(s, "-1"))


def _run_tus_files_patch_cl(s: Stowd) -> Resp:
    path = tus_create(s, 2)
    r = s.request("PATCH", path, b"x", headers={"Tus-Resumable": "1.0.0", "Upload-Offset": "0", "Content-Type": "application/offset+octet-stream"})
    assert r.status == 204, f"setup: first byte: {r.short()}"
    r = s.raw(_patch_head(s, path, 1, INT64_MAX, auth=True))
    r.method = "PATCH"
    return r


add("tus-files-patch-content-length-int64max-after-1-byte", _run_tus_files_patch_cl, refuse(413))

UPLOAD_OFFSETS = {
    "int64max": str(INT64_MAX), "2pow63": str(2**63), "2pow64": str(2**64), "minus-1": "-1", "int64min": str(INT64_MIN),
    "plus-0": "+0", "hex-0": "0x0", "exponent": "0e0", "decimal": "0.0", "empty": "", "letters": "abc",
    "30-digits": "9" * 30, "arabic-zero": "\u0660", "two-values": "0, 0",
}
for _name, _v in UPLOAD_OFFSETS.items():
    def _run(s: Stowd, v=_v) -> Resp:
        link = s.link_of(fresh_upload(s, 2))
        head = _patch_head(s, link, "OFFSET", 1).replace(b"Upload-Offset: OFFSET", b"Upload-Offset: " + v.encode("utf-8"))
        r = s.raw(head + b"x")
        r.method = "PATCH"
        return r

    add(f"link-patch-upload-offset-{_name}", _run)


def _run_put_cl(s: Stowd, cl: str, send: bytes = b"", defer: bool = False, then: str = "read") -> Resp:
    link = s.link_of(fresh_upload(s, 0 if defer else 2, defer=defer))
    head = s.head_bytes("PUT", link, [("Content-Length", cl)], auth=False)
    r = s.raw(head + send, then=then)
    r.method = "PUT"
    return r


add("link-put-content-length-int64max", lambda s: _run_put_cl(s, str(INT64_MAX)))
add("link-put-content-length-2pow64", lambda s: _run_put_cl(s, str(2**64)))
add("link-put-content-length-negative", lambda s: _run_put_cl(s, "-1"))
add("link-put-content-length-plus", lambda s: _run_put_cl(s, "+2", b"xy"))
add("link-put-content-length-duplicate-different", lambda s: s.raw(
    s.head_bytes("PUT", s.link_of(fresh_upload(s, 2)), [("Content-Length", "2"), ("Content-Length", "3")], auth=False) + b"xyz"))
add("link-deferred-put-content-length-int64max-1-byte-then-half-close",
    lambda s: _run_put_cl(s, str(INT64_MAX), b"x", defer=True, then="half_close"), REFUSE_OR_CLOSE)
add("link-put-content-length-larger-than-sent-half-close", lambda s: _run_put_cl(s, "2", b"x", then="half_close"), REFUSE_OR_CLOSE)
add("link-put-headers-only-then-close", lambda s: _run_put_cl(s, "2", b"", then="close"), NOTHING_DUE)
add("link-put-half-body-then-close", lambda s: _run_put_cl(s, "2", b"x", then="close"), NOTHING_DUE)


def _run_put_chunked_overlong(s: Stowd, total: int) -> Resp:
    link = s.link_of(fresh_upload(s, 2))
    head = s.head_bytes("PUT", link, [("Transfer-Encoding", "chunked")], auth=False)
    r = s.raw(head, chunked(repeat_bytes(b"A", total, 64 << 10)))
    r.method = "PUT"
    return r


add("link-put-chunked-body-1MiB-for-2-bytes", lambda s: _run_put_chunked_overlong(s, MiB), refuse(413))


def _run_patch_chunked_overlong(s: Stowd) -> Resp:
    link = s.link_of(fresh_upload(s, 2))
    head = _patch_head(s, link, 0, None, extra=[("Transfer-Encoding", "chunked")])
    r = s.raw(head, chunked([b"A" * 100]))
    r.method = "PATCH"
    return r


add("link-patch-chunked-100-bytes-for-2", _run_patch_chunked_overlong, refuse(413))


def _run_patch_header(s: Stowd, drop: str | None = None, **override: str) -> Resp:
    link = s.link_of(fresh_upload(s, 2))
    hs = {"Tus-Resumable": "1.0.0", "Content-Type": "application/offset+octet-stream", "Upload-Offset": "0", "Content-Length": "1"}
    hs.update({k.replace("_", "-"): v for k, v in override.items()})
    if drop:
        hs.pop(drop)
    r = s.raw(s.head_bytes("PATCH", link, list(hs.items()), auth=False) + b"x")
    r.method = "PATCH"
    return r


add("link-patch-content-type-octet-stream", lambda s: _run_patch_header(s, Content_Type="application/octet-stream"), refuse(415))
add("link-patch-content-type-json", lambda s: _run_patch_header(s, Content_Type="application/json"), refuse(415))
add("link-patch-no-tus-resumable", lambda s: _run_patch_header(s, drop="Tus-Resumable"), refuse(412))
add("link-patch-tus-resumable-garbage", lambda s: _run_patch_header(s, Tus_Resumable="9" * 1000), refuse(412))
add("link-patch-no-upload-offset", lambda s: _run_patch_header(s, drop="Upload-Offset"), refuse(400))
add("link-patch-checksum-not-base64", lambda s: _run_patch_header(s, Upload_Checksum="sha256 !!!!"), refuse(400))
add("link-patch-checksum-unknown-algorithm", lambda s: _run_patch_header(s, Upload_Checksum="md5 AAAA"), refuse(400))
add("link-patch-checksum-no-digest", lambda s: _run_patch_header(s, Upload_Checksum="sha256"), refuse(400))
add("link-patch-checksum-64KiB", lambda s: _run_patch_header(s, Upload_Checksum="sha256 " + "A" * 65536))
add("link-patch-checksum-mismatch", lambda s: _run_patch_header(s, Upload_Checksum="sha256 " + base64.b64encode(b"\0" * 32).decode()), refuse(460))


def _link_with(s: Stowd, *, expires: str | None = None, signature: str | None = None) -> str:
    link = s.link_of(fresh_upload(s, 2))
    path, query = link.split("?", 1)
    q = dict(kv.split("=", 1) for kv in query.split("&"))
    if expires is not None:
        q["expires"] = expires
    if signature is not None:
        q["signature"] = signature
    return path + "?" + "&".join(f"{k}={v}" for k, v in q.items())


EXPIRES = {
    "int64max": str(INT64_MAX), "2pow63": str(2**63), "2pow64": str(2**64), "minus-1": "-1", "int64min": str(INT64_MIN),
    "zero": "0", "exponent": "1e10", "empty": "", "30-digits": "9" * 30, "plus": "+99999999999", "hex": "0x7fffffffffffffff",
    "percent-nul": "%00",
}
for _name, _v in EXPIRES.items():
    def _run(s: Stowd, v=_v) -> Resp:
        return s.request("PUT", _link_with(s, expires=v), b"xy", auth=False)

    add(f"link-put-expires-{_name}", _run, refuse(403, 400))

    def _run_head(s: Stowd, v=_v) -> Resp:
        r = s.request("HEAD", _link_with(s, expires=v), auth=False)
        r.method = "HEAD"
        return r

    add(f"link-head-expires-{_name}", _run_head, refuse(403, 400))

    def _run_cdn(s: Stowd, v=_v) -> Resp:
        r = s.request("POST", SIGN_URLS, {"expiry": 600, "urls": [f"/cdn/{NS}/{PRIVATE_PATH}"]})
        assert r.status == 200, f"setup: sign-urls: {r.short()}"
        url = r.json()["urls"][0]["signed_url"]
        path, query = url[url.index("/cdn/"):].split("?", 1)
        q = dict(kv.split("=", 1) for kv in query.split("&"))
        q["expires"] = v
        return s.request("GET", path + "?" + "&".join(f"{k}={x}" for k, x in q.items()), auth=False, headers={"Range": "bytes=0-9223372036854775807"})

    add(f"cdn-signed-expires-{_name}", _run_cdn, refuse(403, 400))

for _name, _sig in {"empty": "", "zeros": "A" * 43, "not-base64": "!!!!", "padding": "====", "64KiB": "A" * 65536}.items():
    add(f"link-put-signature-{_name}", lambda s, sig=_sig: s.request("PUT", _link_with(s, signature=sig), b"xy", auth=False))

add("link-delete-bad-signature", lambda s: s.request("DELETE", _link_with(s, signature="A" * 43), auth=False), refuse(403))
add("link-id-path-traversal", lambda s: s.request("PUT", "/storage/uploads/..%2f..%2fstowd.sqlite?expires=9999999999&signature=" + "A" * 43, b"xy", auth=False))
add("link-id-64KiB", lambda s: s.request("PUT", "/storage/uploads/" + "a" * 65536 + "?expires=9999999999&signature=x", b"xy", auth=False))

# complete: a deferred upload's final size, and garbage links


def _run_complete_deferred(s: Stowd, size_literal: str) -> Resp:
    st = fresh_upload(s, 0, defer=True)
    r = s.patch_link(st, 0, b"abc")
    assert r.status == 204, f"setup: PATCH: {r.short()}"
    body = json.dumps(st).replace('"size": 0', '"size": ' + size_literal, 1).encode()
    assert body != jbytes(st)
    return post_raw_json(s, "POST", v2("upload/complete"), body)


SIZES = {
    "int64max": str(INT64_MAX), "2pow63": str(2**63), "minus-1": "-1", "int64min": str(INT64_MIN),
    "below-int64min": str(INT64_MIN - 1), "1e308": "1e308", "minus-1e308": "-1e308", "fraction": "1.5",
    "2pow64": str(2**64), "1e19": "1e19", "string": '"5"', "null": "null", "true": "true", "array": "[]", "object": "{}",
    "over-max-upload-size": str((1 << 40) + 1),
}
for _name, _lit in SIZES.items():
    add(f"complete-deferred-size-{_name}", lambda s, lit=_lit: _run_complete_deferred(s, lit))


def _run_complete_link(s: Stowd, url: str) -> Resp:
    st = fresh_upload(s, 2)
    st["upload"]["url"] = url
    return s.request("POST", v2("upload/complete"), st)


add("complete-link-nul", lambda s: _run_complete_link(s, "/storage/uploads/\u0000"))
add("complete-link-other-server", lambda s: _run_complete_link(s, "http://169.254.169.254/latest/meta-data"))
add("complete-link-64KiB", lambda s: _run_complete_link(s, "/storage/uploads/" + "a" * 65536))
add("complete-incomplete-upload", lambda s: s.complete(fresh_upload(s, 2)), refuse(409))

# =============================================================================================
# 3. Sizes in JSON bodies


def _start_body(size_literal: str, name: str = "hostile/size.bin") -> bytes:
    return ('{"file_name": %s, "size": %s}' % (json.dumps(name), size_literal)).encode()


for _name, _lit in SIZES.items():
    add(f"start-v2-size-{_name}", lambda s, lit=_lit: post_raw_json(s, "POST", v2("upload/start"), _start_body(lit)))
    add(f"start-v1-size-{_name}", lambda s, lit=_lit: post_raw_json(s, "POST", v1("upload/start/"), _start_body(lit)))

    def _run_direct(s: Stowd, lit=_lit) -> Resp:
        h = base64.b64encode(_start_body(lit)).decode()
        return s.raw(s.head_bytes("POST", v2("upload/direct"), [("Stow-Upload", h), ("Content-Length", "0"), ("Content-Type", "application/octet-stream")]))

    add(f"direct-size-{_name}", _run_direct)

    def _run_batch(s: Stowd, lit=_lit) -> Resp:
        decl = ('{"files": [{"file_name": "hostile/b.bin", "size": %s}]}' % lit).encode()
        body = struct.pack(">I", len(decl)) + decl + b"abc"
        return post_raw_json(s, "POST", v2("upload/batch"), body, "application/octet-stream")

    add(f"batch-size-{_name}", _run_batch)
    # `{"size": null}` means "no change": answered with the unchanged record.
    add(f"patch-keep-size-{_name}", lambda s, lit=_lit: post_raw_json(s, "PATCH", v1(f"files/{KEEP_PATH}"), ('{"size": %s}' % lit).encode()),
        answer_in(200) if _name == "null" else None)

add("start-deferred-size-int64max", lambda s: post_raw_json(s, "POST", v2("upload/start"), ('{"file_name": "hostile/d.bin", "size": %d, "defer_length": true}' % INT64_MAX).encode()))
for _field in ("mode", "uid", "gid", "mtime_ns", "atime_ns", "ctime_ns"):
    for _name, _lit in (("2pow63", str(2**63)), ("1e308", "1e308"), ("string", '"1"'), ("2pow64", str(2**64))):
        add(f"start-params-{_field}-{_name}", lambda s, f=_field, lit=_lit: post_raw_json(
            s, "POST", v2("upload/start"), ('{"file_name": "hostile/p.bin", "size": 1, "params": {"%s": %s}}' % (f, lit)).encode()))
for _name, _field, _lit in (("mode-4096", "mode", "4096"), ("mode-2pow63", "mode", str(2**63)), ("uid-2pow64", "uid", str(2**64)),
                            ("mtime-ns-1e308", "mtime_ns", "1e308"), ("atime-ns-2pow63", "atime_ns", str(2**63)),
                            ("public-string", "public", '"yes"'), ("tags-string", "tags", '"a"'),
                            ("content-type-no-slash", "content_type", '"no-slash"'), ("metadata-key-control-char", "metadata", '{"a\\u0001b": "c"}'),
                            ("metadata-value-nul", "metadata", '{"a": "b\\u0000"}'), ("metadata-set-key-empty", "metadata_set", '{"": "c"}')):
    add(f"patch-keep-{_name}", lambda s, f=_field, lit=_lit: post_raw_json(
        s, "PATCH", v1(f"files/{KEEP_PATH}"), ('{"%s": %s}' % (f, lit)).encode()))
# Strict JSON (RFC 8259): invalid UTF-8 or a raw control character is not JSON, even in a key the route ignores.
add("json-patch-keep-unknown-key-invalid-utf8", lambda s: post_raw_json(s, "PATCH", v1(f"files/{KEEP_PATH}"), b'{"x-junk": "\xff\xfe"}'), refuse(400))
add("json-patch-keep-unknown-key-raw-nul", lambda s: post_raw_json(s, "PATCH", v1(f"files/{KEEP_PATH}"), b'{"x-junk": "a\x00b"}'), refuse(400))
add("patch-keep-65-tags", lambda s: s.request("PATCH", v1(f"files/{KEEP_PATH}"), {"tags": [f"t{i}" for i in range(65)]}))
add("patch-keep-if-match-wrong", lambda s: s.request("PATCH", v1(f"files/{KEEP_PATH}"), {"tags": ["x"]}, headers={"If-Match": '"nope"'}), refuse(412))
add("patch-keep-size-if-match-wrong", lambda s: s.request("PATCH", v1(f"files/{KEEP_PATH}"), {"size": 0}, headers={"If-Match": '"nope"'}), refuse(412))
add("start-100000-tags", lambda s: s.request("POST", v2("upload/start"), {"file_name": "hostile/t.bin", "size": 1, "tags": ["t"] * 100000}))
add("start-10000-metadata-keys", lambda s: s.request("POST", v2("upload/start"), {"file_name": "hostile/m.bin", "size": 1, "params": {"metadata": {f"k{i}": "v" for i in range(10000)}}}))
add("start-content-type-crlf", lambda s: s.request("POST", v2("upload/start"), {"file_name": "hostile/c.bin", "size": 1, "content_type": "text/plain\r\nX-Injected: 1"}))
add("start-sha256-not-hex", lambda s: s.request("POST", v2("upload/start"), {"file_name": "hostile/h.bin", "size": 1, "params": {"sha256": "z" * 64}}))
add("start-if-none-match-not-star", lambda s: s.request("POST", v2("upload/start"), {"file_name": "hostile/i.bin", "size": 1, "params": {"if_none_match": "etag"}}))
add("start-on-existing-folder", lambda s: s.request("POST", v2("upload/start"), {"file_name": "keepdir", "size": 1}), refuse(409))
add("start-under-a-file", lambda s: s.request("POST", v2("upload/start"), {"file_name": f"{KEEP_PATH}/x", "size": 1}), refuse(409))
add("start-if-none-match-existing", lambda s: s.request("POST", v2("upload/start"), {"file_name": KEEP_PATH, "size": 1, "params": {"if_none_match": "*"}}), refuse(412))

# =============================================================================================
# 4. sign-urls expiry and URLs

for _name, _lit in {**SIZES, "zero": "0", "over-a-week": "604801"}.items():
    add(f"sign-urls-expiry-{_name}", lambda s, lit=_lit: post_raw_json(
        s, "POST", SIGN_URLS, ('{"expiry": %s, "urls": ["/cdn/%s/%s"]}' % (lit, NS, KEEP_PATH)).encode()))
for _name, _url in {
    "nul": f"/cdn/{NS}/a\u0000b", "bad-percent": f"/cdn/{NS}/%zz", "percent-ff": f"/cdn/{NS}/%ff", "dotdot": f"/cdn/{NS}/../x",
    "encoded-dotdot": f"/cdn/{NS}/%2e%2e/x", "no-path": f"/cdn/{NS}", "bad-namespace": "/cdn/..%2f/x", "not-cdn": "/etc/passwd",
    "long-segment": f"/cdn/{NS}/" + "a" * 256, "path-20KiB": f"/cdn/{NS}/" + "a/" * 10000 + "a", "scheme-only": "http://",
}.items():
    add(f"sign-urls-url-{_name}", lambda s, u=_url: s.request("POST", SIGN_URLS, {"expiry": 60, "urls": [u]}))
# Signing needs no lookup: a URL of a namespace or file that does not exist may be signed (it will answer 404/403).
add("sign-urls-url-unknown-namespace", lambda s: s.request("POST", SIGN_URLS, {"expiry": 60, "urls": ["/cdn/nope/x"]}), answer_in(200, 400, 403, 404))
add("sign-urls-1001-urls", lambda s: s.request("POST", SIGN_URLS, {"expiry": 60, "urls": [f"/cdn/{NS}/{KEEP_PATH}"] * 1001}))
add("sign-urls-no-token", lambda s: s.request("POST", SIGN_URLS, {"expiry": 60, "urls": [f"/cdn/{NS}/{KEEP_PATH}"]}, auth=False), refuse(401))

# =============================================================================================
# 5. browse: limit, page, next_id, prefix, delimiter, search

NUMBERS_Q = {
    "int64max": str(INT64_MAX), "2pow63": str(2**63), "minus-1": "-1", "int64min": str(INT64_MIN), "zero": "0",
    "letters": "abc", "exponent": "1e3", "empty": "", "nul": "%00", "space-1": "%201", "hex": "0x10", "fraction": "1.0",
    "30-digits": "9" * 30,
}
for _name, _v in NUMBERS_Q.items():
    add(f"browse-limit-{_name}", lambda s, v=_v: s.request("GET", v1(f"browse?limit={v}")), refuse(400))
    add(f"browse-page-{_name}", lambda s, v=_v: s.request("GET", v1(f"browse?page={v}")), refuse(400))
add("browse-limit-5001", lambda s: s.request("GET", v1("browse?limit=5001")), refuse(400))
add("browse-page-2pow31", lambda s: s.request("GET", v1("browse?page=2147483648")), refuse(400))
add("browse-page-int32max-limit-5000", lambda s: s.request("GET", v1("browse?page=2147483647&limit=5000")), answer_in(200, 400))
for _name, _v in {
    "not-base64": "!!!", "invalid-utf8": "_w", "nul": "AA", "percent-ff": "%ff", "100KiB": "A" * 100000,
    "huge-key": base64.urlsafe_b64encode(b"z" * 20000).decode().rstrip("="), "sql-ish": base64.urlsafe_b64encode(b"' OR 1=1 --").decode(),
}.items():
    add(f"browse-next-id-{_name}", lambda s, v=_v: s.request("GET", v1(f"browse?next_id={v}")), answer_in(200, 400, 414, 431))
    add(f"browse-delimited-next-id-{_name}", lambda s, v=_v: s.request("GET", v1(f"browse?delimiter=/&next_id={v}")), answer_in(200, 400, 414, 431))
for _name, _v in {
    "dotdot": "../", "double-slash": "a//b/", "nul": "%00", "percent-ff": "%ff", "20KiB": "a" * 20000, "1000-slashes": "/" * 1000,
    "dot": "./", "long-segment": "a" * 300,
}.items():
    add(f"browse-prefix-{_name}", lambda s, v=_v: s.request("GET", v1(f"browse?delimiter=/&prefix={v}")), answer_in(200, 400))
add("browse-delimiter-not-slash", lambda s: s.request("GET", v1("browse?delimiter=x")), refuse(400))
for _name, _v in {"percent-wildcard": "%25", "underscore": "_", "nul": "%00", "100KiB": "a" * 100000, "sql": "%27%20OR%201%3D1%20--",
                  "backslash": "%5C", "percent-ff": "%ff"}.items():
    add(f"browse-search-{_name}", lambda s, v=_v: s.request("GET", v1(f"browse?search={v}")), answer_in(200, 400, 414, 431))
add("browse-no-token", lambda s: s.request("GET", v1("browse"), auth=False), refuse(401))
add("browse-wrong-token", lambda s: s.request("GET", v1("browse"), auth=False, headers={"Authorization": "Bearer nope"}), refuse(401))

# =============================================================================================
# 6. Names in URLs (files, folders, nodes, cdn) and in JSON


def _raw_path_request(s: Stowd, method: str, path: bytes, body: bytes | None = None) -> Resp:
    hs = [("Content-Length", str(len(body)))] if body is not None else []
    if body is not None:
        hs.append(("Content-Type", "application/json"))
    r = s.raw(s.head_bytes(method, path, hs) + (body or b""), head_request=(method == "HEAD"))
    r.method = method
    return r


BAD_NAMES = {
    "percent-ff": b"%ff", "overlong-slash": b"%c0%af", "surrogate": b"%ed%a0%80", "nul": b"%00", "nul-inside": b"a%00b",
    "encoded-dotdot": b"%2e%2e", "dotdot": b"..", "dot": b".", "encoded-slash": b"a%2fb", "lone-percent": b"%",
    "bad-percent": b"%zz", "segment-256": b"a" * 256, "path-17KiB": b"a/" * 8704 + b"a", "nul-before-ext": b"keep.txt%00.jpg",
    "raw-ff": b"\xff", "raw-nul": b"a\x00b", "raw-del": b"\x7f", "empty-segment": b"a//b", "trailing-dot-dot": b"keepdir/..",
}
_ROUTES_FOR_NAMES = {
    "get-file": ("GET", lambda n: f"{PREFIX}/v1.0/namespaces/{NS}/files/".encode() + n, None),
    "head-file": ("HEAD", lambda n: f"{PREFIX}/v1.0/namespaces/{NS}/files/".encode() + n, None),
    "patch-file": ("PATCH", lambda n: f"{PREFIX}/v1.0/namespaces/{NS}/files/".encode() + n, b'{"tags": ["x"]}'),
    "delete-file": ("DELETE", lambda n: f"{PREFIX}/v1.0/namespaces/{NS}/files/".encode() + n, None),
    "put-folder": ("PUT", lambda n: f"{PREFIX}/v1.0/namespaces/{NS}/folders/".encode() + n, b""),
    "delete-folder": ("DELETE", lambda n: f"{PREFIX}/v1.0/namespaces/{NS}/folders/".encode() + n, None),
    "put-node": ("PUT", lambda n: f"{PREFIX}/v1.0/namespaces/{NS}/nodes/".encode() + n, b'{"kind": "fifo"}'),
    "cdn": ("GET", lambda n: f"/cdn/{NS}/".encode() + n, None),
}
for _rname, (_method, _mk, _body) in _ROUTES_FOR_NAMES.items():
    for _nname, _n in BAD_NAMES.items():
        add(f"name-{_rname}-{_nname}", lambda s, m=_method, mk=_mk, n=_n, b=_body: _raw_path_request(s, m, mk(n), b))

# Attempts to reach the kept files through odd spellings of their paths: refused, and they stay.
for _name, _p in {
    "double-slash": b"/keep.txt", "trailing-slash": b"keep.txt/", "dot-segment": b"./keep.txt", "dotdot-segment": b"keepdir/../keep.txt",
    "encoded-dotdot": b"keepdir/%2e%2e/keep.txt", "encoded-slash": b"keepdir%2fprivate.bin", "nul-suffix": b"keep.txt%00",
}.items():
    add(f"delete-keep-via-{_name}", lambda s, p=_p: _raw_path_request(s, "DELETE", f"{PREFIX}/v1.0/namespaces/{NS}/files/".encode() + p))
add("delete-keep-if-match-wrong", lambda s: s.request("DELETE", v1(f"files/{KEEP_PATH}"), headers={"If-Match": '"nope"'}), refuse(412))
add("delete-keep-if-match-10000-etags", lambda s: s.request("DELETE", v1(f"files/{KEEP_PATH}"), headers={"If-Match": ", ".join(f'"{i:032x}"' for i in range(10000))}), refuse(412, 431, 400))
add("delete-folder-not-empty", lambda s: s.request("DELETE", v1("folders/keepdir")), refuse(409))
add("delete-folder-not-empty-trailing-slash", lambda s: s.request("DELETE", v1("folders/keepdir/")), refuse(409))
add("delete-folder-root", lambda s: s.request("DELETE", v1("folders/")))
add("delete-folder-that-is-a-file", lambda s: s.request("DELETE", v1(f"folders/{KEEP_PATH}")))
add("put-folder-over-a-file", lambda s: s.request("PUT", v1(f"folders/{KEEP_PATH}")), refuse(409))
add("put-folder-under-a-file", lambda s: s.request("PUT", v1(f"folders/{KEEP_PATH}/sub")), refuse(409))
add("put-folder-bad-json", lambda s: post_raw_json(s, "PUT", v1("folders/hostile-dir"), b"{"))
add("put-folder-mode-1e308", lambda s: post_raw_json(s, "PUT", v1("folders/hostile-dir"), b'{"mode": 1e308}'))
add("delete-namespace-not-empty", lambda s: s.request("DELETE", NAMESPACES + f"/{NS}"), refuse(409))
for _name, _q in {"TRUE": "TRUE", "one": "1", "nul": "true%00", "space": "true%20"}.items():
    add(f"delete-namespace-recursive-{_name}", lambda s, q=_q: s.request("DELETE", NAMESPACES + f"/{NS}?recursive={q}"), refuse(409))
add("delete-namespace-no-token", lambda s: s.request("DELETE", NAMESPACES + f"/{NS}?recursive=true", auth=False), refuse(401))
add("delete-namespace-wrong-token", lambda s: s.request("DELETE", NAMESPACES + f"/{NS}?recursive=true", auth=False,
                                                         headers={"Authorization": "Bearer hostile-admin-token-012345678"}), refuse(401))
for _name, _n in {"dotdot": b"..", "encoded-dotdot": b"%2e%2e", "upper": b"Test", "64-chars": b"a" * 64, "nul": b"%00", "dash-first": b"-a",
                  "encoded-slash": b"a%2fb", "raw-ff": b"\xff", "percent-ff": b"%ff", "unicode": b"%c3%a9"}.items():
    add(f"namespace-put-{_name}", lambda s, n=_n: _raw_path_request(s, "PUT", NAMESPACES.encode() + b"/" + n))
    add(f"namespace-get-{_name}", lambda s, n=_n: _raw_path_request(s, "GET", NAMESPACES.encode() + b"/" + n))
    add(f"namespace-browse-{_name}", lambda s, n=_n: _raw_path_request(s, "GET", NAMESPACES.encode() + b"/" + n + b"/browse"))

# Names inside JSON bodies
JSON_NAMES = {
    "nul": '"a\\u0000b"', "lone-surrogate": '"\\ud800"', "dotdot": '"../x"', "empty": '""', "slash-only": '"/"', "double-slash": '"a//b"',
    "segment-256": json.dumps("a" * 256), "path-17KiB": json.dumps("a/" * 8704 + "a"),
    "number": "5", "null": "null",
}
for _name, _lit in JSON_NAMES.items():
    add(f"start-name-{_name}", lambda s, lit=_lit: post_raw_json(s, "POST", v2("upload/start"), ('{"file_name": %s, "size": 1}' % lit).encode()))
    add(f"rename-to-{_name}", lambda s, lit=_lit: post_raw_json(s, "POST", v1("rename"), ('{"from": "%s", "to": %s}' % (KEEP_PATH, lit)).encode()))
    add(f"link-to-{_name}", lambda s, lit=_lit: post_raw_json(s, "POST", v1("link"), ('{"from": "%s", "to": %s}' % (KEEP_PATH, lit)).encode()))
for _name, _raw in {"invalid-utf8": b'"\xff\xfe"', "raw-nul": b'"a\x00b"', "raw-newline": b'"a\nb"', "overlong-utf8": b'"\xc0\xaf"',
                    "encoded-surrogate": b'"\xed\xa0\x80"'}.items():
    add(f"start-name-{_name}", lambda s, raw=_raw: post_raw_json(s, "POST", v2("upload/start"), b'{"file_name": ' + raw + b', "size": 1}'))
    add(f"rename-to-{_name}", lambda s, raw=_raw: post_raw_json(s, "POST", v1("rename"), b'{"from": "keep.txt", "to": ' + raw + b"}"))
    add(f"direct-name-{_name}", lambda s, raw=_raw: s.raw(s.head_bytes("POST", v2("upload/direct"), [
        ("Stow-Upload", base64.b64encode(b'{"file_name": ' + raw + b', "size": 1}').decode()), ("Content-Length", "1")]) + b"x"))

add("rename-into-itself", lambda s: s.request("POST", v1("rename"), {"from": "keepdir", "to": "keepdir/sub"}))
add("rename-file-under-itself", lambda s: s.request("POST", v1("rename"), {"from": KEEP_PATH, "to": f"{KEEP_PATH}/x"}))
add("rename-onto-existing-no-replace", lambda s: s.request("POST", v1("rename"), {"from": KEEP_PATH, "to": PRIVATE_PATH}), refuse(409))
add("rename-exchange-missing", lambda s: s.request("POST", v1("rename"), {"from": KEEP_PATH, "to": "missing", "exchange": True}))
add("rename-from-number", lambda s: post_raw_json(s, "POST", v1("rename"), b'{"from": 5, "to": "x"}'))
add("rename-root", lambda s: s.request("POST", v1("rename"), {"from": "/", "to": "x"}))
add("rename-no-token", lambda s: s.request("POST", v1("rename"), {"from": KEEP_PATH, "to": "x"}, auth=False), refuse(401))
add("link-to-a-folder", lambda s: s.request("POST", v1("link"), {"from": "keepdir", "to": "hostile-link"}))
add("link-missing", lambda s: s.request("POST", v1("link"), {"from": "missing", "to": "hostile-link"}), refuse(404))
add("link-onto-existing", lambda s: s.request("POST", v1("link"), {"from": KEEP_PATH, "to": PRIVATE_PATH}), refuse(409))
add("link-onto-itself", lambda s: s.request("POST", v1("link"), {"from": KEEP_PATH, "to": KEEP_PATH}), refuse(409))
for _name, _body in {
    "kind-file": b'{"kind": "file"}', "kind-dir": b'{"kind": "dir"}', "kind-unknown": b'{"kind": "nope"}',
    "symlink-no-target": b'{"kind": "symlink"}', "symlink-empty-target": b'{"kind": "symlink", "target": ""}',
    "symlink-4096-target": ('{"kind": "symlink", "target": "%s"}' % ("a" * 4096)).encode(),
    "symlink-nul-target": b'{"kind": "symlink", "target": "a\\u0000b"}', "chr-no-rdev": b'{"kind": "chr"}',
    "blk-rdev-negative": b'{"kind": "blk", "rdev": -1}', "blk-rdev-2pow64": ('{"kind": "blk", "rdev": %d}' % 2**64).encode(),
    "fifo-mode-2pow63": ('{"kind": "fifo", "mode": %d}' % 2**63).encode(), "no-kind": b"{}",
}.items():
    add(f"node-{_name}", lambda s, b=_body: post_raw_json(s, "PUT", v1("nodes/hostile-node"), b))
add("node-over-keep", lambda s: s.request("PUT", v1(f"nodes/{KEEP_PATH}"), {"kind": "fifo"}), refuse(409))
add("node-under-keep", lambda s: s.request("PUT", v1(f"nodes/{KEEP_PATH}/x"), {"kind": "fifo"}), refuse(409))

# =============================================================================================
# 7. Malformed JSON: nesting, invalid bytes, wrong content types, truncation — on every JSON route

JSON_ROUTES = {
    "start": ("POST", v2("upload/start")),
    "start-v1": ("POST", v1("upload/start/")),
    "complete": ("POST", v2("upload/complete")),
    "sign-urls": ("POST", SIGN_URLS),
    "patch-keep": ("PATCH", v1(f"files/{KEEP_PATH}")),
    "put-folder": ("PUT", v1("folders/hostile-dir")),
    "rename": ("POST", v1("rename")),
    "put-node": ("PUT", v1("nodes/hostile-node")),
    "link": ("POST", v1("link")),
    "copy": ("POST", COPY),
}
BAD_JSON = {
    "nested-100000-open-brackets": b"[" * 100_000,
    "nested-100000-balanced-brackets": b"[" * 100_000 + b"]" * 100_000,
    "nested-100000-objects": b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
    "nested-500000-balanced-in-1MiB": b"[" * 500_000 + b"]" * 500_000,
    # Bad bytes in the fields each route reads (names, tags, URLs, kinds), and nothing that would change anything if taken.
    "invalid-utf8": b'{"file_name": "\xff\xfe", "tags": ["\xff"], "from": "\xff", "to": "\xff", "kind": "\xff", "urls": ["\xff"]}',
    "raw-nul": b'{"file_name": "a\x00", "tags": ["a\x00"], "from": "a\x00", "to": "a\x00", "kind": "a\x00", "urls": ["a\x00"]}',
    "truncated": b'{"file_name": "a',
    "not-json": b"<xml/>",
    "bom-only": b"\xef\xbb\xbf",
    "nan": b'{"size": NaN, "expiry": NaN}',
    "empty-array": b"[]",
    "string": b'"hello"',
    "huge-number-literal": b'{"size": 1' + b"0" * 100_000 + b', "expiry": 1' + b"0" * 100_000 + b', "mode": 1' + b"0" * 100_000 + b"}",
    "100000-keys": b"{" + b",".join(b'"k%d": 1' % i for i in range(100_000)) + b"}",
}
for _rname, (_method, _path) in JSON_ROUTES.items():
    for _jname, _body in BAD_JSON.items():
        add(f"json-{_rname}-{_jname}", lambda s, m=_method, p=_path, b=_body: post_raw_json(s, m, p, b))
    add(f"json-{_rname}-over-1MiB", lambda s, m=_method, p=_path: post_raw_json(s, m, p, b'{"a": "' + b"x" * (MiB + 10) + b'"}'), refuse(413))
    add(f"json-{_rname}-content-type-multipart", lambda s, m=_method, p=_path: post_raw_json(
        s, m, p, b"--x\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n--x--\r\n", "multipart/form-data; boundary=x"))
    add(f"json-{_rname}-content-type-xml", lambda s, m=_method, p=_path: post_raw_json(s, m, p, b"<a>1</a>", "text/xml"))
    # sign-urls and copy name their namespaces in the body, so they may read it before refusing.
    add(f"json-{_rname}-no-token", lambda s, m=_method, p=_path: post_raw_json(s, m, p, b"{}", auth=False),
        refuse(400, 401) if _rname in ("sign-urls", "copy") else refuse(401))
    if _rname != "put-folder":  # an empty body is a valid folder request
        add(f"json-{_rname}-empty-body", lambda s, m=_method, p=_path: post_raw_json(s, m, p, b""))

# =============================================================================================
# 8. Huge headers, odd framing

for _name, _path in {"healthz": "/healthz", "browse": v1("browse"), "cdn": f"/cdn/{NS}/{KEEP_PATH}", "start": v2("upload/start")}.items():
    add(f"header-1MiB-value-{_name}", lambda s, p=_path: s.raw(s.head_bytes("GET", p, [("X-Junk", "a" * MiB)])), memory=True)
    add(f"headers-10000-{_name}", lambda s, p=_path: s.raw(s.head_bytes("GET", p, [(f"X-H{i}", "v") for i in range(10000)])), memory=True)
add("header-1MiB-authorization", lambda s: s.raw(s.head_bytes("GET", v1("browse"), [("Authorization", "Bearer " + "a" * MiB)], auth=False)), memory=True)
add("header-1MiB-range", lambda s: s.raw(s.head_bytes("GET", f"/cdn/{NS}/{KEEP_PATH}", [("Range", "bytes=" + "0" * MiB + "-")], auth=False)), memory=True)
add("header-1MiB-upload-offset", lambda s: s.raw(_patch_head(s, s.link_of(fresh_upload(s)), "9" * MiB, 1) + b"x"), memory=True)
add("header-1MiB-name", lambda s: s.raw(s.head_bytes("GET", "/healthz", [("X" * MiB, "v")])), memory=True)
add("request-line-1MiB-url", lambda s: s.raw(s.head_bytes("GET", f"/cdn/{NS}/" + "a" * MiB, auth=False)), memory=True)
add("request-line-1MiB-query", lambda s: s.raw(s.head_bytes("GET", v1("browse?search=" + "a" * MiB))), memory=True)
add("headers-100000-tiny", lambda s: s.raw(b"GET /healthz HTTP/1.1\r\n" + b"a:b\r\n" * 100_000 + b"\r\n"), memory=True)
add("header-no-colon", lambda s: s.raw(b"GET /healthz HTTP/1.1\r\nHost: x\r\nNoColonHere\r\n\r\n"))
add("header-name-with-space", lambda s: s.raw(b"GET /healthz HTTP/1.1\r\nHost: x\r\nBad Name: v\r\n\r\n"))
add("header-name-nul", lambda s: s.raw(b"GET /healthz HTTP/1.1\r\nHost: x\r\nA\x00B: v\r\n\r\n"))
add("header-value-nul", lambda s: s.raw(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n"))
add("header-obs-fold", lambda s: s.raw(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n"))
add("request-line-garbage", lambda s: s.raw(b"\x00\x01\x02 / HTTP/1.1\r\nHost: x\r\n\r\n"))
add("request-line-unknown-method", lambda s: s.raw(b"BREW /healthz HTTP/1.1\r\nHost: x\r\n\r\n"))
add("request-line-bad-version", lambda s: s.raw(b"GET /healthz HTTP/1.x\r\nHost: x\r\n\r\n"))
add("request-line-no-version", lambda s: s.raw(b"GET /healthz\r\n\r\n"), REFUSE_OR_CLOSE)
add("request-line-raw-space-in-path", lambda s: s.raw(b"GET /cdn/test/a b HTTP/1.1\r\nHost: x\r\n\r\n"))
add("te-chunked-and-content-length", lambda s: s.raw(s.head_bytes("POST", v2("upload/start"), [
    ("Content-Type", "application/json"), ("Content-Length", "4"), ("Transfer-Encoding", "chunked")]) + b"0\r\n\r\n"))
add("te-unknown-coding", lambda s: s.raw(s.head_bytes("POST", v2("upload/start"), [("Content-Type", "application/json"), ("Transfer-Encoding", "gzip")]) + b"{}"))
add("content-length-list", lambda s: s.raw(s.head_bytes("POST", v2("upload/start"), [("Content-Type", "application/json"), ("Content-Length", "2, 3")]) + b"{}"))
add("content-length-overflow", lambda s: s.raw(s.head_bytes("POST", v2("upload/start"), [("Content-Type", "application/json"), ("Content-Length", "9" * 30)]) + b"{}"))
add("chunk-size-overflow", lambda s: s.raw(s.head_bytes("POST", v2("upload/start"), [("Content-Type", "application/json"), ("Transfer-Encoding", "chunked")])
                                           + b"fffffffffffffffffffffff\r\n{}"), REFUSE_OR_CLOSE)
add("chunk-size-int64max-then-close", lambda s: s.raw(s.head_bytes("PUT", s.link_of(fresh_upload(s, 2)), [("Transfer-Encoding", "chunked")], auth=False)
                                                      + b"7fffffffffffffff\r\nxy", then="half_close"), REFUSE_OR_CLOSE)
add("chunk-size-garbage", lambda s: s.raw(s.head_bytes("POST", v2("upload/start"), [("Content-Type", "application/json"), ("Transfer-Encoding", "chunked")])
                                          + b"zz\r\n{}\r\n0\r\n\r\n"), REFUSE_OR_CLOSE)


def _pipelined_garbage(s: Stowd) -> list[str]:
    """A complete request followed by garbage on the same connection: an answer, then a refusal or a close."""
    c = RawConnection(s.host, s.port)
    try:
        c.send_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n\x00\x01garbage\r\n\r\n")
        first = c.read_response()
        if first.status != 200:
            return [f"the valid request was answered {first.short()}"]
        second = c.read_response(timeout=10)
        return refusal_problems(second, no_answer_ok=True) if second.status != 400 else []
    finally:
        c.close()


add("pipelined-garbage-after-valid-request", _pipelined_garbage)

# Authorization oddities
for _name, _value in {"bearer-only": "Bearer", "basic": "Basic dGVzdDp0ZXN0", "bearer-nul": "Bearer hostile\x00",
                      "bearer-prefix-of-token": "Bearer hostile-admin-token", "bearer-64KiB": "Bearer " + "a" * 65536,
                      "two-tokens": "Bearer nope, Bearer hostile-admin-token-0123456789"}.items():
    add(f"auth-{_name}", lambda s, v=_value: s.raw(s.head_bytes("GET", v1("browse"), [("Authorization", v)], auth=False)), refuse(401, 400, 431))

# =============================================================================================
# 9. Cut-off and truncated requests, on every route that takes a body


def _bodies(s: Stowd) -> dict[str, tuple[str, str, list, bytes, bool]]:
    """route → (method, path, headers, a valid-looking body, needs auth)."""
    st = fresh_upload(s, 2)
    link = s.link_of(st)
    decl = b'{"files": [{"file_name": "hostile/cut-b.bin", "size": 10}]}'
    form = (b"--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"cut-f.bin\"\r\n"
            b"Content-Type: application/octet-stream\r\n\r\n" + b"F" * 1000 + b"\r\n--XyZ--\r\n")
    direct_decl = base64.b64encode(b'{"file_name": "hostile/cut-d.bin", "size": 100}').decode()
    big_direct_decl = base64.b64encode(b'{"file_name": "hostile/cut-dbig.bin", "size": 200000}').decode()
    meta = tus_meta(namespace=NS, path="hostile/cut-t.bin")
    return {
        "start": ("POST", v2("upload/start"), [("Content-Type", "application/json")], b'{"file_name": "hostile/cut-s.bin", "size": 10}', True),
        "complete": ("POST", v2("upload/complete"), [("Content-Type", "application/json")], jbytes(st), True),
        "sign-urls": ("POST", SIGN_URLS, [("Content-Type", "application/json")], b'{"expiry": 60, "urls": ["/cdn/test/keep.txt"]}', True),
        "rename": ("POST", v1("rename"), [("Content-Type", "application/json")], b'{"from": "keep.txt", "to": "hostile-renamed.txt"}', True),
        "patch-keep": ("PATCH", v1(f"files/{KEEP_PATH}"), [("Content-Type", "application/json")], b'{"tags": ["cut"], "public": false}', True),
        "put-folder": ("PUT", v1("folders/hostile-cut-dir"), [("Content-Type", "application/json")], b'{"mode": 448, "parents": true}', True),
        "put-node": ("PUT", v1("nodes/hostile-cut-node"), [("Content-Type", "application/json")], b'{"kind": "fifo", "mode": 420}', True),
        "link": ("POST", v1("link"), [("Content-Type", "application/json")], b'{"from": "keep.txt", "to": "hostile-cut-link"}', True),
        "direct-inline": ("POST", v2("upload/direct"), [("Stow-Upload", direct_decl)], b"D" * 100, True),
        "direct-staged": ("POST", v2("upload/direct"), [("Stow-Upload", big_direct_decl)], b"D" * 200000, True),
        "batch": ("POST", v2("upload/batch"), [("Content-Type", "application/octet-stream")], struct.pack(">I", len(decl)) + decl + b"B" * 10, True),
        "form": ("POST", v1("upload/form"), [("Content-Type", "multipart/form-data; boundary=XyZ")], form, True),
        "link-put": ("PUT", link, [], b"xy", False),
        "link-patch": ("PATCH", link, [("Tus-Resumable", "1.0.0"), ("Content-Type", "application/offset+octet-stream"), ("Upload-Offset", "0")], b"xy", False),
        "tus-create-with-upload": ("POST", TUS, [("Tus-Resumable", "1.0.0"), ("Upload-Length", "10"), ("Upload-Metadata", meta),
                                                 ("Content-Type", "application/offset+octet-stream")], b"T" * 10, True),
    }


CUT_ROUTES = ["start", "complete", "sign-urls", "rename", "patch-keep", "put-folder", "put-node", "link", "direct-inline", "direct-staged",
              "batch", "form", "link-put", "link-patch", "tus-create-with-upload"]


def _cut(s: Stowd, route: str, how: str) -> Resp:
    method, path, hs, body, auth = _bodies(s)[route]
    half = body[: len(body) // 2]
    if how == "half-body-half-close":
        return s.raw(s.head_bytes(method, path, hs + [("Content-Length", str(len(body)))], auth=auth) + half, then="half_close", timeout=20)
    if how == "half-body-close":
        return s.raw(s.head_bytes(method, path, hs + [("Content-Length", str(len(body)))], auth=auth) + half, then="close", pause=0.2)
    if how == "headers-only-close":
        return s.raw(s.head_bytes(method, path, hs + [("Content-Length", str(len(body)))], auth=auth), then="close", pause=0.2)
    if how == "half-headers-close":
        head = s.head_bytes(method, path, hs + [("Content-Length", str(len(body)))], auth=auth)
        return s.raw(head[: len(head) // 2], then="close", pause=0.2)
    if how == "chunked-mid-chunk-half-close":
        head = s.head_bytes(method, path, hs + [("Transfer-Encoding", "chunked")], auth=auth)
        return s.raw(head + b"%x\r\n" % len(body) + half, then="half_close", timeout=20)
    if how == "content-length-short-by-one-half-close":
        return s.raw(s.head_bytes(method, path, hs + [("Content-Length", str(len(body) + 1))], auth=auth) + body, then="half_close", timeout=20)
    raise AssertionError(how)


for _route in CUT_ROUTES:
    for _how, _judge in (("half-body-half-close", REFUSE_OR_CLOSE), ("half-body-close", NOTHING_DUE), ("headers-only-close", NOTHING_DUE),
                         ("half-headers-close", NOTHING_DUE), ("chunked-mid-chunk-half-close", REFUSE_OR_CLOSE),
                         ("content-length-short-by-one-half-close", REFUSE_OR_CLOSE)):
        add(f"cut-{_route}-{_how}", lambda s, r=_route, h=_how: _cut(s, r, h), _judge)

# Over-long bodies
add("direct-inline-chunked-1MiB-for-5-bytes", lambda s: s.raw(s.head_bytes("POST", v2("upload/direct"), [
    ("Stow-Upload", base64.b64encode(b'{"file_name": "hostile/o.bin", "size": 5}').decode()), ("Transfer-Encoding", "chunked")]),
    chunked(repeat_bytes(b"O", MiB, 64 << 10))), refuse(413))
add("direct-staged-chunked-20MiB-for-5MiB", lambda s: s.raw(s.head_bytes("POST", v2("upload/direct"), [
    ("Stow-Upload", base64.b64encode(b'{"file_name": "hostile/o2.bin", "size": 5242880}').decode()), ("Transfer-Encoding", "chunked")]),
    chunked(repeat_bytes(b"O", 20 * MiB, 256 << 10))), refuse(413, 400))
add("direct-content-length-mismatch", lambda s: s.raw(s.head_bytes("POST", v2("upload/direct"), [
    ("Stow-Upload", base64.b64encode(b'{"file_name": "hostile/o3.bin", "size": 5}').decode()), ("Content-Length", "6")]) + b"123456"), refuse(400))
add("direct-content-length-int64max-declared-int64max", lambda s: s.raw(s.head_bytes("POST", v2("upload/direct"), [
    ("Stow-Upload", base64.b64encode(b'{"file_name": "hostile/o4.bin", "size": 9223372036854775807}').decode()),
    ("Content-Length", str(INT64_MAX))]) + b"x"), refuse(413))
add("tus-create-with-upload-body-longer-than-length", lambda s: s.raw(s.head_bytes("POST", TUS, [
    ("Tus-Resumable", "1.0.0"), ("Upload-Length", "2"), ("Upload-Metadata", tus_meta(namespace=NS, path="hostile/o5.bin")),
    ("Content-Type", "application/offset+octet-stream"), ("Content-Length", "100")]) + b"L" * 100), refuse(413))
add("tus-create-with-upload-content-length-int64max", lambda s: s.raw(s.head_bytes("POST", TUS, [
    ("Tus-Resumable", "1.0.0"), ("Upload-Length", "10"), ("Upload-Metadata", tus_meta(namespace=NS, path="hostile/o6.bin")),
    ("Content-Type", "application/offset+octet-stream"), ("Content-Length", str(INT64_MAX))]) + b"abc", then="half_close"), REFUSE_OR_CLOSE)

# =============================================================================================
# 10. tus creation

for _name, _v in {"int64max": str(INT64_MAX), "2pow63": str(2**63), "2pow64": str(2**64), "minus-1": "-1", "int64min": str(INT64_MIN),
                  "plus": "+5", "exponent": "1e3", "empty": "", "letters": "abc", "hex": "0x10", "30-digits": "9" * 30,
                  "over-max-upload-size": str((1 << 40) + 1), "two-values": "5, 6"}.items():
    add(f"tus-create-upload-length-{_name}", lambda s, v=_v: s.raw(s.head_bytes("POST", TUS, [
        ("Tus-Resumable", "1.0.0"), ("Upload-Length", v), ("Upload-Metadata", tus_meta(namespace=NS, path="hostile/tl.bin")), ("Content-Length", "0")])))
add("tus-create-no-upload-length", lambda s: s.request("POST", TUS, headers={"Tus-Resumable": "1.0.0", "Upload-Metadata": tus_meta(namespace=NS, path="hostile/x.bin")}), refuse(400))
add("tus-create-defer-length", lambda s: s.request("POST", TUS, headers={"Tus-Resumable": "1.0.0", "Upload-Defer-Length": "1", "Upload-Metadata": tus_meta(namespace=NS, path="hostile/x.bin")}))
add("tus-create-no-tus-resumable", lambda s: s.request("POST", TUS, headers={"Upload-Length": "5", "Upload-Metadata": tus_meta(namespace=NS, path="hostile/x.bin")}), refuse(412))
add("tus-create-no-token", lambda s: s.request("POST", TUS, auth=False, headers={"Tus-Resumable": "1.0.0", "Upload-Length": "5", "Upload-Metadata": tus_meta(namespace=NS, path="hostile/x.bin")}), refuse(401))
for _name, _meta in {
    "not-base64": "namespace !!!,path !!!", "no-namespace": tus_meta(path="hostile/x.bin"), "no-path": tus_meta(namespace=NS),
    "path-nul": tus_meta(namespace=NS, path=b"a\x00b"), "path-dotdot": tus_meta(namespace=NS, path="../x"),
    "path-invalid-utf8": tus_meta(namespace=NS, path=b"\xff\xfe"), "namespace-dotdot": tus_meta(namespace="..", path="x"),
    "namespace-unknown": tus_meta(namespace="nope", path="x"), "path-over-keep-folder": tus_meta(namespace=NS, path="keepdir"),
    "path-under-keep-file": tus_meta(namespace=NS, path=f"{KEEP_PATH}/x"), "10000-pairs": ",".join(f"k{i} YQ==" for i in range(10000)),
    "content-type-crlf": tus_meta(namespace=NS, path="hostile/x.bin", content_type="a/b\r\nX: 1"),
}.items():
    add(f"tus-create-metadata-{_name}", lambda s, m=_meta: s.request("POST", TUS, headers={"Tus-Resumable": "1.0.0", "Upload-Length": "5", "Upload-Metadata": m}))
add("tus-create-metadata-1MiB", lambda s: s.raw(s.head_bytes("POST", TUS, [("Tus-Resumable", "1.0.0"), ("Upload-Length", "5"),
                                                                           ("Upload-Metadata", tus_meta(namespace=NS, path="hostile/x.bin", junk="a" * MiB))])), memory=True)
add("tus-files-patch-no-token", lambda s: s.request("PATCH", tus_create(s, 2), b"x", auth=False, headers={
    "Tus-Resumable": "1.0.0", "Upload-Offset": "0", "Content-Type": "application/offset+octet-stream"}), refuse(401))
add("tus-files-head-unknown-id", lambda s: s.request("HEAD", TUS + "/" + "0" * 32), refuse(404))
add("tus-files-patch-traversal-id", lambda s: s.request("PATCH", TUS + "/..%2f..%2fstowd.sqlite", b"x", headers={
    "Tus-Resumable": "1.0.0", "Upload-Offset": "0", "Content-Type": "application/offset+octet-stream"}))
add("tus-files-patch-offset-int64max", lambda s: s.request("PATCH", tus_create(s, 2), b"x", headers={
    "Tus-Resumable": "1.0.0", "Upload-Offset": str(INT64_MAX), "Content-Type": "application/offset+octet-stream"}), refuse(409, 400))

# =============================================================================================
# 11. multipart/form-data


def _form(s: Stowd, body: bytes | "iter", content_type: str = "multipart/form-data; boundary=XyZ", cl: int | None = None) -> Resp:
    hs = [("Content-Type", content_type)]
    if isinstance(body, (bytes, bytearray)):
        hs.append(("Content-Length", str(len(body) if cl is None else cl)))
        return s.raw(s.head_bytes("POST", v1("upload/form"), hs) + body)
    hs.append(("Content-Length", str(cl)))
    return s.raw(s.head_bytes("POST", v1("upload/form"), hs), body)


def _part(name: str, value: bytes, filename: str | bytes | None = None, extra: bytes = b"") -> bytes:
    disp = b'form-data; name="' + name.encode() + b'"'
    if filename is not None:
        disp += b'; filename="' + (filename if isinstance(filename, bytes) else filename.encode()) + b'"'
    return b"--XyZ\r\nContent-Disposition: " + disp + b"\r\n" + extra + b"\r\n" + value + b"\r\n"


END = b"--XyZ--\r\n"
add("form-no-boundary", lambda s: _form(s, _part("file", b"x", "f.bin") + END, "multipart/form-data"), refuse(415))
add("form-json-content-type", lambda s: _form(s, b"{}", "application/json"), refuse(415))
add("form-boundary-71-chars", lambda s: _form(s, _part("file", b"x", "f.bin") + END, "multipart/form-data; boundary=" + "b" * 71), refuse(415))
add("form-boundary-empty", lambda s: _form(s, _part("file", b"x", "f.bin") + END, "multipart/form-data; boundary="), refuse(415))
add("form-field-1MiB", lambda s: _form(s, _part("path", b"p" * MiB) + _part("file", b"x", "hostile-f.bin") + END), refuse(400, 413), memory=True)
add("form-part-header-100KiB", lambda s: _form(s, _part("file", b"x", "hostile-f.bin", b"X-Junk: " + b"j" * 100_000 + b"\r\n") + END), refuse(400))
add("form-part-header-no-end-1MiB", lambda s: _form(s, b"--XyZ\r\nContent-Disposition: form-data; name=\"a\"\r\nX: " + b"j" * MiB), refuse(400), memory=True)
add("form-part-no-name", lambda s: _form(s, b"--XyZ\r\nContent-Disposition: form-data\r\n\r\nx\r\n" + END), refuse(400))
add("form-no-file-part", lambda s: _form(s, _part("path", b"x") + END), refuse(400))
add("form-no-closing-boundary", lambda s: _form(s, _part("file", b"x", "hostile-f.bin")), refuse(400))
add("form-garbage-after-boundary", lambda s: _form(s, b"--XyZgarbage\r\n" + END), refuse(400))
for _name, _fn in {"dotdot": b"..", "dot": b".", "empty": b"", "nul": b"a\x00b", "invalid-utf8": b"\xff\xfe.bin", "slash-only": b"/",
                   "segment-256": b"a" * 256}.items():
    add(f"form-filename-{_name}", lambda s, fn=_fn: _form(s, _part("file", b"x", fn) + END))
for _name, _p in {"dotdot": b"../x", "nul": b"a\x00b", "invalid-utf8": b"\xff/", "over-keep-folder": b"keepdir", "under-keep-file": b"keep.txt/x",
                  "17KiB": b"a/" * 8704 + b"a"}.items():
    add(f"form-path-{_name}", lambda s, p=_p: _form(s, _part("path", p) + _part("file", b"x", "hostile-f.bin") + END))
add("form-preamble-100MiB-no-boundary", lambda s: _form(s, repeat_bytes(b"P", 100 * MiB), cl=100 * MiB), refuse(400, 413), memory=True)
add("form-file-20MiB-then-bad-path", lambda s: _form(s, _part("file", b"F" * (20 * MiB), "hostile-big.bin") + _part("path", b"../x") + END),
    refuse(400), memory=True)
add("form-10000-fields-no-file", lambda s: _form(s, b"".join(_part(f"f{i}", b"v") for i in range(10000)) + END), refuse(400, 413))
add("form-1000-tiny-file-parts", lambda s: _form(s, b"".join(_part("file", b"x", f"hostile-p{i}.bin") for i in range(1000)) + _part("path", b"../x") + END),
    refuse(400, 413))

# =============================================================================================
# 12. batch


def _batch(s: Stowd, body: bytes | None = None, *, stream=None, cl: int | None = None) -> Resp:
    hs = [("Content-Type", "application/octet-stream"), ("Content-Length", str(len(body) if body is not None else cl))]
    if body is not None:
        return s.raw(s.head_bytes("POST", v2("upload/batch"), hs) + body)
    return s.raw(s.head_bytes("POST", v2("upload/batch"), hs), stream)


def _decl(files) -> bytes:
    d = jbytes({"files": files})
    return struct.pack(">I", len(d)) + d


add("batch-length-prefix-ffffffff", lambda s: _batch(s, b"\xff\xff\xff\xff" + b'{"files": []}'))
add("batch-length-prefix-7fffffff", lambda s: _batch(s, b"\x7f\xff\xff\xff" + b'{"files": []}'))
add("batch-length-prefix-past-body", lambda s: _batch(s, struct.pack(">I", 100) + b'{"files": []}'), refuse(400))
add("batch-length-prefix-zero", lambda s: _batch(s, b"\0\0\0\0"), refuse(400))
add("batch-3-bytes", lambda s: _batch(s, b"\0\0\0"), refuse(400))
add("batch-empty", lambda s: _batch(s, b""), refuse(400))
add("batch-no-files", lambda s: _batch(s, _decl([])), refuse(400))
add("batch-257-files", lambda s: _batch(s, _decl([{"file_name": f"hostile/b{i}", "size": 0} for i in range(257)])), refuse(400))
add("batch-file-over-1MiB", lambda s: _batch(s, _decl([{"file_name": "hostile/b", "size": MiB + 1}]) + b"b" * (MiB + 1)), refuse(400))
add("batch-sizes-sum-mismatch-short", lambda s: _batch(s, _decl([{"file_name": "hostile/b", "size": 10}]) + b"b" * 5), refuse(400))
add("batch-sizes-sum-mismatch-long", lambda s: _batch(s, _decl([{"file_name": "hostile/b", "size": 10}]) + b"b" * 20), refuse(400))
add("batch-sizes-that-sum-past-int64", lambda s: _batch(s, _decl([{"file_name": "hostile/a", "size": INT64_MAX}, {"file_name": "hostile/b", "size": INT64_MAX}]) + b"x"))
add("batch-declaration-nested-100000", lambda s: _batch(s, struct.pack(">I", 200_000) + b"[" * 100_000 + b"]" * 100_000))
_BAD_DECL = b'{"files": [{"file_name": "\xff", "size": 0}]}'
add("batch-declaration-invalid-utf8", lambda s: _batch(s, struct.pack(">I", len(_BAD_DECL)) + _BAD_DECL))
add("batch-no-token", lambda s: s.raw(s.head_bytes("POST", v2("upload/batch"), [("Content-Length", "4")], auth=False) + b"\0\0\0\0"), refuse(401))
add("batch-100MiB-body", lambda s: _batch(s, stream=repeat_bytes(b"\0", 100 * MiB), cl=100 * MiB), refuse(413), memory=True)
add("batch-100MiB-chunked", lambda s: s.raw(s.head_bytes("POST", v2("upload/batch"), [("Transfer-Encoding", "chunked")]),
                                            chunked(repeat_bytes(b"\0", 100 * MiB))), refuse(413), memory=True)


def _batch_per_file_refusals(s: Stowd) -> list[str]:
    """Files refused one by one (bad names, a folder, a checksum): 200 with a refusal each, nothing stored."""
    files = [{"file_name": "a\u0000b", "size": 1}, {"file_name": "../x", "size": 1}, {"file_name": "keepdir", "size": 1},
             {"file_name": f"{KEEP_PATH}/x", "size": 1}, {"file_name": "hostile/s.bin", "size": 1, "params": {"sha256": "0" * 64}},
             {"file_name": KEEP_PATH, "size": 1, "params": {"if_none_match": "*"}}]
    r = _batch(s, _decl(files) + b"x" * len(files))
    if r.status != 200:
        return [f"expected 200 with per-file refusals, got {r.short()}"]
    res = r.json().get("results", [])
    bad = [(i, x) for i, x in enumerate(res) if "file" in x or not (400 <= int(x.get("status", 0)) < 500)]
    return [f"files not refused with a 4xx: {bad}"] if bad or len(res) != len(files) else []


add("batch-per-file-refusals", _batch_per_file_refusals)

# =============================================================================================
# 13. direct upload headers

for _name, _h in {"missing": None, "not-base64": "!!!", "base64-of-garbage": base64.b64encode(b"\xff\x00").decode(),
                  "base64-of-array": base64.b64encode(b"[]").decode(), "base64-nested": base64.b64encode(b"[" * 50000).decode()}.items():
    add(f"direct-header-{_name}", lambda s, h=_h: s.raw(s.head_bytes("POST", v2("upload/direct"), ([("Stow-Upload", h)] if h is not None else []) + [("Content-Length", "1")]) + b"x"))
add("direct-header-1MiB", lambda s: s.raw(s.head_bytes("POST", v2("upload/direct"), [("Stow-Upload", "A" * MiB), ("Content-Length", "1")]) + b"x"), memory=True)
add("direct-no-token", lambda s: s.raw(s.head_bytes("POST", v2("upload/direct"), [
    ("Stow-Upload", base64.b64encode(b'{"file_name": "hostile/n.bin", "size": 1}').decode()), ("Content-Length", "1")], auth=False) + b"x"), refuse(401))
add("direct-over-keep-if-none-match", lambda s: s.raw(s.head_bytes("POST", v2("upload/direct"), [
    ("Stow-Upload", base64.b64encode(jbytes({"file_name": KEEP_PATH, "size": 1, "params": {"if_none_match": "*"}})).decode()),
    ("Content-Length", "1")]) + b"x"), refuse(412))
add("direct-over-keep-if-match-wrong", lambda s: s.raw(s.head_bytes("POST", v2("upload/direct"), [
    ("Stow-Upload", base64.b64encode(jbytes({"file_name": KEEP_PATH, "size": 1, "params": {"if_match": "nope"}})).decode()),
    ("Content-Length", "1")]) + b"x"), refuse(412))
add("direct-sha256-mismatch", lambda s: s.raw(s.head_bytes("POST", v2("upload/direct"), [
    ("Stow-Upload", base64.b64encode(jbytes({"file_name": "hostile/sha.bin", "size": 1, "params": {"sha256": "0" * 64}})).decode()),
    ("Content-Length", "1")]) + b"x"), refuse(460))

# =============================================================================================
# 14. copy (refused before anything is fetched: the allowlist is empty)

for _name, _urls in {
    "loopback": [f"http://127.0.0.1:1/x"], "self": ["http://127.0.0.1:{port}/healthz"], "metadata": ["http://169.254.169.254/latest/meta-data/"],
    "ipv6-loopback": ["http://[::1]/x"], "hex-ip": ["http://0x7f000001/x"], "userinfo": ["http://allowed@127.0.0.1/x"],
    "file-scheme": ["file:///etc/passwd"], "gopher": ["gopher://127.0.0.1:25/x"], "no-host": ["http:///x"], "empty-list": [],
    "101-urls": ["http://127.0.0.1/x"] * 101, "not-a-url": ["\u0000"],
}.items():
    def _run(s: Stowd, urls=_urls) -> Resp:
        urls = [u.replace("{port}", str(s.port)) for u in urls]
        return s.request("POST", COPY + "?sync=true", {"urls": urls, "destination": {"namespace": NS, "basepath": "hostile"}})

    add(f"copy-{_name}", _run)
add("copy-destination-namespace-dotdot", lambda s: s.request("POST", COPY, {"urls": ["http://127.0.0.1/x"], "destination": {"namespace": ".."}}))
add("copy-rewrite-dotdot", lambda s: s.request("POST", COPY, {"urls": ["http://127.0.0.1/x"], "destination": {"namespace": NS, "rewrite": "../{{name}}"}}))
add("copy-concurrency-int64max", lambda s: post_raw_json(s, "POST", COPY, ('{"urls": ["http://127.0.0.1/x"], "destination": {"namespace": "test"}, "configuration": {"concurrency": %d}}' % INT64_MAX).encode()))
add("copy-concurrency-2pow63", lambda s: post_raw_json(s, "POST", COPY, ('{"urls": ["http://127.0.0.1/x"], "destination": {"namespace": "test"}, "configuration": {"concurrency": %d}}' % 2**63).encode()))
add("copy-task-traversal", lambda s: s.request("GET", COPY + "/..%2f..%2fetc"), refuse(404))
add("copy-task-64KiB", lambda s: s.request("GET", COPY + "/" + "a" * 65536))

# =============================================================================================
# 14b. Requests that may store something (the case removes it again): extreme attributes, races,
#      duplicates in one batch. Judged on "no 5xx, no dropped answer, still alive".


def _no_server_errors(rs: list[Resp], what: str) -> list[str]:
    out = []
    for i, r in enumerate(rs):
        if r.status is None:
            out.append(f"{what} #{i}: no answer ({r.error})")
        elif r.status >= 500:
            out.append(f"{what} #{i}: {r.short()}")
        elif r.status >= 400:
            out += [f"{what} #{i}: {p}" for p in error_payload_problems(r)]
    return out


def _scratch_attr(s: Stowd, field: str, value: int) -> list[str]:
    """A scratch file given an extreme time or id, then read every way there is, then removed."""
    s.store("hostile-scratch.bin", b"scratch", public=True)
    rs = [post_raw_json(s, "PATCH", v1("files/hostile-scratch.bin"), ('{"%s": %d}' % (field, value)).encode())]
    rs.append(s.request("GET", v1("files/hostile-scratch.bin")))
    rs.append(s.request("HEAD", v1("files/hostile-scratch.bin")))
    rs.append(s.request("GET", "/cdn/test/hostile-scratch.bin", auth=False))
    rs.append(s.request("GET", "/cdn/test/hostile-scratch.bin", auth=False, headers={"Range": "bytes=0-0"}))
    rs.append(s.request("GET", v1("browse?limit=5000")))
    rs.append(s.request("GET", v1("browse?delimiter=/&limit=5000")))
    return _no_server_errors(rs, f"{field}={value}") + s.remove_extras()


for _field in ("mtime_ns", "atime_ns", "uid", "gid", "mode"):
    for _vname, _v in (("int64max", INT64_MAX), ("int64min", INT64_MIN), ("minus-1", -1)):
        add(f"scratch-patch-{_field}-{_vname}-then-read", lambda s, f=_field, v=_v: _scratch_attr(s, f, v))


def _scratch_start_params(s: Stowd, params: dict) -> list[str]:
    st = s.request("POST", v2("upload/start"), {"file_name": "hostile-scratch2.bin", "size": 1, "params": params})
    rs = [st]
    if st.status == 200:
        rs.append(s.put_link(st.json(), b"x"))
        rs.append(s.complete(st.json()))
        rs.append(s.request("GET", v1("files/hostile-scratch2.bin")))
        rs.append(s.request("GET", "/cdn/test/hostile-scratch2.bin"))
        rs.append(s.request("GET", v1("browse?limit=5000")))
    return _no_server_errors(rs, f"params {params}") + s.remove_extras()


for _name, _params in {"mtime-int64max": {"mtime_ns": INT64_MAX}, "mtime-int64min": {"mtime_ns": INT64_MIN},
                       "ctime-int64max": {"ctime_ns": INT64_MAX}, "atime-int64min": {"atime_ns": INT64_MIN},
                       "mode-minus-1": {"mode": -1}, "mode-int64max": {"mode": INT64_MAX}, "uid-int64min": {"uid": INT64_MIN}}.items():
    add(f"scratch-start-params-{_name}-then-complete", lambda s, p=_params: _scratch_start_params(s, p))


def _race_patch(s: Stowd, n: int = 20) -> list[str]:
    """n PATCHes of one byte at offset 0 at once: one wins (204), the others 409; the upload has 1 byte."""
    st = fresh_upload(s, n)
    link = s.link_of(st)
    out: list[Resp] = [None] * n  # type: ignore

    def go(i):
        out[i] = s.raw(_patch_head(s, link, 0, 1) + b"r")

    ts = [threading.Thread(target=go, args=(i,)) for i in range(n)]
    [t.start() for t in ts]
    [t.join(60) for t in ts]
    problems = _no_server_errors(out, "PATCH")
    wins = sum(1 for r in out if r and r.status == 204)
    head = s.request("HEAD", link, auth=False)
    if wins != 1 or head.headers.get("upload-offset") != "1":
        problems.append(f"{wins} PATCHes at offset 0 won; HEAD says Upload-Offset {head.headers.get('upload-offset')!r} (want 1 and '1')")
    return problems


add("race-20-patches-at-offset-0", _race_patch)


def _race_complete(s: Stowd, n: int = 10) -> list[str]:
    """n completes of one upload at once: each answers the file (complete is idempotent) or 409 `conflict`
    (another request holds the upload); at least one answers it, all the same file; then removed."""
    st = s.start_upload("hostile-race.bin", 3)
    assert s.put_link(st, b"abc").status == 200
    out: list[Resp] = [None] * n  # type: ignore

    def go(i):
        out[i] = s.complete(st)

    ts = [threading.Thread(target=go, args=(i,)) for i in range(n)]
    [t.start() for t in ts]
    [t.join(60) for t in ts]
    problems = _no_server_errors(out, "complete")
    inodes = {r.json().get("inode") for r in out if r and r.status == 200}
    if len(inodes) != 1 or any(r is None or r.status not in (200, 409) for r in out):
        problems.append(f"concurrent completes answered {[r.status if r else None for r in out]}, inodes {inodes}")
    return problems + s.remove_extras()


add("race-10-completes-of-one-upload", _race_complete)


def _race_put_delete(s: Stowd) -> list[str]:
    """PUT and DELETE of one storage link at once, ten times: no 5xx."""
    rs = []
    for _ in range(10):
        st = fresh_upload(s, 1 << 20)
        link = s.link_of(st)
        out: list[Resp] = [None, None]  # type: ignore
        t1 = threading.Thread(target=lambda: out.__setitem__(0, s.request("PUT", link, b"p" * (1 << 20), auth=False)))
        t2 = threading.Thread(target=lambda: out.__setitem__(1, s.request("DELETE", link, auth=False)))
        t1.start(), t2.start()
        t1.join(60), t2.join(60)
        rs += out
    return _no_server_errors(rs, "PUT/DELETE")


add("race-put-and-delete-of-one-link", _race_put_delete)


def _batch_dups(s: Stowd, files: list[dict]) -> list[str]:
    r = _batch(s, _decl(files) + b"".join(b"d" * f["size"] for f in files))
    problems = _no_server_errors([r], "batch")
    if r.status == 200:
        for i, x in enumerate(r.json().get("results", [])):
            if "file" not in x and not (400 <= int(x.get("status", 0)) < 500):
                problems.append(f"batch file #{i} refused with {x}")
    return problems + s.remove_extras()


add("batch-same-name-twice", lambda s: _batch_dups(s, [{"file_name": "hostile-dup.bin", "size": 1}, {"file_name": "hostile-dup.bin", "size": 2}]))
add("batch-file-and-file-under-it", lambda s: _batch_dups(s, [{"file_name": "hostile-fa", "size": 1}, {"file_name": "hostile-fa/b", "size": 1}]))
add("batch-file-under-then-file-over-folder", lambda s: _batch_dups(s, [{"file_name": "hostile-fb/c", "size": 1}, {"file_name": "hostile-fb", "size": 1}]))
add("batch-same-name-large-and-inline", lambda s: _batch_dups(s, [{"file_name": "hostile-dup2.bin", "size": 100_000}, {"file_name": "hostile-dup2.bin", "size": 1}]))
add("direct-defer-length", lambda s: s.raw(s.head_bytes("POST", v2("upload/direct"), [
    ("Stow-Upload", base64.b64encode(b'{"file_name": "hostile/dl.bin", "size": 0, "defer_length": true}').decode()), ("Content-Length", "0")])))
add("batch-defer-length", lambda s: _batch_dups(s, [{"file_name": "hostile-dl.bin", "size": 0, "defer_length": True}]))


def _complete_deferred_mismatch(s: Stowd, final: int) -> Resp:
    st = fresh_upload(s, 0, defer=True)
    assert s.patch_link(st, 0, b"abc").status == 204
    st["size"] = final
    return s.complete(st)


add("complete-deferred-size-smaller-than-received", lambda s: _complete_deferred_mismatch(s, 2), refuse(409, 400))
add("complete-deferred-size-larger-than-received", lambda s: _complete_deferred_mismatch(s, 4), refuse(409, 400))
add("browse-prefix-a-file", lambda s: s.request("GET", v1(f"browse?delimiter=/&prefix={KEEP_PATH}/")), answer_in(200, 400, 404, 409))
add("start-without-host-header", lambda s: s.raw(s.head_bytes("POST", v2("upload/start"), [
    ("Content-Type", "application/json"), ("Content-Length", "40")], host=False) + b'{"file_name": "hostile/nh.bin", "size": 1}'[:40]),
    answer_in(200, 400))
add("start-host-header-junk", lambda s: s.raw(s.head_bytes("POST", v2("upload/start"), [
    ("Host", "evil.example/../@x:99999999"), ("Content-Type", "application/json"), ("Content-Length", "42")], host=False)
    + b'{"file_name": "hostile/nh2.bin", "size": 1}'), answer_in(200, 400))


def _expect_continue(s: Stowd, method: str, path: str, cl: int, extra: list, auth: bool = True) -> Resp:
    """`Expect: 100-continue` and a body the server must refuse: it should say so without waiting for the body."""
    r = s.raw(s.head_bytes(method, path, [("Expect", "100-continue"), ("Content-Length", str(cl))] + extra, auth=auth), timeout=10)
    r.method = method
    return r


add("expect-100-continue-start-100MiB", lambda s: _expect_continue(s, "POST", v2("upload/start"), 100 * MiB, [("Content-Type", "application/json")]), refuse(413, 417))
add("expect-100-continue-put-link-wrong-length", lambda s: _expect_continue(s, "PUT", s.link_of(fresh_upload(s, 2)), 100 * MiB, [], auth=False), refuse(400, 413, 417))
add("expect-100-continue-batch-1GiB", lambda s: _expect_continue(s, "POST", v2("upload/batch"), 1 << 30, []), refuse(413, 417))
add("expect-100-continue-no-token", lambda s: _expect_continue(s, "POST", v2("upload/start"), 10, [("Content-Type", "application/json")], auth=False), refuse(401, 417))


def _many_connections(s: Stowd, n: int, partial: bytes) -> list[str]:
    """n connections held open (idle, or with a partial request): the server still answers /healthz."""
    socks = []
    try:
        for _ in range(n):
            c = RawConnection(s.host, s.port, timeout=10)
            if partial:
                c.send_all(partial)
            socks.append(c)
        t0 = time.monotonic()
        r = s.request("GET", "/healthz", auth=False, timeout=15)
        dt = time.monotonic() - t0
        return [] if r.status == 200 and dt < 10 else [f"with {n} connections open, /healthz answered {r.short()} after {dt:.1f} s"]
    finally:
        for c in socks:
            c.close()


add("connections-1000-idle", lambda s: _many_connections(s, 1000, b""), memory=True)
add("connections-1000-half-request", lambda s: _many_connections(s, 1000, b"POST /service/application/assets/v2.0/namespaces/test/upload/start HTTP/1.1\r\nHost: x\r\nContent-Le"), memory=True)

# =============================================================================================
# 15. Methods a route does not take, and the small routes (namespaces list, health, metrics)

for _name, (_m, _p, _b) in {
    "post-cdn-keep": ("POST", f"/cdn/{NS}/{KEEP_PATH}", b"overwrite"), "put-cdn-keep": ("PUT", f"/cdn/{NS}/{KEEP_PATH}", b"overwrite"),
    "delete-cdn-keep": ("DELETE", f"/cdn/{NS}/{KEEP_PATH}", None), "patch-cdn-keep": ("PATCH", f"/cdn/{NS}/{KEEP_PATH}", b'{"public": false}'),
    "post-healthz": ("POST", "/healthz", b"x"), "delete-metrics": ("DELETE", "/metrics", None),
    "post-file-keep": ("POST", v1(f"files/{KEEP_PATH}"), b"overwrite"), "put-file-keep": ("PUT", v1(f"files/{KEEP_PATH}"), b"overwrite"),
    "get-upload-start": ("GET", v2("upload/start"), None), "trace-healthz": ("TRACE", "/healthz", None),
    "delete-namespaces-list": ("DELETE", NAMESPACES, None), "put-sign-urls": ("PUT", SIGN_URLS, b"{}"),
}.items():
    add(f"method-{_name}", lambda s, m=_m, p=_p, b=_b: s.request(m, p, b, auth=False), refuse(401, 403, 404, 405))
    add(f"method-{_name}-with-token", lambda s, m=_m, p=_p, b=_b: s.request(m, p, b), refuse(403, 404, 405))
add("namespaces-list-no-token", lambda s: s.request("GET", NAMESPACES, auth=False), refuse(401))
add("namespaces-list-wrong-token", lambda s: s.request("GET", NAMESPACES, auth=False, headers={"Authorization": "Bearer x"}), refuse(401))
add("metrics-huge-query", lambda s: s.request("GET", "/metrics?" + "a=b&" * 5000, auth=False), answer_in(200, 400, 414, 431))
add("healthz-huge-query", lambda s: s.request("GET", "/healthz?" + "a" * 60000, auth=False), answer_in(200, 400, 414, 431))
add("options-tus-files-junk", lambda s: s.request("OPTIONS", TUS, headers={"Tus-Resumable": "9" * 1000, "Upload-Length": "-1"}), answer_in(200, 204, 400, 412))
add("options-link-junk", lambda s: s.request("OPTIONS", "/storage/uploads/" + "z" * 32 + "?expires=-1&signature=!", auth=False), answer_in(200, 204, 400, 403, 404))

# =============================================================================================
# 15. Huge JSON bodies: refused, and the memory they take stays bounded


def _huge(s: Stowd, method: str, path: str, total: int, gen, *, chunked_body: bool = False) -> Resp:
    if chunked_body:
        head = s.head_bytes(method, path, [("Content-Type", "application/json"), ("Transfer-Encoding", "chunked")])
        r = s.raw(head, chunked(gen), timeout=60)
    else:
        head = s.head_bytes(method, path, [("Content-Type", "application/json"), ("Content-Length", str(total))])
        r = s.raw(head, gen, timeout=60)
    r.method = method
    return r


def _string_json(prefix: bytes, n: int, suffix: bytes):
    yield prefix
    yield from repeat_bytes(b"s", n)
    yield suffix


_HUGE_ROUTES = {"start": ("POST", v2("upload/start")), "complete": ("POST", v2("upload/complete")), "sign-urls": ("POST", SIGN_URLS),
                "patch-keep": ("PATCH", v1(f"files/{KEEP_PATH}")), "put-folder": ("PUT", v1("folders/hostile-dir")), "rename": ("POST", v1("rename"))}
for _rname, (_m, _p) in _HUGE_ROUTES.items():
    add(f"huge-json-{_rname}-100MiB-whitespace", lambda s, m=_m, p=_p: _huge(s, m, p, 100 * MiB, repeat_bytes(b" ", 100 * MiB)), refuse(413), memory=True)
    add(f"huge-json-{_rname}-100MiB-whitespace-chunked", lambda s, m=_m, p=_p: _huge(s, m, p, 0, repeat_bytes(b" ", 100 * MiB), chunked_body=True),
        refuse(413), memory=True)
    _pre, _suf = b'{"file_name": "', b'", "size": 1}'
    add(f"huge-json-{_rname}-50MiB-string", lambda s, m=_m, p=_p, pre=_pre, suf=_suf: _huge(
        s, m, p, len(pre) + 50 * MiB + len(suf), _string_json(pre, 50 * MiB, suf)), refuse(413), memory=True)


# =============================================================================================
# The test


def _sample_rss(s: Stowd, stop: threading.Event, out: list) -> None:
    while not stop.is_set():
        v = s.rss_mib()
        if v is not None:
            out.append(v)
        stop.wait(0.02)


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in CASES])
def test_hostile(srv: Stowd, case: Case) -> None:
    stop, samples = threading.Event(), []
    sampler = None
    rss_before = srv.rss_mib() or 0.0
    peak_reset = False
    if case.memory:
        peak_reset = srv.reset_peak()
        sampler = threading.Thread(target=_sample_rss, args=(srv, stop, samples), daemon=True)
        sampler.start()
    problems: list[str] = []
    sent = ""
    try:
        out = case.run(srv)
        if isinstance(out, Resp):
            sent = f"answer: {out.short()}"
            problems += case.judge(out)
        else:
            problems += out
    except AssertionError as e:  # a setup step failed (perhaps because the server is gone)
        problems.append(f"setup failed: {e}")
    finally:
        stop.set()
        if sampler:
            sampler.join(2)
    if case.memory:
        peak = srv.peak_mib() if peak_reset else None
        seen = max(samples + ([peak] if peak else []) + ([srv.rss_mib()] if srv.alive() else []), default=None)
        if os.environ.get("STOW_HOSTILE_MEMLOG"):
            with open(os.environ["STOW_HOSTILE_MEMLOG"], "a") as f:
                f.write(f"{case.name}\tbefore {rss_before:.0f} MiB\tpeak {seen or 0:.0f} MiB\tafter {srv.rss_mib() or 0:.0f} MiB\n")
        if seen is not None and seen > MEMORY_BOUND_MIB:
            problems.append(f"memory: RSS before {rss_before:.0f} MiB, peak {seen:.0f} MiB (bound {MEMORY_BOUND_MIB} MiB), "
                            f"after {srv.rss_mib() or 0:.0f} MiB")
    problems += srv.intact_problems()
    if problems and not srv.alive():
        srv.dirty = "died"
    assert not problems, f"{case.name}: {sent}\n  - " + "\n  - ".join(problems)

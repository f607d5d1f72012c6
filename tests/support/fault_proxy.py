#!/usr/bin/env python3
"""An HTTP proxy of the storage tests' own, in front of a real server
(nginx, s3rver), that misbehaves on request: it answers 503, delays, drops
the connection in the middle of a body, sends a body shorter than its
range, or ignores Range. With --sigv4-secret it also checks each request's
AWS SigV4 signature (and --sigv4-token its session token) and with
--if-match each If-Match against the upstream's ETag, which s3rver 3.7.1
does not (its authentication.js leaves V4 unchecked; GET ignores If-Match).

  fault_proxy.py --upstream 127.0.0.1:PORT [--sigv4-key K --sigv4-secret S
                 [--sigv4-token T]] [--if-match]

Prints "PORT <n>" once it listens on 127.0.0.1 (a free port). Control:
  GET /__fault?status=503&count=N   the next N requests are answered 503
                  [&retry_after=S]  with Retry-After: S
  GET /__fault?drop=N               the next N send half their body, then close
  GET /__fault?delay_ms=M&count=N   the next N wait M ms before answering
  GET /__fault?short=N              the next N send one byte less than their
                                    Content-Range says (and a Content-Length
                                    that agrees with the bytes sent)
  GET /__fault?ignore_range=N       the next N are forwarded without Range
  GET /__stats                      {"requests": proxied so far, "auth": [...]}
Faults apply in that order of precedence; each counts down on its own.
"""
import argparse
import hashlib
import hmac
import http.client
import http.server
import json
import socketserver
import sys
import threading
import time
import urllib.parse

LOCK = threading.Lock()
FAULTS = {"status": 0, "status_code": 503, "retry_after": None, "drop": 0, "delay": 0,
          "delay_ms": 0, "short": 0, "ignore_range": 0}
STATS = {"requests": 0, "auth": []}
ARGS = None


def take(name):
    with LOCK:
        if FAULTS[name] > 0:
            FAULTS[name] -= 1
            return True
        return False


def s3_error(code):
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>%s</Code>'
            '<Message>refused by the test proxy</Message></Error>' % code).encode()


def sigv4_problem(method, raw_path, headers):
    """None when the request is signed with the expected key and secret;
    else the S3 error code to answer."""
    auth = headers.get("Authorization", "")
    if not auth.startswith("AWS4-HMAC-SHA256 "):
        return "AccessDenied"
    fields = {}
    for part in auth[len("AWS4-HMAC-SHA256 "):].split(","):
        k, _, v = part.strip().partition("=")
        fields[k] = v
    cred = fields.get("Credential", "").split("/")
    if len(cred) != 5 or cred[0] != ARGS.sigv4_key:
        return "InvalidAccessKeyId"
    date, region, service, term = cred[1:]
    signed = fields.get("SignedHeaders", "").split(";")
    for needed in ("host", "x-amz-date", "x-amz-content-sha256"):
        if needed not in signed:
            return "AccessDenied"
    if ARGS.sigv4_token is not None:
        if ("x-amz-security-token" not in signed or
                headers.get("x-amz-security-token") != ARGS.sigv4_token):
            return "InvalidToken"
    path, _, query = raw_path.partition("?")
    pairs = []
    for item in query.split("&") if query else []:
        k, _, v = item.partition("=")
        pairs.append((urllib.parse.quote(urllib.parse.unquote(k), safe="-_.~"),
                      urllib.parse.quote(urllib.parse.unquote(v), safe="-_.~")))
    canonical_query = "&".join("%s=%s" % kv for kv in sorted(pairs))
    canonical_headers = "".join(
        "%s:%s\n" % (h, " ".join(str(headers.get(h, "")).split())) for h in signed)
    canonical = "\n".join([method, path, canonical_query, canonical_headers,
                           ";".join(signed), headers.get("x-amz-content-sha256", "")])
    scope = "/".join([date, region, service, term])
    to_sign = "\n".join(["AWS4-HMAC-SHA256", headers.get("x-amz-date", ""), scope,
                         hashlib.sha256(canonical.encode()).hexdigest()])
    key = ("AWS4" + ARGS.sigv4_secret).encode()
    for part in (date, region, service, term):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    expected = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, fields.get("Signature", "")):
        return "SignatureDoesNotMatch"
    return None


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, body=b"", headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def control(self):
        url = urllib.parse.urlparse(self.path)
        q = {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}
        with LOCK:
            if url.path == "/__stats":
                body = json.dumps(STATS).encode()
            else:
                count = int(q.get("count", "1"))
                if "status" in q:
                    FAULTS["status"], FAULTS["status_code"] = count, int(q["status"])
                    FAULTS["retry_after"] = q.get("retry_after")
                if "delay_ms" in q:
                    FAULTS["delay"], FAULTS["delay_ms"] = count, int(q["delay_ms"])
                for name in ("drop", "short", "ignore_range"):
                    if name in q:
                        FAULTS[name] = int(q[name])
                body = b"ok"
        self.reply(200, body)

    def do_GET(self):
        if self.path.startswith("/__"):
            return self.control()
        with LOCK:
            STATS["requests"] += 1
            STATS["auth"].append(self.headers.get("Authorization", ""))
        if ARGS.sigv4_secret is not None:
            problem = sigv4_problem("GET", self.path, self.headers)
            if problem:
                return self.reply(403, s3_error(problem),
                                  [("Content-Type", "application/xml")])
        if take("status"):
            after = FAULTS["retry_after"]
            return self.reply(FAULTS["status_code"], b"injected",
                              [("Retry-After", after)] if after else [])
        if take("delay"):
            time.sleep(FAULTS["delay_ms"] / 1000.0)
        headers = {k: v for k, v in self.headers.items()
                   if k.lower() not in ("host", "connection")}
        if take("ignore_range"):
            headers.pop("Range", None)
        if_match = headers.pop("If-Match", None) if ARGS.if_match else None
        conn = http.client.HTTPConnection(ARGS.upstream, timeout=30)
        conn.request("GET", self.path, headers=headers)
        up = conn.getresponse()
        body = up.read()
        conn.close()
        if if_match is not None and up.getheader("ETag") not in (None, if_match):
            return self.reply(412, s3_error("PreconditionFailed"),
                              [("Content-Type", "application/xml")])
        out = [(k, v) for k, v in up.getheaders()
               if k.lower() not in ("content-length", "connection",
                                    "transfer-encoding", "keep-alive")]
        if take("drop"):
            self.send_response(up.status)
            for k, v in out:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[:len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        if up.status == 206 and len(body) > 0 and take("short"):
            body = body[:-1]
        self.reply(up.status, body, out)


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--upstream", required=True)
    p.add_argument("--sigv4-key")
    p.add_argument("--sigv4-secret")
    p.add_argument("--sigv4-token")
    p.add_argument("--if-match", action="store_true")
    ARGS = p.parse_args()
    server = Server(("127.0.0.1", 0), Handler)
    print("PORT %d" % server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())

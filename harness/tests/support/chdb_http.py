#!/usr/bin/env python3
"""chdb_http: ClickHouse 26's engine (chdb-core, in this process) behind the
part of ClickHouse's HTTP interface the `clickhouse` crate uses, on 127.0.0.1
only, so that the project's own programs (`clink run`'s sink, `clink
incident-reconcile`, the connectors' library) send their statements and
settings to a current ClickHouse unchanged. harness/tests/clickhouse26.rs
starts one per suite (the import costs most of a second) and reads its log.

chdb opens no port of its own: every statement runs through one
`chdb.session.Session`, which keeps its tables for the life of this process.
What is ours, and so not ClickHouse's behaviour under test, is the transport:

  * one POST is one statement: the `query` parameter, then the body (an
    INSERT's rows), or the body alone;
  * every URL parameter that ClickHouse's HTTP handler would take as a
    setting is given to the statement as a SETTINGS clause (spliced before
    an INSERT's FORMAT or VALUES, appended to anything else); the handler's
    own parameters (HTTP_ONLY) are not settings, and `wait_end_of_query` is
    what this server always does (the answer is sent whole, or an error);
  * an error is status 500 with X-ClickHouse-Exception-Code and the engine's
    message as the body, as the server sends one before any row;
  * there are no users: the user and password headers are not checked.

A statement typed into the session by a trial (`SET name = value`) stays in
force for later statements, as a user's profile would on a server.

usage: chdb_http.py --data DIR --log FILE
Prints "listening 127.0.0.1:PORT VERSION" once it answers; exits when its
standard input closes (its parent is gone) or on SIGTERM.
"""

import argparse
import http.server
import json
import os
import re
import sys
import threading
import time
import urllib.parse

# Parameters ClickHouse's HTTP handler reads itself; every other one is a setting.
HTTP_ONLY = {
    "query", "database", "default_format", "wait_end_of_query", "query_id",
    "session_id", "session_timeout", "session_check", "compress", "decompress",
    "user", "password", "quota_key", "buffer_size", "role", "stacktrace",
}


def literal(value):
    """A setting's URL value as a SETTINGS clause literal."""
    if re.fullmatch(r"-?[0-9]+(\.[0-9]+)?", value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def with_settings(statement, settings):
    """`statement` with `settings` in a SETTINGS clause where ClickHouse's
    grammar takes one: before an INSERT's FORMAT or VALUES, else at the end."""
    if not settings:
        return statement
    clause = " SETTINGS " + ", ".join(f"{name} = {literal(value)}" for name, value in settings)
    text = statement.rstrip().rstrip(";").rstrip()
    if re.match(r"\s*INSERT\b", text, re.IGNORECASE):
        format_at = re.search(r"\sFORMAT\s+\w+\s*$", text, re.IGNORECASE)
        values_at = re.search(r"\sVALUES\b", text, re.IGNORECASE)
        at = format_at or values_at
        if at:
            return text[: at.start()] + clause + text[at.start():]
    return text + clause


class Engine:
    def __init__(self, data, log):
        from chdb import session

        self.session = session.Session(data)
        self.lock = threading.Lock()
        self.log = open(log, "a", encoding="utf-8")
        self.served = 0
        self.version = self.session.query("SELECT version()", "TabSeparated").bytes().decode().strip()

    def run(self, statement, settings, data, fmt):
        text = with_settings(statement, settings)
        if data:
            text += "\n" + data
        started = time.monotonic()
        error = None
        with self.lock:
            self.served += 1
            n = self.served
            try:
                answer = self.session.query(text, fmt).bytes()
            except Exception as e:  # the engine's refusal, whatever its class
                answer, error = b"", str(e)
            entry = {
                "n": n,
                "statement": statement[:4000],
                "settings": settings,
                "data_bytes": len(data.encode("utf-8")) if data else 0,
                "ok": error is None,
                "error": error[:2000] if error else None,
                "ms": round((time.monotonic() - started) * 1000, 3),
            }
            self.log.write(json.dumps(entry) + "\n")
            self.log.flush()
        return answer, error


def read_body(handler):
    if handler.headers.get("Transfer-Encoding", "").lower() == "chunked":
        out = bytearray()
        while True:
            size = int(handler.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while handler.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                return bytes(out)
            out += handler.rfile.read(size)
            handler.rfile.readline()
    length = int(handler.headers.get("Content-Length") or 0)
    return handler.rfile.read(length) if length else b""


def handler_for(engine):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def answer(self, status, body, code=None):
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; charset=UTF-8")
            self.send_header("Content-Length", str(len(body)))
            if code is not None:
                self.send_header("X-ClickHouse-Exception-Code", str(code))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            self.answer(200, b"Ok.\n")

        def do_POST(self):
            params = urllib.parse.parse_qsl(urllib.parse.urlsplit(self.path).query, keep_blank_values=True)
            body = read_body(self).decode("utf-8")
            query = [v for k, v in params if k == "query"]
            if query:
                statement, data = query[0], body
            else:
                statement, data = body, ""
            fmt = next((v for k, v in params if k == "default_format"), "TabSeparated")
            settings = [[k, v] for k, v in params if k not in HTTP_ONLY]
            answer, error = engine.run(statement, settings, data, fmt)
            if error is None:
                self.answer(200, answer)
            else:
                code = re.search(r"Code: (\d+)", error)
                self.answer(500, (error.strip() + "\n").encode("utf-8"), code.group(1) if code else 1001)

    return Handler


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--log", required=True)
    args = parser.parse_args()
    engine = Engine(args.data, args.log)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler_for(engine))
    server.daemon_threads = True

    def parent_gone():
        sys.stdin.read()
        os._exit(0)

    threading.Thread(target=parent_gone, daemon=True).start()
    print(f"listening 127.0.0.1:{server.server_address[1]} {engine.version}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()

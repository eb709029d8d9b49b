"""A real webhook receiver on loopback for the alert tests: an ``http.server`` in a thread that answers each
POST as it is told (a status, after a delay) and keeps every request it got."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass(frozen=True)
class Got:
    headers: dict[str, str]
    body: bytes
    status: int  # what the receiver answered (or would have: a client that timed out never reads it)

    @property
    def json(self) -> dict:
        return json.loads(self.body)


class Receiver:
    """``answers``: (status, delay in seconds) for the next POSTs, in order; then 200 at once."""

    def __init__(self):
        self.answers: list[tuple[int, float]] = []
        self.got: list[Got] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with receiver._lock:
                    status, delay = receiver.answers.pop(0) if receiver.answers else (200, 0.0)
                    receiver.got.append(Got({k.lower(): v for k, v in self.headers.items()}, body, status))
                if delay:
                    time.sleep(delay)
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"ok")
                except OSError:
                    pass  # the client gave up waiting

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook/secret-path"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(5)

    @property
    def accepted(self) -> list[Got]:
        """The messages it took (answered 2xx), in order."""
        with self._lock:
            return [g for g in self.got if 200 <= g.status < 300]

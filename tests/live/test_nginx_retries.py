"""The cluster's nginx never sends a POST that reached one replica on to another.

Rasa's webhooks and the action server's `/webhook` are POSTs; a replica that stalls or dies after
reading one may already have acted on it, and only the bridge knows which calls are safe to repeat
(it repeats those itself, under their idempotency key). Here the real nginx of `devstack/engines.py`
balances over two replicas on loopback: one reads each request and hangs up without answering, the
other answers. A POST that reached the first must come back as an error and never reach the second;
a GET that reached the first is passed on to the second (so the retry itself is switched on, and it
is the method that decides).
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from devstack import engines
from devstack.services import HOST, free_port

FAIL_TIMEOUT = 3.5  # nginx_config's `fail_timeout=3s`, and a little more


class Replica(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, *, answers: bool) -> None:
        self.answers = answers
        self.seen: Counter[str] = Counter()
        super().__init__((HOST, 0), Handler)


class Handler(BaseHTTPRequestHandler):
    server: Replica

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.server.seen[self.command] += 1
        if not self.server.answers:
            self.close_connection = True
            self.connection.close()  # read, maybe acted on, never answered
            return
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    do_GET = do_POST = _handle

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def replicas() -> Iterator[tuple[Replica, Replica, str]]:
    hangs_up, answers = Replica(answers=False), Replica(answers=True)
    for replica in (hangs_up, answers):
        threading.Thread(target=replica.serve_forever, daemon=True).start()
    folder = Path(tempfile.mkdtemp(prefix="nginx-retries-"))
    port = free_port()
    upstreams = [f"{HOST}:{r.server_address[1]}" for r in (hangs_up, answers)]
    server = engines.nginx_server(folder, {"replicas": (port, upstreams)}).start()
    try:
        yield hangs_up, answers, f"http://{HOST}:{port}/webhook"
    finally:
        server.stop()
        for replica in (hangs_up, answers):
            replica.shutdown()
            replica.server_close()
        shutil.rmtree(folder, ignore_errors=True)


def send(url: str, method: str) -> int:
    data = b'{"sender": "a", "message": "yes"}' if method == "POST" else None
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def until_the_first_replica_sees(replica: Replica, url: str, method: str) -> list[int]:
    """Send until round robin has given the first replica one request; nginx may keep a replica that
    failed out of the rotation a little past its `fail_timeout`, so wait between tries (bounded)."""
    statuses: list[int] = []
    while replica.seen[method] == 0:
        assert len(statuses) < 20, f"round robin never reached the first replica with a {method}"
        if statuses:
            time.sleep(0.5)
        statuses.append(send(url, method))
    return statuses


def test_a_post_that_reached_a_replica_is_never_sent_to_another(
    replicas: tuple[Replica, Replica, str],
) -> None:
    hangs_up, answers, url = replicas
    statuses = until_the_first_replica_sees(hangs_up, url, "POST")
    assert hangs_up.seen["POST"] == 1
    assert statuses[-1] == 502, f"the POST the first replica hung up on was answered {statuses[-1]}"
    # Every POST reached exactly one replica: the second saw only the ones that were answered there.
    assert answers.seen["POST"] == statuses.count(200) == len(statuses) - 1

    time.sleep(FAIL_TIMEOUT)  # the first replica is back in the rotation
    statuses = until_the_first_replica_sees(hangs_up, url, "GET")
    assert statuses[-1] == 200, "a GET the first replica hung up on was not passed on"
    assert answers.seen["GET"] == len(statuses)

"""search/connections.py through the service: a deadline for each request, room made by closing the connection that
has waited longest for its client. Each test waits for the server's doing (a connection closed, an answer), never
for time to pass: the deadlines are short settings, not bounds of the test."""

import http.client
import json
import socket
import time

import pytest

from hangs import HANG_SECONDS
from search.index import Index
from search.service import Limits, Service
from search_data import clustered, write_npy
from services import Running

MAX_HEADERS = 100  # the HTTP library's: past them it answers 431, an answer, not a cut


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    folder = tmp_path_factory.mktemp("connections")
    write_npy(folder / "f.npy", clustered(50))
    return Index.build(folder / "f.npy", folder / "f.index")


def _trickler(port):
    """A connection that has sent a request's line and Host, and not the end of its headers."""
    connection = socket.create_connection(("127.0.0.1", port), timeout=HANG_SECONDS)
    connection.sendall(b"GET /api/index HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n" % port)
    return connection


def _read_end(connection, timeout=HANG_SECONDS):
    """b"" when the server closed `connection` (its end read, or a reset), the first byte of an answer, or None
    when `timeout` passed first."""
    connection.settimeout(timeout)
    try:
        return connection.recv(1)
    except ConnectionResetError:
        return b""
    except socket.timeout:
        return None


def _waiting(server, count):
    """Returns once `count` of `server`'s connections wait for their clients (the server's own record)."""
    deadline = time.monotonic() + HANG_SECONDS  # a guard against a hang only (tests/hangs.py)
    while len(server._waiting.since) != count:
        assert time.monotonic() < deadline, "%d connections wait, not %d" % (len(server._waiting.since), count)
        time.sleep(0.01)


def _answer(connection):
    """(status, headers, body) of the answer read from the raw socket `connection`."""
    response = http.client.HTTPResponse(connection)
    response.begin()
    return response.status, response.headers, response.read()


def test_a_trickling_client_is_cut_off_at_its_deadline_while_others_are_served(index):
    """A header line now and then keeps every read short: the deadline is the whole request's."""
    with Running(Service(index, limits=Limits(request_seconds=0.3))) as service:
        trickler, end = _trickler(service.port), None
        for line in range(MAX_HEADERS - 2):
            assert service.request("/api/index")[0] == 200  # served while it trickles
            try:
                trickler.sendall(b"X-Line-%d: 1\r\n" % line)
            except (BrokenPipeError, ConnectionResetError):
                end = b""
                break
            end = _read_end(trickler, 0.1)
            if end is not None:
                break
        trickler.close()
        assert end == b"", end  # cut off, unanswered
        assert service.request("/api/index")[0] == 200


def test_more_trickling_clients_than_places_shut_out_no_one(index):
    """Every place held by a client that sends nothing more: the one that has waited longest makes room, for
    another trickler as for a client that asks. No deadline here: the room is made by the closing."""
    with Running(Service(index, limits=Limits(connections=2, request_seconds=HANG_SECONDS))) as service:
        first = _trickler(service.port)
        _waiting(service.server, 1)
        second = _trickler(service.port)
        _waiting(service.server, 2)
        third = _trickler(service.port)
        assert _read_end(first) == b""  # the longest waiting, closed unanswered
        _waiting(service.server, 2)
        status, answer, headers = service.request("/api/index")
        assert status == 200 and answer["rows"] == 50
        assert _read_end(second) == b""
        _waiting(service.server, 1)  # the third still waits: it has waited least
        third.sendall(b"\r\n")  # its request ends: answered
        assert _answer(third)[0] == 200
        for connection in (first, second, third):
            connection.close()


def test_an_idle_kept_alive_connection_makes_room_for_a_new_one(index):
    with Running(Service(index, limits=Limits(connections=1))) as service:
        with socket.create_connection(("127.0.0.1", service.port), timeout=HANG_SECONDS) as idle:
            idle.sendall(b"GET /api/index HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % service.port)
            status, _, body = _answer(idle)
            assert status == 200 and json.loads(body)["rows"] == 50  # and kept open: its thread holds the place
            _waiting(service.server, 1)
            assert service.request("/api/index")[0] == 200
            assert _read_end(idle) == b""  # closed to make room


def test_a_body_that_does_not_arrive_within_the_deadline_is_408_and_its_connection_closed(index):
    with Running(Service(index, limits=Limits(request_seconds=0.2))) as service:
        with socket.create_connection(("127.0.0.1", service.port), timeout=HANG_SECONDS) as client:
            client.sendall(b"POST /api/search/vector HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Length: 100\r\n\r\n"
                           b'{"vec' % service.port)
            status, headers, body = _answer(client)
            assert _read_end(client) == b""
    assert status == 408 and headers["Connection"] == "close"
    assert json.loads(body) == {"status": 408, "error": "the request did not arrive within 0.2 s of its first byte"}
    assert headers["Content-Security-Policy"] == "default-src 'none'; frame-ancestors 'none'"

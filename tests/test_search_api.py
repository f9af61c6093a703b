"""search/api.py at the edges of HTTP, by a raw socket client: the HTTP library's own refusals carry the service's
headers and one line of JSON, a bad body is a 400, a refused body closes its connection. (The routes' answers:
tests/test_search_service.py.)"""

import http.client
import json
import socket

import pytest

from hangs import HANG_SECONDS
from search.api import SECURITY_HEADERS
from search.index import Index
from search.service import Service
from search_data import clustered, write_npy
from services import Running


@pytest.fixture(scope="module")
def running(tmp_path_factory):
    folder = tmp_path_factory.mktemp("api")
    write_npy(folder / "f.npy", clustered(50))
    with Running(Service(Index.build(folder / "f.npy", folder / "f.index"))) as service:
        yield service


def _raw(port, request):
    """(status, headers, body) of the answer to the bytes `request`, sent as they are; the connection must close
    after it. Each request here is read whole by the server before it answers (nothing left unread: no reset)."""
    with socket.create_connection(("127.0.0.1", port), timeout=HANG_SECONDS) as connection:
        connection.sendall(request)
        response = http.client.HTTPResponse(connection, method=request.split(b" ")[0].decode())
        response.begin()
        body = response.read()
        assert connection.recv(1) == b""  # closed
    return response.status, response.headers, body


def _one_line_with_the_headers(answer, status, *words, head=False):
    got, headers, body = answer
    assert got == status, (got, body)
    for name, value in SECURITY_HEADERS.items():
        assert headers[name] == value, (status, name, headers[name])
    assert headers["Content-Type"] == "application/json" and headers["Connection"] == "close"
    if head:  # an answer to HEAD has no body; its length is the error's
        assert body == b"" and int(headers["Content-Length"]) > 0
        return
    error = json.loads(body)
    assert error == {"status": status, "error": error["error"]} and "\n" not in error["error"], error
    assert all(word in error["error"] for word in words), error["error"]


def test_the_http_library_s_own_refusals_carry_the_headers_and_one_line_of_json(running):
    port, host = running.port, b"Host: 127.0.0.1:%d\r\n" % running.port
    _one_line_with_the_headers(_raw(port, b"GET /" + b"a" * 65532), 414, "Request-URI Too Long")  # 65,537 bytes
    _one_line_with_the_headers(_raw(port, b"GET /api/index HTTP/1.1\r\n" + b"X: " + b"a" * 65534), 431,
                               "65536")
    _one_line_with_the_headers(_raw(port, b"GET /api/index HTTP/1.1\r\n" + b"".join(
        b"X-%d: 1\r\n" % number for number in range(101))), 431, "more than 100 headers")
    _one_line_with_the_headers(_raw(port, b"HEAD /api/index HTTP/1.1\r\n" + host + b"\r\n"), 501, head=True)
    for method in (b"PUT", b"OPTIONS", b"DELETE"):
        _one_line_with_the_headers(_raw(port, method + b" /api/index HTTP/1.1\r\n" + host + b"\r\n"), 501,
                                   "Unsupported method ('%s')" % method.decode())
    _one_line_with_the_headers(_raw(port, b"GARBAGE\r\n"), 400, "Bad request syntax ('GARBAGE')")
    _one_line_with_the_headers(_raw(port, b"GET /api/index HTTP/1.x\r\n"), 400, "Bad request version")
    _one_line_with_the_headers(_raw(port, b"GET /api/index HTTP/2.0\r\n"), 505, "Invalid HTTP version (2.0)")
    # A request line without a version (HTTP/0.9's, whose answer has no status line and no headers): answered as
    # 1.0's, here without a Host.
    _one_line_with_the_headers(_raw(port, b"GET /api/index\r\n\r\n"), 421, "answers only to")


def test_a_deeply_nested_or_out_of_range_json_body_is_a_400(running):
    for body in (b"[" * 100_000, b'{"vector": ' + b"[" * 100_000, b'{"vector": [1' + b"0" * 400 + b"]}",
                 b'{"vector": {"a": 1}}', b"\xff\xfe"):
        status, answer, headers = running.request("/api/search/vector", body=body)
        assert status == 400 and answer == {"status": 400, "error": 'the body must be JSON {"vector": [numbers]}'}, (
            body[:20], status, answer)
        assert headers["X-Content-Type-Options"] == "nosniff"


def test_a_body_refused_unread_closes_its_connection_after_one_read_on_it(running):
    """Refused before its body is read, a request's body would be read as the next request: its connection
    closes, on the second request of a kept-alive connection as on the first."""
    vector = json.dumps({"vector": clustered(50)[3].tolist()}).encode()
    with socket.create_connection(("127.0.0.1", running.port), timeout=HANG_SECONDS) as connection:
        for path, status in (("/api/search/vector?k=2", 200), ("/api/search/vector?row=1", 400)):
            connection.sendall(b"POST %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Length: %d\r\n\r\n%s"
                               % (path.encode(), running.port, len(vector), vector))
            response = http.client.HTTPResponse(connection, method="POST")
            response.begin()
            response.read()
            assert response.status == status
        assert response.headers["Connection"] == "close"

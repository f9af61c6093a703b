"""The HTTP side of the search service (search/service.py): routes, parameters, bodies, JSON answers and errors.

    server = make_service(Service(index, embedder), port=0)       # 127.0.0.1, any free port; not started
    serve_index(service, port=8000, host="127.0.0.1")             # until SIGINT or SIGTERM (search/server.py)

`/` is the service's page (search/live_page/: index.html, live.js, scores.js, live.css, favicon.svg: files of the
package named by the fixed table PAGE_FILES, never by a path of the request), which uses the API; its
Content-Security-Policy lets it load only this origin's scripts, styles, images and answers. A route takes the
parameters it names and no other: `/api/image?path=/etc/passwd` is refused (400), so an image is only ever fetched
by its row. Any other answer carries a Content-Security-Policy that lets it load nothing, and `nosniff`: the HTTP
library's own refusals too (a request line or header too long, a method no route takes, a request line that
cannot be read), each one line of JSON. A request whose Host is not the server's own name is refused (421), as
search/server.py refuses it. Each request must arrive within `Limits.request_seconds` of its first byte, and when
every connection's place is taken, the one that has waited longest for its client is closed to make room
(search/connections.py). Each request answered is a line to the server's `log`, when given one (the command
line's stderr, unless --quiet).
"""

import http
import http.server
import io
import json
import sys
import threading
import time
import urllib.parse
from pathlib import Path

from parallel.messages import error_line
from search.connections import ClientReader, ClosedToMakeRoom, Waiting
from search.server import LOOPBACK, SECURITY_HEADERS, host_allowed, open_server, serve_until_stopped
from search.service import ApiError

# The page's: its own files and the API, from this origin only; no inline script or style, no other site.
# img-src blob: too, for the uploaded image shown above its results: an object URL of the file the user chose,
# made by the page's own script (a blob: URL names memory of this page, never another site).
PAGE_SECURITY_HEADERS = dict(SECURITY_HEADERS, **{
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob:; "
                               "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"})

PAGE_FOLDER = Path(__file__).resolve().parent / "live_page"
# The page's URL paths -> (its file in PAGE_FOLDER, content type): the only files served.
PAGE_FILES = {"/": ("index.html", "text/html; charset=utf-8"),
              "/live.js": ("live.js", "text/javascript; charset=utf-8"),
              "/scores.js": ("scores.js", "text/javascript; charset=utf-8"),
              "/live.css": ("live.css", "text/css; charset=utf-8"),
              "/favicon.svg": ("favicon.svg", "image/svg+xml")}


def _page_file(path):
    name, content_type = PAGE_FILES[path]
    return (PAGE_FOLDER / name).read_bytes(), content_type


# (method, path) -> (the Service's operation, the parameters it takes, whether it reads a body).
ROUTES = {
    ("GET", "/api/index"): (lambda service, query: service.describe(), (), False),
    ("GET", "/api/search"): (lambda service, query: _search(service, query),
                             ("text", "caption", "key", "k", "min_caption_score"), False),
    ("GET", "/api/neighbours"): (lambda service, query: service.by_row(_one(query, "row"), _k(service, query),
                                                                       _bound(service, query)),
                                 ("row", "k", "min_caption_score"), False),
    ("GET", "/api/duplicates"): (lambda service, query: service.duplicates(
        _one(query, "threshold"), keep_rule=_one(query, "keep") if "keep" in query else "first-key"),
                                 ("threshold", "keep"), False),
    ("GET", "/api/image"): (lambda service, query: service.image(_one(query, "row")), ("row",), False),
    ("POST", "/api/search/image"): (lambda service, query, body: service.by_image(body, _k(service, query),
                                                                                  _bound(service, query)),
                                    ("k", "min_caption_score"), True),
    ("POST", "/api/search/vector"): (lambda service, query, body: service.by_vector(body, _k(service, query),
                                                                                    _bound(service, query)),
                                     ("k", "min_caption_score"), True),
}
ROUTES.update({("GET", path): (lambda service, query, path=path: _page_file(path), (), False) for path in PAGE_FILES})


def _one(query, name):
    values = query.get(name)
    if not values:
        raise ApiError(400, "%s is missing" % name)
    if len(values) > 1:
        raise ApiError(400, "%s is given %d times; give it once" % (name, len(values)))
    return values[0]


def _k(service, query):
    return service.k(_one(query, "k")) if "k" in query else service.k("10")


def _bound(service, query):
    """The query's min_caption_score, checked (None when not given)."""
    return service.min_caption_score(_one(query, "min_caption_score") if "min_caption_score" in query else None)


def _search(service, query):
    if sum(name in query for name in ("text", "caption", "key")) != 1:
        raise ApiError(400, "give one of text (a sentence), caption (a sentence against the rows' captions) or key "
                            "(an indexed row's path)")
    if "key" in query:
        return service.by_key(_one(query, "key"), _k(service, query), _bound(service, query))
    name = "caption" if "caption" in query else "text"
    return service.by_text(_one(query, name), _k(service, query), name == "caption", _bound(service, query))


IDLE_SECONDS = 60  # a connection that sends nothing for this long is closed: its thread is not held forever
ROOM_SECONDS = 5  # how long a new connection waits for the place of one closed to make room for it


class _ApiHandler(http.server.BaseHTTPRequestHandler):
    """Answers the routes of ROUTES for one Service; JSON errors for everything else."""

    protocol_version = "HTTP/1.1"
    # A request line without a version (HTTP/0.9's) is answered as 1.0's is: 0.9's answer has no status line and
    # no headers, so it would carry none of SECURITY_HEADERS.
    default_request_version = "HTTP/1.0"
    timeout = IDLE_SECONDS
    # An answer leaves in one write, sent at once: unbuffered, its headers and body were two writes, and the body
    # waited for the client's delayed ACK of the headers (Nagle's algorithm): 40 ms on Linux's loopback.
    wbufsize = -1
    disable_nagle_algorithm = True

    def __init__(self, *args, service, hosts, **kwargs):
        self.service, self.hosts, self._body_read, self._page = service, hosts, False, False
        self._started = None
        super().__init__(*args, **kwargs)

    def setup(self):
        """Its requests are read through a ClientReader: a deadline for each (search/connections.py)."""
        super().setup()
        self.rfile.close()  # the socket's own reader, unused: closed, or the socket would stay open after the end
        self._reader = ClientReader(self.connection, self.server._waiting, self.service.limits.request_seconds,
                                    IDLE_SECONDS)
        self.rfile = io.BufferedReader(self._reader)

    def handle_one_request(self):
        self._reader.next_request()
        super().handle_one_request()

    def do_GET(self):  # noqa: N802 -- the base class's name
        self._handle("GET")

    def do_POST(self):  # noqa: N802
        self._handle("POST")

    def _handle(self, method):
        self._page = self._body_read = False
        self._started = time.perf_counter()
        try:
            self._send(200, *self._answer(method))
        except ApiError as error:
            self._error(error.status, str(error))
        except ClosedToMakeRoom:  # while its body arrived: nothing to answer, the connection is shut
            raise
        except ValueError as error:  # SearchError, a query the index cannot take: the request's
            self._error(400, error_line(error))
        except Exception as error:  # noqa: BLE001 -- a disk, a device: one line, never a traceback
            self._error(500, "%s: %s" % (type(error).__name__, error_line(error)))

    def _answer(self, method):
        if not host_allowed(self):
            self.close_connection = True
            raise ApiError(421, "this server answers only to %s" % sorted(self.hosts)[0])
        url = urllib.parse.urlsplit(self.path)
        route = ROUTES.get((method, url.path))
        if route is None:
            allowed = [other for other, path in ROUTES if path == url.path]
            raise ApiError(405, "%s takes %s" % (url.path, " or ".join(allowed))) if allowed else ApiError(
                404, "no such endpoint: %s (see /api/index)" % url.path[:200])
        operation, names, has_body = route
        self._page = url.path in PAGE_FILES
        try:
            query = urllib.parse.parse_qs(url.query, keep_blank_values=True, strict_parsing=bool(url.query),
                                          max_num_fields=16)
        except ValueError:
            raise ApiError(400, "the query string cannot be read") from None
        unknown = sorted(set(query) - set(names))
        if unknown:
            raise ApiError(400, "%s takes %s; not %s" % (url.path, ", ".join(names) or "no parameter",
                                                          ", ".join(repr(name[:100]) for name in unknown)))
        if not has_body:
            answer = operation(self.service, query)
            return (answer, "application/json") if isinstance(answer, dict) else answer
        return operation(self.service, query, self._body()), "application/json"

    def _body(self):
        """The request's body, read only when its declared length is within the limit."""
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self.close_connection = True
            raise ApiError(411, "the request must give its Content-Length") from None
        if not 0 <= length <= self.service.limits.max_upload_bytes:
            self.close_connection = True  # its body is left unread
            raise ApiError(413, "the body has %d bytes, more than %d" % (length, self.service.limits.max_upload_bytes))
        self._body_read = True
        try:
            return self.rfile.read(length)
        except TimeoutError:
            self.close_connection = True
            raise ApiError(408, "the request did not arrive within %g s of its first byte"
                           % self.service.limits.request_seconds) from None

    def send_error(self, code, message=None, explain=None):
        """The HTTP library's own refusals, before a route is asked (a request line too long, 414; a header too
        long or too many, 431; a method no route takes, HEAD, PUT, OPTIONS, 501; a request line that cannot be
        read, 400; HTTP/2, 505), as every other error: one line of JSON with SECURITY_HEADERS, the connection
        closed."""
        self.close_connection, self._page = True, False
        self._error(code, explain or message or http.HTTPStatus(code).phrase)

    def _error(self, status, message):
        self._send(status, {"status": status, "error": " ".join(str(message).split())}, "application/json")

    def _send(self, status, answer, content_type):
        body = json.dumps(answer).encode("utf-8") if content_type == "application/json" else answer
        if self.command == "POST" and not self._body_read:  # refused before its body was read: the rest unread
            self.close_connection = True
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (PAGE_SECURITY_HEADERS if self._page and status == 200 else SECURITY_HEADERS).items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        sent = body if self.command != "HEAD" else b""  # an answer to HEAD has no body (its refusal, 501)
        self.wfile.write(sent)
        self._log(status, len(sent), self._request())

    def _log(self, status, size, request):
        """One line a request to the server's `log` (make_service), if any: client, `request` (method and path),
        status, bytes, milliseconds."""
        started, self._started = self._started, None
        if self.server.log is None:
            return
        try:
            took = "-" if started is None else "%.1f" % (1000 * (time.perf_counter() - started))
            self.server.log("%s %s %d %s bytes %s ms" % (self.client_address[0], request, status, size, took))
        except (OSError, ValueError):  # stderr closed: the answer is sent all the same, and only once
            pass

    def _request(self):
        """The request in the log: its method and path, or the line as it came when it could not be read (a
        refusal of http.server's own, answered by send_error before the request has a method and a path)."""
        if self.command and hasattr(self, "path"):
            return "%s %s" % (self.command, logged_path(self.path))
        return logged_path(getattr(self, "requestline", "")) or "-"

    def log_message(self, format, *args):  # noqa: A002 -- the base class's name: its lines are not ours
        pass


_UNPRINTABLE = {code: "\\x%02x" % code for code in list(range(32)) + list(range(127, 160))}


def logged_path(path, limit=200):
    """A request's path as its log line shows it: a sentence (`text=`, `caption=`) as its length only, characters
    that could move a terminal's cursor escaped, at most `limit` characters."""
    path, _, query = path.partition("?")
    fields = []
    for field in query.split("&") if query else ():
        name, _, value = field.partition("=")
        fields.append("%s=(%d characters)" % (name, len(urllib.parse.unquote_plus(value)))
                      if name in ("text", "caption") and "=" in field else field)
    shown = (path + ("?" + "&".join(fields) if fields else "")).translate(_UNPRINTABLE)
    return shown if len(shown) <= limit else shown[:limit] + "..."


_BUSY_BODY = json.dumps({"status": 503, "error": "busy: too many connections at once; try again"}).encode("utf-8")
BUSY = ("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s"
        "Connection: close\r\n\r\n" % (len(_BUSY_BODY), "".join("%s: %s\r\n" % header for header in
                                                                 SECURITY_HEADERS.items()))).encode() + _BUSY_BODY


class _BoundedServer(http.server.ThreadingHTTPServer):
    """A thread a connection, at most as many at once as its semaphore `_open` (set by make_service) allows: for
    one more, the connection that has waited longest for its client (`_waiting`) is closed to make room; when
    none waits (each is answered), it is answered 503 and closed, unread. `log`: called with a line a request, or
    None (make_service)."""

    log = None

    def process_request(self, request, client_address):
        if not self._open.acquire(blocking=False) and not (
                self._waiting.close_longest() and self._open.acquire(timeout=ROOM_SECONDS)):
            try:
                request.sendall(BUSY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except RuntimeError:  # no thread could be started: its place is free again. Anything else (a stop signal
            self._open.release()  # while the thread starts) leaves it to the thread, which releases it as it ends
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._open.release()

    def handle_error(self, request, client_address):
        """A client that went away while it was answered (a reset, a broken pipe), or a connection closed to make
        room for another, is no error of the service's: nothing is printed. Anything else is printed as
        socketserver prints it."""
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)):
            return
        super().handle_error(request, client_address)


def make_service(service, port=0, host=LOOPBACK, log=None):
    """An HTTP server of `service`'s API on (host, port), not started: a thread a connection, at most
    `service.limits.connections` of them; `log`, if given, is called with one line a request answered
    (`127.0.0.1 GET /api/neighbours?row=3&k=10 200 1234 bytes 2.5 ms`).

    Raises:
      ValueError: the port is taken or not one this user may open.
    """
    server = open_server(_ApiHandler, port, host=host, server_class=_BoundedServer, service=service)
    server._open, server.log = threading.BoundedSemaphore(service.limits.connections), log
    server._waiting = Waiting()
    return server


def reachable_warning(host):
    """The warning to print for a service on `host`, or None on loopback."""
    if host in (LOOPBACK, "localhost", "::1"):
        return None
    return ("warning: --host %s: the service is reachable by anyone who can reach this machine on that address; "
            "its index's keys and images are theirs to read" % host)


def serve_index(service, port=8000, host=LOOPBACK, announce=print, log=None):
    """Serves `service` at http://host:port/api/ until SIGINT (Ctrl-C) or SIGTERM, as search/server.py's serve:
    `announce` is given where, then what it answers (`Service.answers`); `log` a line a request (make_service)."""
    warning = reachable_warning(host)
    if warning:
        announce(warning)
    with make_service(service, port, host, log) as server:
        def started(stop):
            announce("serving the index %s at http://%s:%d/ (its page; the API: /api/index) (%s to stop)"
                     % (service.index.folder, host, server.server_address[1], stop))
            announce(service.answers())
        serve_until_stopped(server, started)

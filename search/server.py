"""The server of a page on 127.0.0.1: its files only, to its own address only, until SIGINT or SIGTERM.

    serve("page/", port=8000)        # http://127.0.0.1:8000/ until Ctrl-C or SIGTERM
    server = make_server("page/", 0) # the server, not started (tests; any free port)

What the service (search/service.py) shares: `open_server` (a threading server on an address, the Host names it
answers to), `host_allowed` (the check against DNS rebinding), `serve_until_stopped` (the signal policy),
SECURITY_HEADERS (what its errors carry, and every answer of the service's) and `open_inside` (a file opened
only when it is inside a folder: a link swapped in the meantime is refused, never followed).
"""

import http
import http.server
import json
import os
import signal
import stat
import threading
from pathlib import Path

SECURITY_HEADERS = {"Content-Security-Policy": "default-src 'none'; frame-ancestors 'none'",
                    "X-Content-Type-Options": "nosniff", "Cache-Control": "no-store",
                    "Referrer-Policy": "no-referrer"}


class _PageHandler(http.server.SimpleHTTPRequestHandler):
    """Serves the files under the page's folder, and nothing else.

    No folder listings; no file whose real path (symbolic links followed) is outside the folder; no
    request whose Host is not the address served (127.0.0.1:<port>, or localhost:<port>): a web page on
    another site that a DNS name re-pointed at 127.0.0.1 (DNS rebinding) sends its own name as Host.
    """

    # A request line without a version (HTTP/0.9's) is answered as 1.0's is: 0.9's answer has no status line
    # and no headers, so it would carry no nosniff.
    default_request_version = "HTTP/1.0"

    def __init__(self, *args, root, hosts, **kwargs):
        self.root, self.hosts = root, hosts
        super().__init__(*args, directory=str(root), **kwargs)

    def send_head(self):
        """The headers of the file asked for, sent; the file opened (read by do_GET), or None when refused."""
        if not host_allowed(self):
            self.send_error(421, "Misdirected Request", "this server answers only to %s" % sorted(self.hosts)[0])
            return None
        path = self.translate_path(self.path)
        if os.path.isdir(path):
            path = os.path.join(path, "index.html")
        try:  # the file opened is the one checked: a link swapped in between is refused, never followed
            descriptor, opened = open_inside(path, self.root)
        except (OSError, ValueError):
            self.send_error(404, "File not found")
            return None
        self.send_response(200)
        self.send_header("Content-Type", self.guess_type(path))
        self.send_header("Content-Length", str(opened.st_size))
        self.send_header("Last-Modified", self.date_time_string(opened.st_mtime))
        self.end_headers()
        return os.fdopen(descriptor, "rb")

    def list_directory(self, path):  # a folder without index.html (send_head refuses it first; kept shut here too)
        self.send_error(404, "File not found")
        return None

    def send_error(self, code, message=None, explain=None):
        """Every refusal, the HTTP library's own too (a request line or header too long, 414 and 431; a method
        other than GET and HEAD, 501; a request line that cannot be read, 400; HTTP/2, 505), as the service's:
        {"status": N, "error": "one line"} with SECURITY_HEADERS, and the connection closed."""
        text = explain or message or http.HTTPStatus(code).phrase
        body = json.dumps({"status": code, "error": " ".join(text.split())}).encode("utf-8")
        self.close_connection = True
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in SECURITY_HEADERS.items():
            self.send_header(name, value)
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, format, *args):  # noqa: A002 -- the base class's name
        pass


LOOPBACK = "127.0.0.1"
_OUTPUTS = (".csv", ".parquet", ".npy", ".shards")  # run_inference's outputs, and a kept <output>.shards/ folder


def inside(path, folder):
    """Whether the absolute path `path` is `folder` or under it (both normalised; no link is followed)."""
    return os.path.commonpath([path, folder]) == folder


def same_file(first, second):
    """Whether two os.stat_results are of one file (its device and inode)."""
    return (first.st_dev, first.st_ino) == (second.st_dev, second.st_ino)


def open_inside(path, folder):
    """(a descriptor, its os.fstat) of the regular file at `path`, when its real path (links followed) lies inside
    `folder`'s real path (None: anywhere).

    It is opened by that real path, never following a last link and never waiting (a FIFO is not opened), and
    must be the file the real path named when it was checked (device and inode): a link swapped in between is
    refused, never followed, so no file outside `folder` is ever read.

    Raises:
      ValueError: outside `folder`, not a regular file, or replaced while it was opened. OSError: no such file,
        or it cannot be read.
    """
    real = os.path.realpath(path)
    if folder is not None and not inside(real, os.path.realpath(folder)):
        raise ValueError("its real path is outside the folder served (a link to another file?)")
    named = os.stat(real)
    if not stat.S_ISREG(named.st_mode):
        raise ValueError("it is not a regular file")
    descriptor = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        opened = os.fstat(descriptor)
        if not same_file(opened, named):
            raise ValueError("it was replaced while it was opened")
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor, opened


def host_allowed(handler):
    """Whether the request `handler` (a BaseHTTPRequestHandler with `hosts`, the names its server answers to)
    names its server in its Host header: a web page on another site that a DNS name re-pointed at this address
    (DNS rebinding) sends its own name, and is refused."""
    return handler.headers.get("Host", "").lower() in handler.hosts


def open_server(handler_class, port, host=LOOPBACK, server_class=http.server.ThreadingHTTPServer,
                **handler_arguments):
    """A `server_class` (a ThreadingHTTPServer) on (host, port) whose requests `handler_class(..., hosts=...,
    **handler_arguments)` answers; `hosts` (the Host headers `host_allowed` lets in) is filled once the port is
    known: host:port, 127.0.0.1:port and localhost:port (and the names alone on port 80).

    Raises:
      ValueError: the port is taken or not one this user may open, naming it.
    """
    hosts = set()

    def handler(*args, **kwargs):
        return handler_class(*args, hosts=hosts, **handler_arguments, **kwargs)

    try:
        server = server_class((host, int(port)), handler)
    except OSError as error:  # in use, or below 1024 without the right
        raise ValueError("port=%s on %s cannot be opened (%s): choose another with --port (0: any free "
                         "port)" % (port, host, error.strerror or error)) from None
    bound = server.server_address[1]
    names = {host.lower(), LOOPBACK, "localhost"}
    hosts.update("%s:%d" % (name, bound) for name in names)
    if bound == 80:
        hosts.update(names)
    return server


def make_server(folder, port=0):
    """An HTTP server of `folder` on 127.0.0.1 only (loopback: nothing on the network can reach it),
    serving its files only (`_PageHandler`).

    Args:
      folder: the report's folder.
      port: the port, 0 for any free one (`server.server_address[1]` says which).

    Raises:
      ValueError: `folder` has no index.html (an output, not yet indexed, says so), or the port is taken or not
        one this user may open.
    """
    folder = Path(folder)
    if not (folder / "index.html").is_file():
        if folder.exists() and folder.name.lower().endswith(_OUTPUTS):
            raise ValueError("%s is an output, not an index: index it (search-features index %s), then serve its "
                             "index (search-features serve %s.index)" % (folder, folder, folder))
        raise ValueError("%s has no index.html: write the page first (search-features page)" % folder)
    return open_server(_PageHandler, port, root=Path(os.path.realpath(folder)))


class _Stop(BaseException):
    """Raised by the signal handler of `serve`: out of serve_forever, the server closed. A BaseException,
    as KeyboardInterrupt is: socketserver catches Exception around a request it accepts, and would
    print this one and serve on."""


def _stop(signum, frame):
    raise _Stop(signal.Signals(signum).name)


def serve(folder, port=8000, announce=print):
    """Serves the report in `folder` at http://127.0.0.1:<port>/ until SIGINT (Ctrl-C) or SIGTERM.

    Either stops it cleanly and returns (the engine's policy, docs/failure-behaviour.md: SIGTERM always;
    SIGINT unless the process was started with it ignored, as a shell's background job or a batch
    system starts it, where it stays ignored). From a thread other than the main one, where handlers
    cannot be set, signals keep their usual effect.
    """
    with make_server(folder, port) as server:
        serve_until_stopped(server, lambda stop: announce("serving %s at http://127.0.0.1:%d/ (%s to stop)" % (
            folder, server.server_address[1], stop)))


def serve_until_stopped(server, announce):
    """Runs `server` until SIGINT or SIGTERM (as `serve` says), after `announce(how to stop it)` ("Ctrl-C", or
    "kill PID" when SIGINT stays ignored)."""
    from parallel.signals import STOP_SIGNALS, handled
    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous = {signum: signal.signal(signum, _stop) for signum in STOP_SIGNALS if handled(signum)}
    try:
        announce("Ctrl-C" if signal.SIGINT in previous else "kill %d" % os.getpid())
        server.serve_forever()
    except (_Stop, KeyboardInterrupt):
        pass
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)

"""The service's connections as it reads them: a deadline for each request, and room made for a new connection
by closing the one that has waited longest for its client.

    waiting = Waiting()                                   # the server's: who is waiting for its client, since when
    reader = ClientReader(socket, waiting, request_seconds=10, idle_seconds=60)
    rfile = io.BufferedReader(reader)                     # the handler reads its requests through it
    reader.next_request()                                 # before each request
    waiting.close_longest()                               # every place taken: one waiting is closed

A thread serves each connection, and the places are few (search.service.Limits.connections), so a client must
not hold one by sending slowly. A timeout on each read would not do: a client sending one header line every
30 s never lets a read reach 60 s. So each request has a deadline: from its first byte, its line, headers and
body must arrive within `request_seconds`; each read waits at most what is left of it (TimeoutError past it).
Before its first byte, a connection may wait `idle_seconds` (a browser's kept-alive connection between
requests).

A thread waiting in a read is doing nothing for the service: when every place is taken, the connection whose
current wait began first (an idle kept-alive one, or one whose request is still arriving, a trickling client's)
is shut down to make room for the new one (`Waiting.close_longest`); its read ends at once with
ClosedToMakeRoom, and its thread with it. A connection whose request is being answered is never closed so.
"""

import io
import socket
import threading
import time


class ClosedToMakeRoom(ConnectionAbortedError):
    """The connection was closed while it waited for its client, to make room for another connection."""


class Waiting:
    """The connections whose threads wait for their clients' bytes, each with when its current wait began."""

    def __init__(self):
        self.lock = threading.Lock()
        self.since = {}  # ClientReader -> time.monotonic() its current request's wait began

    def close_longest(self):
        """Shuts down the connection that has waited longest (its read ends, and its thread with it).

        Returns:
          whether there was one.
        """
        with self.lock:
            if not self.since:
                return False
            reader = min(self.since, key=self.since.get)
            del self.since[reader]
            reader.closed_to_make_room = True
        try:
            reader.connection.shutdown(socket.SHUT_RDWR)
        except OSError:  # already gone
            pass
        return True


class ClientReader(io.RawIOBase):
    """A connection's socket read with a deadline for each request (a raw stream, for an io.BufferedReader).

    Args:
      connection: the socket; its timeout is set before each read, and left at `idle_seconds` for the writes.
      waiting: the server's Waiting.
      request_seconds: a request's line, headers and body must arrive within this, from its first byte.
      idle_seconds: how long the first byte of a request is waited for.
    """

    def __init__(self, connection, waiting, request_seconds, idle_seconds):
        super().__init__()
        self.connection, self.waiting = connection, waiting
        self.request_seconds, self.idle_seconds = request_seconds, idle_seconds
        self.closed_to_make_room = False
        self.next_request()

    def next_request(self):
        """A new request is waited for: it has `idle_seconds` to begin, then `request_seconds` from its first byte."""
        self.began, self.deadline = time.monotonic(), None

    def readable(self):
        return True

    def readinto(self, buffer):
        timeout = self.idle_seconds if self.deadline is None else self.deadline - time.monotonic()
        if timeout <= 0:
            raise TimeoutError("the request did not arrive within %g s of its first byte" % self.request_seconds)
        with self.waiting.lock:
            if self.closed_to_make_room:
                raise ClosedToMakeRoom("closed to make room for another connection")
            self.waiting.since[self] = self.began
        try:
            self.connection.settimeout(timeout)
            count = self.connection.recv_into(buffer)
        finally:
            with self.waiting.lock:
                self.waiting.since.pop(self, None)
                closed = self.closed_to_make_room
            self.connection.settimeout(self.idle_seconds)  # the answer's writes
        if closed:  # what arrived, if anything, is not served: its connection is shut
            raise ClosedToMakeRoom("closed to make room for another connection")
        if count and self.deadline is None:
            self.deadline = time.monotonic() + self.request_seconds
        return count

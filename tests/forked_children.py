"""Real child processes without paying their imports each time: forked from one process that imported them once.

    zygote = Zygote(["tensorflow", "job_child"])      # a process that imports these once (TensorFlow: 3 s of CPU)
    child = zygote.spawn([script, *arguments], stderr=subprocess.PIPE, env=...)   # a Popen-like process
    child = zygote.spawn(..., sigint=as_exec_leaves_sigint())    # the signal handlers a fresh `python` has
    child.send_signal(signal.SIGKILL); child.wait(); child.communicate(); child.returncode
    zygote.close()

For the tests that kill, stop or signal a job in a process of its own: each child is a real process (its own pid,
its own signal dispositions, killed for real), forked from the zygote before anything of it ran; it runs `script`
as `python script arguments...` would (runpy, `__main__`), or code as `python -c CODE arguments...` would, with its
stdin, stdout and stderr the pipes asked for, `env` its whole environment, and its exit an interpreter's as a program
sees it (its threads joined, its atexit handlers and weakref finalizers run, its output flushed, its exit status;
an uncaught KeyboardInterrupt ends it by SIGINT), without the teardown of every module TensorFlow brings, which costs
a forked child a second of CPU (its collector touching, and copying, every page it shares). The zygote never
creates a session, a store client or a thread before it forks: what it imported holds no state a child could inherit
half-made. A child's CPU counts where a child's does: the zygote waits for it, the test process for the zygote.

    python tests/forked_children.py SOCKET_FD MODULE...     the zygote itself (Zygote starts it)
"""

import json
import os
import socket
import subprocess
import sys
import threading

TESTS = os.path.dirname(os.path.abspath(__file__))
REPOSITORY = os.path.dirname(TESTS)
_MESSAGE_BYTES = 1 << 16
# What tests/job_child.py imports before its job runs: a zygote of these makes a job child cost its job alone.
# `parallel` first, as in the children: TensorFlow is then imported as the library imports it (without Keras,
# parallel/native_log.py).
JOB_CHILD_MODULES = ("parallel", "tensorflow", "numpy", "PIL.Image", "pyarrow.parquet", "s3fs", "aiobotocore.session",
                     "job_child", "parallel.engine", "parallel.jobs.runner", "parallel.jobs.distributed",
                     "parallel.output", "parallel.signals", "parallel.inputs.sources", "parallel.inputs.reader")


class Zygote:
    """A process that imported `modules` once and forks a child for each spawn()."""

    def __init__(self, modules):
        ours, theirs = socket.socketpair()
        self._socket = ours
        self._lock = threading.Lock()
        self.process = subprocess.Popen([sys.executable, __file__, str(theirs.fileno()), *modules],
                                        pass_fds=[theirs.fileno()], cwd=REPOSITORY)
        theirs.close()
        ready = self._ask({"ask": "ready"})
        if ready != {"ready": True}:
            raise RuntimeError("the zygote did not start: %r" % (ready,))

    def _ask(self, message, fds=()):
        with self._lock:
            socket.send_fds(self._socket, [json.dumps(message).encode()], list(fds))
            data = self._socket.recv(_MESSAGE_BYTES)
        if not data:
            raise RuntimeError("the zygote ended (exit status %s)" % self.process.wait())
        return json.loads(data)

    def spawn(self, argv, env=None, cwd=None, stdin=None, stdout=None, stderr=None, text=True, sigint=None):
        """A child running argv ([script, *arguments] or ["-c", code, *arguments]): a ForkedChild.

        stdin, stdout, stderr: subprocess.PIPE for a pipe to this process, subprocess.DEVNULL, or None for this
        process's own. env: the child's whole environment (None: this process's). cwd: its working folder.
        sigint: None, the signal handlers the zygote has; "default" or "ignored", the ones a fresh `python` has when
        started with SIGINT at its default or ignored (as_exec_leaves_sigint(): as a child of this process would):
        SIGINT raising KeyboardInterrupt or ignored, SIGTERM at its default, SIGPIPE and SIGXFSZ ignored.
        """
        if sigint not in (None, "default", "ignored"):
            raise ValueError("sigint takes None, 'default' or 'ignored', got %r" % (sigint,))
        ends, fds = {}, []
        for number, choice in enumerate((stdin, stdout, stderr)):
            if choice == subprocess.PIPE:
                read, write = os.pipe()
                ends[number] = (write, read) if number == 0 else (read, write)  # (ours, the child's)
                fds.append(ends[number][1])
            elif choice == subprocess.DEVNULL:
                fds.append(os.open(os.devnull, os.O_RDWR))
                ends[number] = (None, fds[-1])
            elif choice is None:
                fds.append(number)
            else:
                raise ValueError("stdin, stdout and stderr take PIPE, DEVNULL or None, got %r" % (choice,))
        try:
            answer = self._ask({"ask": "spawn", "argv": [str(part) for part in argv],
                                "env": dict(os.environ if env is None else env),
                                "cwd": str(cwd or os.getcwd()), "sigint": sigint}, fds)
        finally:
            for ours, theirs in ends.values():
                os.close(theirs)
        files = [None, None, None]
        for number, (ours, _) in ends.items():
            if ours is not None:
                mode = "w" if number == 0 else "r"
                files[number] = open(ours, mode, encoding="utf-8" if text else None) if text else \
                    open(ours, mode + "b", buffering=0 if number == 0 else -1)
        return ForkedChild(self, answer["pid"], *files)

    def close(self):
        """Ends the zygote (its children must have been waited for)."""
        self._socket.close()
        self.process.wait()


class ForkedChild:
    """What subprocess.Popen gives, for a child of a Zygote: pid, stdin, stdout, stderr, returncode, poll(),
    wait(), send_signal(), communicate()."""

    def __init__(self, zygote, pid, stdin, stdout, stderr):
        self._zygote, self.pid = zygote, pid
        self.stdin, self.stdout, self.stderr = stdin, stdout, stderr
        self.returncode = None

    def _status(self, block):
        if self.returncode is None:
            self.returncode = self._zygote._ask({"ask": "wait", "pid": self.pid, "block": block})["status"]
        return self.returncode

    def poll(self):
        return self._status(block=False)

    def wait(self, timeout=None):
        """The exit status, as Popen's (-N: killed by signal N); `timeout` is not enforced (a hang guard only)."""
        return self._status(block=True)

    def send_signal(self, number):
        if self.returncode is None:  # not reaped yet: the pid is still this child's, a zombie's at worst
            os.kill(self.pid, number)

    def kill(self):
        import signal
        self.send_signal(signal.SIGKILL)

    def communicate(self, input=None, timeout=None):
        """(stdout, stderr) read to their end, input written to stdin first; then the child waited for."""
        if self.stdin is not None:
            if input:
                self.stdin.write(input)
            self.stdin.close()
        read = {}

        def drain(name, stream):
            read[name] = stream.read()
            stream.close()

        threads = [threading.Thread(target=drain, args=(name, stream)) for name, stream in
                   (("stdout", self.stdout), ("stderr", self.stderr)) if stream is not None and not stream.closed]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.wait()
        return read.get("stdout"), read.get("stderr")


def as_exec_leaves_sigint():
    """The SIGINT a child exec'd from this process now starts with: "ignored" if ignored here, else "default" (a
    handled signal is reset to its default by exec; Python then makes it raise KeyboardInterrupt)."""
    import signal
    return "ignored" if signal.getsignal(signal.SIGINT) == signal.SIG_IGN else "default"


def zygote_fixture(modules, scope="module"):
    """A pytest fixture: a Zygote of `modules` for the tests of a module, closed after them."""
    import pytest

    @pytest.fixture(scope=scope)
    def zygote():
        made = Zygote(modules)
        try:
            yield made
        finally:
            made.close()
    return zygote


# --- the zygote -------------------------------------------------------------------------------------------------


def _import_quietly(modules):
    """`modules`, imported with descriptor 2 on /dev/null (what TensorFlow's libraries print while they load)."""
    import importlib
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        for module in modules:
            importlib.import_module(module)
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def _run_child(request, fds, commands):
    """In the forked child: its descriptors, environment and folder, then the script; never returns."""
    import traceback
    try:
        _run_script(request, fds, commands)
        status = 0
    except SystemExit as exit:  # as the interpreter reads sys.exit's argument
        status = exit.code
        if status is None:
            status = 0
        elif not isinstance(status, int):
            print(status, file=sys.stderr)
            status = 1
    except KeyboardInterrupt:
        traceback.print_exc()
        status = "SIGINT"
    except BaseException:
        traceback.print_exc()
        status = 1
    _exit(status)


def _exit(status):
    """What an interpreter's exit does that a program can see, then the process ends with `status` ("SIGINT": by
    that signal, as Python ends on an uncaught KeyboardInterrupt)."""
    import atexit
    import signal
    import threading
    threading._shutdown()  # the non-daemon threads joined, as at any interpreter's exit
    atexit._run_exitfuncs()  # weakref.finalize's too
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    if status == "SIGINT":
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(status & 0xFF)


def _fresh_signals(sigint):
    """The handlers a fresh interpreter starts with, SIGINT's as it inherits it (`sigint`: "default" or "ignored")."""
    import signal
    signal.signal(signal.SIGINT, signal.default_int_handler if sigint == "default" else signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    for number in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(number, signal.SIG_IGN)


def _run_script(request, fds, commands):
    import runpy
    commands.close()
    if request.get("sigint") is not None:
        _fresh_signals(request["sigint"])
    for number, fd in enumerate(fds):
        if fd != number:
            os.dup2(fd, number)
    for fd in set(fds):
        if fd > 2:
            os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    argv = request["argv"]
    if argv[0] == "-c":  # sys.path and sys.argv as `python -c CODE ...` has them
        sys.path[:] = ["", *_PATH]
        sys.argv = ["-c", *argv[2:]]
        exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
    else:  # and as `python SCRIPT ...`
        sys.path[:] = [os.path.dirname(os.path.abspath(argv[0])), *_PATH]
        sys.argv = list(argv)
        runpy.run_path(argv[0], run_name="__main__")


def _serve(commands):
    while True:
        data, fds, _, _ = socket.recv_fds(commands, _MESSAGE_BYTES, 3)
        if not data:
            return
        request = json.loads(data)
        if request["ask"] == "ready":
            answer = {"ready": True}
        elif request["ask"] == "spawn":
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _run_child(request, fds, commands)
            for fd in fds:
                if fd > 2:
                    os.close(fd)
            answer = {"pid": pid}
        else:
            pid, status = os.waitpid(request["pid"], 0 if request["block"] else os.WNOHANG)
            answer = {"status": os.waitstatus_to_exitcode(status) if pid else None}
        commands.send(json.dumps(answer).encode())


if __name__ == "__main__":
    _PATH = sys.path[1:]  # what follows a script's own folder in a child's (PYTHONPATH, the installed packages)
    sys.path[:1] = [REPOSITORY, TESTS]
    _import_quietly(sys.argv[2:])
    _serve(socket.socket(fileno=int(sys.argv[1])))

"""The loop over the stages it is handed: counts, order, stops, and the time each stage cost the devices."""

import threading

import numpy as np
import pytest

from parallel.inputs.reader import Batch, Failure
from parallel.loop import EXIT_INTERRUPTED, EXIT_OK, EXIT_SOME_FAILED, StrictError, Summary, WriterThread, run_loop
from tests.hangs import HANG_SECONDS


def batches(count, size=2, failing=()):
    """`count` batches of `size` one-pixel images named "i_j"; names in `failing` are failures."""
    for index in range(count):
        names = ["%d_%d" % (index, row) for row in range(size)]
        good = [name for name in names if name not in failing]
        images = np.array([[[[int(name.replace("_", ""))] * 3]] for name in good], np.uint8).reshape(-1, 1, 1, 3)
        yield Batch(paths=good, images=images, failures=[Failure(name, "corrupt", "bad") for name in names
                                                         if name in failing])


def compute(images):
    return images.reshape(len(images), -1).astype(np.float32)


class Sink:
    def __init__(self, fail_on=None):
        self.rows, self.fail_on, self.finished = [], fail_on, 0

    def put(self, paths, features):
        if self.fail_on in paths:
            raise OSError(28, "No space left on device")
        self.rows.extend(zip(paths, features[:, 0].tolist()))

    def write(self, paths, features):  # as a writer behind a WriterThread
        self.put(paths, features)

    def finish(self):
        self.finished += 1
        return len(self.rows)


class Failures:
    def __init__(self):
        self.rows = []

    def add(self, path, kind, message):
        self.rows.append((path, kind))


class Stop:
    def __init__(self, after):
        self.after, self.calls = after, 0

    @property
    def signal_name(self):
        self.calls += 1
        return "SIGINT" if self.calls >= self.after else None


def test_every_image_is_counted_once_in_order():
    sink, failures = Sink(), Failures()
    summary = run_loop(batches(3, failing={"1_0"}), compute, sink, failures, images=6)
    assert [path for path, _ in sink.rows] == ["0_0", "0_1", "1_1", "2_0", "2_1"]
    assert [value for _, value in sink.rows] == [0, 1, 11, 20, 21]
    assert failures.rows == [("1_0", "corrupt")]
    assert (summary.written, summary.failed, summary.skipped, summary.interrupted) == (5, 1, 0, False)
    assert sink.finished == 1


def test_a_stop_finishes_the_batch_in_flight_and_counts_the_rest_as_skipped():
    sink = Sink()
    summary = run_loop(batches(5), compute, sink, Failures(), images=10, stop=Stop(after=2))
    assert (summary.written, summary.skipped, summary.interrupted) == (4, 6, True)
    assert summary.exit_status == EXIT_INTERRUPTED


def test_strict_raises_at_the_first_failure_and_still_finishes_the_sink():
    sink = Sink()
    with pytest.raises(StrictError, match="--strict: 1_1: bad \\(corrupt\\)"):
        run_loop(batches(3, failing={"1_1"}), compute, sink, Failures(), images=6, strict=True)
    assert sink.finished == 1 and [path for path, _ in sink.rows] == ["0_0", "0_1"]


class Gate:
    """A writer whose commit of batch 0 waits until the test opens it; it notes what it has committed."""

    def __init__(self):
        self.committed, self.writing, self.opened = [], threading.Event(), threading.Event()

    def write(self, paths, features):
        if paths == ["0"]:
            self.writing.set()
            self.opened.wait()
        self.committed.append(paths[0])


def test_a_batch_is_handed_to_the_writer_only_once_the_one_before_is_committed():
    # So that a kill costs at most two batches: the one being committed and the one on the devices. A put
    # that returned before batch 0 was committed would let batches queue up behind a slow commit, each lost
    # to a kill with it.
    gate, seen = Gate(), {}
    features = np.zeros((1, 1), np.float32)
    with WriterThread(gate) as sink:
        sink.put(["0"], features)
        assert gate.writing.wait(HANG_SECONDS)
        about_to_put = threading.Event()

        def put_the_next():
            about_to_put.set()
            sink.put(["1"], features)
            seen["committed when put returned"] = list(gate.committed)

        putting = threading.Thread(target=put_the_next)
        putting.start()
        assert about_to_put.wait(HANG_SECONDS)
        gate.opened.set()
        putting.join(HANG_SECONDS)
        assert seen == {"committed when put returned": ["0"]}
        assert sink.finish() == 2
    assert gate.committed == ["0", "1"]


def test_a_failing_sink_stops_the_loop_with_its_error():
    with pytest.raises(OSError, match="No space left"):
        with WriterThread(Sink(fail_on="1_0")) as sink:
            run_loop(batches(4), compute, sink, Failures(), images=8)


class Clock:
    """Seconds that pass only when a stage says so: the loop's times are counted, never measured."""

    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now

    def spend(self, seconds):
        self.now += seconds


@pytest.mark.parametrize("slow_stage", ["reader", "writer"])
def test_the_summary_says_which_stage_the_devices_waited_for(slow_stage):
    # Each batch costs the slow stage 0.25 s and the devices 0.01 s, and the other stage nothing, on a clock
    # that moves only then: the waits the summary reports are exactly those, however busy the machine is.
    clock = Clock()

    def slow_batches():
        for batch in batches(6, size=1):
            clock.spend(0.25 if slow_stage == "reader" else 0.0)
            yield batch

    def timed_compute(images):
        clock.spend(0.01)
        return compute(images)

    class TimedSink(Sink):
        def put(self, paths, features):
            clock.spend(0.25 if slow_stage == "writer" else 0.0)
            super().put(paths, features)

    sink = TimedSink()
    summary = run_loop(slow_batches(), timed_compute, sink, Failures(), images=6, clock=clock)
    assert summary.written == 6
    stages = {"reader": summary.reader_wait_seconds, "writer": summary.writer_wait_seconds}
    other = "writer" if slow_stage == "reader" else "reader"
    assert stages[slow_stage] == pytest.approx(1.5) and stages[other] == 0
    assert summary.device_seconds == pytest.approx(0.06)
    assert summary.seconds == pytest.approx(1.56)
    summary.output = "out.csv"
    assert "devices busy 4%" in summary.line()


def test_summary_line_and_exit_status():
    summary = Summary(discovered=4, written=2, failed=1, already_done=1, seconds=2.0, device_seconds=1.0,
                      output="out.csv", errors_file="out.csv.errors.csv")
    assert summary.line() == ("4 images: 2 written, 1 failed, 1 already done, 0 skipped in 2.0 s (1.0 images/s) "
                              "-> out.csv (failures: out.csv.errors.csv); devices busy 50%")
    assert summary.exit_status == EXIT_SOME_FAILED
    assert Summary(written=1).exit_status == EXIT_OK
    summary.failure_cause = "'missing': no such file: a.jpg"  # what its one failure says, beside the file
    assert "(failures: out.csv.errors.csv: 'missing': no such file: a.jpg); devices" in summary.line()


@pytest.mark.parametrize("summary, line", [
    # A rerun with nothing to compute: no rate, no device load that would only measure its start-up.
    (Summary(discovered=240, already_done=240, seconds=0.3, device_seconds=0.003, output="out.csv"),
     "240 images: all already done -> out.csv"),
    (Summary(discovered=1, already_done=1, seconds=0.3, output="out.csv"), "1 image: all already done -> out.csv"),
    (Summary(discovered=5, already_done=4, failed=1, seconds=0.3, output="o.csv", errors_file="o.csv.errors.csv"),
     "5 images: 4 already done, 1 failed -> o.csv (failures: o.csv.errors.csv)"),
    (Summary(discovered=1, written=1, seconds=1.0, device_seconds=0.5, output="o.csv", pending_shards=(3,)),
     "1 image: 1 written, 0 failed, 0 already done, 0 skipped in 1.0 s (1.0 images/s) -> o.csv; devices busy 50%; "
     "1 shard to come from other processes (3): the output is written when the last is committed"),
    (Summary(discovered=3, already_done=3, output="o.csv", pending_shards=(1, 2)),
     "3 images: all already done -> o.csv; 2 shards to come from other processes (1, 2): the output is written "
     "when the last is committed"),
])
def test_summary_lines_count_in_the_right_number_and_say_when_there_was_nothing_to_do(summary, line):
    assert summary.line() == line


class Lagging:
    """A compute stage whose features come back `depth` submits late, as a staged runner's do."""

    def __init__(self, depth):
        self.depth, self.in_flight, self.flushes = depth, [], 0

    def submit(self, images):
        self.in_flight.append(compute(images))
        done = self.in_flight[:-self.depth] if len(self.in_flight) > self.depth else []
        del self.in_flight[:len(done)]
        return done

    def flush(self):
        self.flushes += 1
        done, self.in_flight = self.in_flight, []
        return done


@pytest.mark.parametrize("depth", [1, 2])
def test_features_that_come_back_late_are_written_with_their_own_paths_in_order(depth):
    sink, stage = Sink(), Lagging(depth)
    summary = run_loop(batches(4, failing={"1_0", "2_0", "2_1"}), stage, sink, Failures(), images=8)
    assert sink.rows == [("0_0", 0), ("0_1", 1), ("1_1", 11), ("3_0", 30), ("3_1", 31)]
    assert (summary.written, summary.failed, summary.skipped, stage.flushes) == (5, 3, 0, 1)


def test_a_stop_or_strict_still_writes_the_batches_handed_to_the_devices():
    sink = Sink()
    summary = run_loop(batches(5), Lagging(2), sink, Failures(), images=10, stop=Stop(after=2))
    assert (summary.written, summary.skipped, summary.interrupted) == (4, 6, True)
    sink = Sink()
    with pytest.raises(StrictError, match="2_1"):
        run_loop(batches(3, failing={"2_1"}), Lagging(2), sink, Failures(), images=6, strict=True)
    assert [path for path, _ in sink.rows] == ["0_0", "0_1", "1_0", "1_1"]

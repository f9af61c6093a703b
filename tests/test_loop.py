"""The loop over the stages it is handed: counts, order, stops, and the time each stage cost the devices."""

import time

import numpy as np
import pytest

from parallel.inputs.reader import Batch, Failure
from parallel.loop import EXIT_INTERRUPTED, EXIT_OK, EXIT_SOME_FAILED, StrictError, Summary, WriterThread, run_loop


def batches(count, size=2, failing=(), delay=0.0):
    """`count` batches of `size` one-pixel images named "i_j"; names in `failing` are failures."""
    for index in range(count):
        if delay:
            time.sleep(delay)
        names = ["%d_%d" % (index, row) for row in range(size)]
        good = [name for name in names if name not in failing]
        images = np.array([[[[int(name.replace("_", ""))] * 3]] for name in good], np.uint8).reshape(-1, 1, 1, 3)
        yield Batch(paths=good, images=images, failures=[Failure(name, "corrupt", "bad") for name in names
                                                         if name in failing])


def compute(images):
    return images.reshape(len(images), -1).astype(np.float32)


class Sink:
    def __init__(self, delay=0.0, fail_on=None):
        self.rows, self.delay, self.fail_on, self.finished = [], delay, fail_on, 0

    def put(self, paths, features):
        time.sleep(self.delay)
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


def test_a_failing_sink_stops_the_loop_with_its_error():
    with pytest.raises(OSError, match="No space left"):
        with WriterThread(Sink(fail_on="1_0")) as sink:
            run_loop(batches(4), compute, sink, Failures(), images=8)


@pytest.mark.parametrize("slow_stage", ["reader", "writer"])
def test_the_summary_says_which_stage_the_devices_waited_for(slow_stage):
    # Each slowed step takes 0.1 s; the compute takes microseconds.
    source = batches(6, size=1, delay=0.1 if slow_stage == "reader" else 0.0)
    writer = Sink(delay=0.1 if slow_stage == "writer" else 0.0)
    with WriterThread(writer, depth=1) as sink:
        summary = run_loop(source, compute, sink, Failures(), images=6)
    assert summary.written == 6
    stages = {"reader": summary.reader_wait_seconds, "writer": summary.writer_wait_seconds}
    assert stages[slow_stage] >= 0.4, (summary, slow_stage)
    other = "writer" if slow_stage == "reader" else "reader"
    assert stages[other] < stages[slow_stage] / 2, summary
    assert 0 < summary.device_seconds and sum(stages.values()) + summary.device_seconds <= summary.seconds + 1e-3
    summary.output = "out.csv"
    assert "devices busy %.0f%%" % (100 * summary.device_seconds / summary.seconds) in summary.line()


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

"""What crosses between devices in a step, read from the partition graphs TensorFlow runs."""

import re

import tensorflow as tf

from hangs import HANG_SECONDS

tf1 = tf.compat.v1

# A step that waits on an input that never comes fails the test instead of hanging it (a hang guard only).
_OPTIONS = tf1.RunOptions(output_partition_graphs=True, timeout_in_ms=HANG_SECONDS * 1000)


class CrossingRecorder:
    """A Session's `run` that also records which ops' outputs crossed between devices.

    Use it as the session's run (`session.run = CrossingRecorder(session)`) or call it directly.

    Attributes:
      sources: names of the ops whose outputs crossed between devices in the steps run so far;
        a fed placeholder appears under its own name.
    """

    def __init__(self, session):
        self._run = session.run
        self.sources = set()

    def __call__(self, fetches, feed_dict=None):
        metadata = tf1.RunMetadata()
        result = self._run(fetches, feed_dict, options=_OPTIONS, run_metadata=metadata)
        for partition in metadata.partition_graphs:
            for node in partition.node:
                if node.op == "_Send" and node.attr["send_device"].s != node.attr["recv_device"].s:
                    # tensor_name is "edge_<id>_<source op name>"; a feed's source is "_arg_<name>_<i>_<j>".
                    source = re.sub(r"^edge_\d+_", "", node.attr["tensor_name"].s.decode())
                    self.sources.add(re.sub(r"^_arg_(.*)_\d+_\d+$", r"\1", source))
        return result


def cross_device_sources(session, fetches, feed_dict=None):
    """Runs one step; returns the names of the ops whose outputs crossed between devices."""
    recorder = CrossingRecorder(session)
    recorder(fetches, feed_dict)
    return recorder.sources

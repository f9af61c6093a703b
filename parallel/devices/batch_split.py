"""Split one host batch across the per-device placeholders of a replicated graph."""

import numpy as np


def shard_sizes(num_rows, num_devices):
    """Rows per device for a batch: as even as possible, earlier devices first.

    Args:
      num_rows: rows in the host batch (>= 1).
      num_devices: devices available (>= 1).

    Returns:
      list of positive ints, one per device that gets rows: `min(num_rows, num_devices)`
      entries summing to `num_rows` (7 rows on 3 devices: [3, 2, 2]; 2 rows on 4: [1, 1]).

    Raises:
      ValueError: num_rows < 1 or num_devices < 1, naming the value.
    """
    if num_rows < 1:
        raise ValueError("a batch needs at least one row; got %d" % num_rows)
    if num_devices < 1:
        raise ValueError("num_devices=%d; at least one device is needed" % num_devices)
    base, extra = divmod(num_rows, num_devices)
    return [base + (device < extra) for device in range(min(num_rows, num_devices))]


def shard_features(batch, placeholders, outputs):
    """Feeds a host batch of any size across devices; devices left without rows are skipped.

    Args:
      batch: np.ndarray `[N, ...]`, N >= 1 (e.g. uint8 `[N, 224, 224, 3]` images).
      placeholders: one placeholder per device, each `[None, ...]` matching the batch.
      outputs: one output per device (a tensor or any fetch structure), in the same order.

    Returns:
      `(fetches, feed_dict)`: `fetches` lists the outputs of the devices that got rows, in
      device order; `feed_dict` maps their placeholders to consecutive slices of `batch`
      (views, not copies). `Session.run(fetches, feed_dict)` then returns one result per
      device that ran; `merge_results` puts them back together in row order.

    Raises:
      ValueError: mismatched placeholder/output counts, or an empty batch.
    """
    if len(placeholders) != len(outputs):
        raise ValueError("%d placeholders but %d outputs; give one of each per device"
                         % (len(placeholders), len(outputs)))
    batch = np.asarray(batch)
    if batch.ndim == 0:
        raise ValueError("batch must have a leading row dimension; got a scalar")
    sizes = shard_sizes(len(batch), len(placeholders))
    feed_dict, start = {}, 0
    for placeholder, size in zip(placeholders, sizes):
        feed_dict[placeholder] = batch[start:start + size]
        start += size
    return list(outputs[:len(sizes)]), feed_dict

"""Exact comparison of large arrays (weights), at a fraction of np.testing's CPU."""

import numpy as np


def assert_same_array(actual, expected, what=""):
    """Asserts that `actual` and `expected` have one shape and equal values: np.testing.assert_array_equal's
    check without its broadcasting (and with NaN unequal), and its message when they differ.

    np.testing.assert_array_equal builds NaN and infinity masks of both arrays before it compares them: on a
    VGG16's 138 M weights that is 4.6 CPU-seconds, np.array_equal 0.2.

    Args:
      actual, expected: arrays (or anything np.asarray takes).
      what: named in the message (a layer and weight name).
    """
    actual, expected = np.asarray(actual), np.asarray(expected)
    if actual.shape == expected.shape and np.array_equal(actual, expected):
        return
    np.testing.assert_array_equal(actual, expected, err_msg=what)  # says where they differ
    raise AssertionError("%s: not the same array (shapes %s and %s; NaN is not equal to NaN here)"
                         % (what, actual.shape, expected.shape))

"""EfficientNetB0's table: Keras's DEFAULT_BLOCKS_ARGS at width and depth 1.0, the parameter count, the padding."""

import math
import subprocess
import sys
from pathlib import Path

from hangs import HANG_SECONDS
from models.efficientnet import efficientnet_layers as table

REPOSITORY = Path(__file__).resolve().parents[1]


def test_the_table_pins_keras_s_parameter_counts_and_names():
    assert sum(layer.parameter_count for layer in table.KERAS_LAYERS) == table.PARAMETER_COUNT == 5_330_571
    assert sum(layer.parameter_count for layer in table.keras_layers(False)) == table.PARAMETER_COUNT_NOTOP == 4_049_571
    assert len(table.KERAS_LAYERS) == 132 and table.KERAS_LAYERS[-1].name == "predictions"
    assert [block.name for block in table.BLOCKS] == [
        "block1a", "block2a", "block2b", "block3a", "block3b", "block4a", "block4b", "block4c", "block5a", "block5b",
        "block5c", "block6a", "block6b", "block6c", "block6d", "block7a"]
    assert [block.filters_out for block in table.BLOCKS][::3] == [16, 40, 80, 112, 192, 320]
    assert [block.se_filters for block in table.BLOCKS[:3]] == [8, 4, 6]  # a quarter of the block's input
    assert [block.residual for block in table.BLOCKS[:3]] == [False, False, True]
    assert table.TOP_SIZE == 7 and table.FEATURE_SIZES["top_activation"] == 7 * 7 * 1280
    assert table.DEFAULT_LAYER in table.ENDPOINTS and table.needs_top("predictions")
    assert not any(table.needs_top(endpoint) for endpoint in ("avg_pool", "top_activation"))


def test_width_and_depth_rounding_is_keras_s():
    assert [table.round_filters(filters) for filters in (32, 16, 24, 1280)] == [32, 16, 24, 1280]
    assert table.round_repeats(3) == 3 and math.isclose(table.WIDTH_COEFFICIENT, 1.0)


def test_keras_s_correct_pad_is_the_same_padding_the_graph_uses():
    """The graph pads every convolution "SAME"; Keras pads stride 2 with correct_pad and stride 1 "same"."""
    assert table.correct_pad(224, 3) == (0, 1) and table.correct_pad(56, 5) == (1, 2)
    assert table.correct_pad(7, 3) == (1, 1)  # an odd size is padded evenly
    assert table.STEM_PADDING == table.tensorflow_same_padding(224, 3, 2)
    for block in table.BLOCKS:
        assert block.padding == table.tensorflow_same_padding(block.input_size, block.kernel_size, block.strides), block
    assert [block.padding for block in table.BLOCKS if block.strides == 2] == [(0, 1), (1, 2), (0, 1), (1, 2)]


def test_the_table_imports_no_tensorflow():
    code = ("import sys, models.efficientnet.efficientnet_layers\n"
            "print(sorted({'tensorflow', 'keras', 'h5py'} & set(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPOSITORY, capture_output=True, text=True,
                          timeout=HANG_SECONDS)
    assert (done.returncode, done.stdout) == (0, "[]\n"), done.stderr

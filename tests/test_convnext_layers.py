"""ConvNeXt-Tiny's table: the parameter count, the layers Keras stores, the endpoints (no TensorFlow)."""

from models.convnext import convnext_layers as table


def test_the_table_pins_the_parameter_counts_of_keras_s_two_files():
    assert sum(layer.size for layer in table.LAYERS) == table.PARAMETER_COUNT == 28_589_128
    assert sum(layer.size for layer in table.LAYERS if not layer.top) == table.PARAMETER_COUNT_NOTOP == 27_820_128
    # Keras's include_top=True model has 96 layers with weights, 94 of them before the head.
    assert (len(table.LAYERS), len(table.BODY)) == (96, 94)


def test_the_layers_are_keras_s_in_keras_s_order():
    names = [layer.keras_name for layer in table.LAYERS]
    assert len(set(names)) == len(names) == len({layer.name for layer in table.LAYERS})
    assert names[:7] == ["convnext_tiny_stem"] + ["convnext_tiny_stage_0_block_0_" + part for part in (
        "depthwise_conv", "layernorm", "pointwise_conv_1", "pointwise_conv_2", "layer_scale")] + [
        "convnext_tiny_stage_0_block_1_depthwise_conv"]
    assert names.index("convnext_tiny_downsampling_block_2") == 1 + 5 * (3 + 3 + 9) + 2
    assert names[-3:] == ["convnext_tiny_stage_3_block_2_layer_scale", "convnext_tiny_head_layernorm",
                          "convnext_tiny_head_dense"]
    assert [layer.name for layer in table.LAYERS if layer.top] == ["head/dense"]
    blocks = [layer for layer in table.LAYERS if layer.name.endswith("depthwise_conv")]
    assert [layer.arrays[0][1] for layer in blocks] == [(7, 7, 1, width) for depth, width in
                                                        zip(table.DEPTHS, table.WIDTHS) for _ in range(depth)]


def test_endpoints_and_default():
    assert table.ENDPOINTS == ("stage_3", "avg_pool", "logits", "predictions")
    assert table.DEFAULT_LAYER == "avg_pool" and table.IMAGE_SIZE == (224, 224)
    assert table.HEAD_LAYER_NORM.arrays == (("gamma", (768,)), ("beta", (768,)))

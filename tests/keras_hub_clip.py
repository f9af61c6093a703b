"""keras-hub's CLIP holding a checkpoint's arrays: the reference of tests/test_clip.py and of
benchmarks/bench_models.py (keras-hub is a test-only dependency)."""

import numpy as np

from models.clip import clip_layers


def keras_hub_clip(model, weights):
    """keras-hub's CLIPBackbone of `model`'s sizes holding `weights` ({Hugging Face name: array}).

    keras-hub 0.32 has no converter of Hugging Face's CLIP: the arrays are mapped here. Two of its choices are
    set to the checkpoints': the vision embedding's `position_ids` start at zeros (every patch would get
    position 0's embedding) and are set to 0, 1, 2, ...; the text encoder's final LayerNorm has epsilon 1e-6
    where OpenAI's and Hugging Face's have PyTorch's 1e-5.
    """
    from keras_hub.models import CLIPBackbone, CLIPTextEncoder, CLIPVisionEncoder

    vision_config, text_config = model.vision, model.text
    # keras-hub's "quick_gelu" is x * sigmoid(1.702 x); any other name is Keras's activation of that name
    # (keras.activations.gelu: the exact GELU, as LAION's checkpoints use it).
    vision = CLIPVisionEncoder(model.patch_size, vision_config.width, vision_config.depth, vision_config.heads,
                               vision_config.mlp_width, vision_config.activation,
                               image_shape=(model.image_size,) * 2 + (3,))
    text = CLIPTextEncoder(model.vocabulary_size, text_config.width, text_config.width, text_config.depth,
                           text_config.heads, text_config.mlp_width, text_config.activation,
                           max_sequence_length=model.context_length)
    backbone = CLIPBackbone(vision, text, model.projection)
    text.layer_norm.epsilon = clip_layers.LAYER_NORM_EPSILON

    def layer_norm(layer, name):
        layer.gamma.assign(weights[name + ".weight"])
        layer.beta.assign(weights[name + ".bias"])

    def dense(layer, name):
        layer.kernel.assign(weights[name + ".weight"].T)
        layer.bias.assign(weights[name + ".bias"])

    def blocks(layers, prefix, config):
        depth = config.width // config.heads
        for index, block in enumerate(layers):
            name = "%s.encoder.layers.%d." % (prefix, index)
            layer_norm(block.layer_norm_1, name + "layer_norm1")
            layer_norm(block.layer_norm_2, name + "layer_norm2")
            dense(block.dense_1, name + "mlp.fc1")
            dense(block.dense_2, name + "mlp.fc2")
            attention = block.attention
            for part, projection in ((attention._query_dense, "q_proj"), (attention._key_dense, "k_proj"),
                                     (attention._value_dense, "v_proj")):
                part.kernel.assign(weights[name + "self_attn.%s.weight" % projection].T.reshape(
                    config.width, config.heads, depth))
                part.bias.assign(weights[name + "self_attn.%s.bias" % projection].reshape(config.heads, depth))
            attention._output_dense.kernel.assign(weights[name + "self_attn.out_proj.weight"].T.reshape(
                config.heads, depth, config.width))
            attention._output_dense.bias.assign(weights[name + "self_attn.out_proj.bias"])

    embedding = vision.embedding
    embedding.patch_embedding.kernel.assign(
        weights["vision_model.embeddings.patch_embedding.weight"].transpose(2, 3, 1, 0))
    embedding.class_embedding.assign(weights["vision_model.embeddings.class_embedding"])
    embedding.position_embedding.embeddings.assign(weights["vision_model.embeddings.position_embedding.weight"])
    embedding.position_ids.assign(np.arange(model.positions)[None])
    layer_norm(vision.pre_layer_norm, "vision_model.pre_layrnorm")
    blocks(vision.encoder_layers, "vision_model", vision_config)
    layer_norm(vision.layer_norm, "vision_model.post_layernorm")
    text.embedding.token_embedding.embeddings.assign(weights["text_model.embeddings.token_embedding.weight"])
    text.embedding.position_embedding.position_embeddings.assign(
        weights["text_model.embeddings.position_embedding.weight"])
    blocks(text.encoder_layers, "text_model", text_config)
    layer_norm(text.layer_norm, "text_model.final_layer_norm")
    backbone.vision_projection.kernel.assign(weights["visual_projection.weight"].T)
    backbone.text_projection.kernel.assign(weights["text_projection.weight"].T)
    return backbone

"""The transformer pieces against a NumPy transcription of the same equations on a small random config: the patch
embedding, class token and positions (or positions alone), register tokens, blocks with each activation, a gated
(SwiGLU) MLP, LayerScale and a causal mask, the attention-pooling head; the variables' names (the table's), dtypes
and that no weight is a constant."""

import math

import numpy as np
import pytest
import tensorflow as tf

from models.vit import vit, vit_layers
from models.vit.vit_layers import TransformerConfig

tf1 = tf.compat.v1
TOLERANCE = 1e-5  # of the largest reference value


def _erf(values):
    return np.vectorize(math.erf)(values)


def numpy_layer_norm(x, gamma, beta, epsilon):
    mean = x.mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + epsilon) * gamma + beta


def numpy_activation(x, name):
    if name == "gelu":
        return 0.5 * x * (1 + _erf(x / math.sqrt(2)))
    if name == "gelu_tanh":  # PyTorch's gelu(approximate="tanh")
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    if name == "silu":
        return x / (1 + np.exp(-x))
    return x / (1 + np.exp(-1.702 * x))


def numpy_block(x, weights, prefix, config, mask):
    """A block on float64 [N, T, width], from the equations (not from vit.py)."""
    def w(name):
        return weights[prefix + name].astype(np.float64)

    def dense(rows, name):
        return rows @ w(name + "/kernel") + w(name + "/bias")

    heads, depth = config.heads, config.width // config.heads
    normalized = numpy_layer_norm(x, w("layer_norm_1/gamma"), w("layer_norm_1/beta"), config.epsilon)
    q, k, v = (dense(normalized, "attention/" + name).reshape(*x.shape[:2], heads, depth).transpose(0, 2, 1, 3)
               for name in ("query", "key", "value"))
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(depth) + (0 if mask is None else mask)
    scores = np.exp(scores - scores.max(-1, keepdims=True))
    attended = (scores / scores.sum(-1, keepdims=True)) @ v
    branch = dense(attended.transpose(0, 2, 1, 3).reshape(x.shape), "attention/output")
    h = x + (branch * w("layer_scale_1/gamma") if config.layer_scale else branch)
    hidden = dense(numpy_layer_norm(h, w("layer_norm_2/gamma"), w("layer_norm_2/beta"), config.epsilon), "mlp/fc1")
    if config.gated:  # SwiGLU: the first half gates the second
        hidden, values = np.split(hidden, 2, axis=-1)
    hidden = numpy_activation(hidden, config.activation)
    branch = dense(hidden * values if config.gated else hidden, "mlp/fc2")
    return h + (branch * w("layer_scale_2/gamma") if config.layer_scale else branch)


def random_values(variables, rng):
    values = {}
    for name, shape in variables:
        if name.endswith("gamma"):
            low, high = (0.05, 0.3) if "layer_scale" in name else (0.5, 1.5)
            values[name] = rng.uniform(low, high, shape).astype(np.float32)
        else:
            scale = 1 / math.sqrt(np.prod(shape[:-1])) if len(shape) > 1 else 0.2
            values[name] = (rng.standard_normal(shape) * scale).astype(np.float32)
    return values


def run(graph, output, values, feed):
    with tf1.Session(graph=graph) as session:
        for variable in tf1.global_variables():
            variable.load(values[variable.op.name], session)
        return session.run(output, feed)


@pytest.mark.parametrize("config, causal", [
    (TransformerConfig(32, 2, 4, 64, "gelu", layer_scale=True, epsilon=1e-6), False),
    (TransformerConfig(32, 2, 2, 48, "quick_gelu", layer_scale=False, epsilon=1e-5), True),
    (TransformerConfig(32, 2, 4, 48, "gelu_tanh", layer_scale=False, epsilon=1e-6), False),
    (TransformerConfig(32, 2, 4, 40, "silu", layer_scale=True, epsilon=1e-6, gated=True), False),  # DINOv2 g/14's
])
def test_a_transformer_is_the_equations(graph, config, causal):
    rng = np.random.default_rng(0)
    tokens = rng.standard_normal((3, 7, config.width)).astype(np.float32)
    mask = np.triu(np.full((7, 7), -1e9, np.float32), 1) if causal else None
    placeholder = tf1.placeholder(tf.float32, [None, 7, config.width])
    output = vit.transformer(placeholder, config, mask=None if mask is None else tf.constant(mask))
    variables = vit_layers.transformer_variables(config)
    assert [(v.op.name, tuple(v.shape.as_list())) for v in tf1.global_variables()] == list(variables)
    values = random_values(variables, rng)
    ours = run(graph, output, values, {placeholder: tokens})
    reference = tokens.astype(np.float64)
    for index in range(config.depth):
        reference = numpy_block(reference, values, "block_%d/" % index, config, mask)
    scale = np.abs(reference).max()
    assert np.abs(ours - reference).max() <= TOLERANCE * scale
    spread = np.abs(reference[0] - reference[1]).max()
    assert spread >= 100 * TOLERANCE * scale
    if causal:  # the first token attends to itself only: a later token changes nothing before it
        changed = tokens.copy()
        changed[:, -1] += 1
        again = run(graph, output, values, {placeholder: changed})
        np.testing.assert_allclose(again[:, :-1], ours[:, :-1], rtol=1e-6, atol=1e-6)
        assert np.abs(again[:, -1] - ours[:, -1]).max() > 1e-2


def test_patches_class_token_and_positions(graph):
    rng = np.random.default_rng(1)
    pixels = rng.standard_normal((2, 6, 9, 3)).astype(np.float32)
    placeholder = tf1.placeholder(tf.float32, [None, 6, 9, 3])
    output = vit.class_token_and_positions(vit.patch_embedding(placeholder, 3, 8))
    variables = vit_layers.embedding_variables(8, 3, 6)
    assert [(v.op.name, tuple(v.shape.as_list())) for v in tf1.global_variables()] == list(variables)
    values = random_values(variables, rng)
    ours = run(graph, output, values, {placeholder: pixels})
    kernel = values["patch_embedding/kernel"].reshape(27, 8)
    patches = [pixels[:, row:row + 3, column:column + 3].reshape(2, 27)
               for row in range(0, 6, 3) for column in range(0, 9, 3)]  # row-major
    reference = np.stack([values["class_token"]] * 2)[:, None]
    reference = np.concatenate([reference, np.stack([p @ kernel + values["patch_embedding/bias"] for p in patches], 1)],
                               1) + values["position_embedding"]
    assert ours.shape == (2, 7, 8)
    np.testing.assert_allclose(ours, reference, rtol=1e-5, atol=1e-5)


def test_patches_and_positions_without_a_class_token(graph):
    """SigLIP's embedding: the patches with their position embeddings, no class token before them."""
    rng = np.random.default_rng(2)
    pixels = rng.standard_normal((2, 6, 6, 3)).astype(np.float32)
    placeholder = tf1.placeholder(tf.float32, [None, 6, 6, 3])
    output = vit.positions(vit.patch_embedding(placeholder, 3, 8))
    variables = vit_layers.embedding_variables(8, 3, 4, class_token=False)
    assert [(v.op.name, tuple(v.shape.as_list())) for v in tf1.global_variables()] == list(variables)
    values = random_values(variables, rng)
    kernel = values["patch_embedding/kernel"].reshape(27, 8)
    patches = [pixels[:, row:row + 3, column:column + 3].reshape(2, 27) for row in (0, 3) for column in (0, 3)]
    reference = np.stack([p @ kernel + values["patch_embedding/bias"] for p in patches], 1)
    reference = reference + values["position_embedding"]
    np.testing.assert_allclose(run(graph, output, values, {placeholder: pixels}), reference, rtol=1e-5, atol=1e-5)


def test_attention_pooling_is_the_equations(graph):
    """The MAP head (SigLIP's): one learnt query attends over the tokens, then LayerNorm and MLP with a residual."""
    config = TransformerConfig(32, 1, 4, 48, "gelu_tanh", epsilon=1e-6)
    rng = np.random.default_rng(3)
    tokens = rng.standard_normal((3, 9, 32)).astype(np.float32)
    placeholder = tf1.placeholder(tf.float32, [None, 9, 32])
    with tf1.variable_scope("head"):
        output = vit.attention_pooling(placeholder, config)
    variables = [("head/" + name, shape) for name, shape in vit_layers.attention_pooling_variables(config)]
    assert [(v.op.name, tuple(v.shape.as_list())) for v in tf1.global_variables()] == variables
    values = random_values(variables, rng)
    values["head/probe"] = rng.standard_normal(32).astype(np.float32)
    ours = run(graph, output, values, {placeholder: tokens})

    def w(name):
        return values["head/" + name].astype(np.float64)

    def dense(rows, name):
        return rows @ w(name + "/kernel") + w(name + "/bias")

    x = tokens.astype(np.float64)
    query = dense(w("probe")[None], "attention/query").reshape(4, 8)                      # [heads, depth]
    keys, mixed = (dense(x, "attention/" + name).reshape(3, 9, 4, 8) for name in ("key", "value"))
    scores = np.einsum("hd,nthd->nht", query, keys) / math.sqrt(8)
    scores = np.exp(scores - scores.max(-1, keepdims=True))
    attended = np.einsum("nht,nthd->nhd", scores / scores.sum(-1, keepdims=True), mixed).reshape(3, 32)
    pooled = dense(attended, "attention/output")
    hidden = numpy_activation(dense(numpy_layer_norm(pooled, w("layer_norm/gamma"), w("layer_norm/beta"), 1e-6),
                                    "mlp/fc1"), "gelu_tanh")
    reference = pooled + dense(hidden, "mlp/fc2")
    assert ours.shape == (3, 32)
    scale = np.abs(reference).max()
    assert np.abs(ours - reference).max() <= TOLERANCE * scale
    assert np.abs(reference[0] - reference[1]).max() >= 100 * TOLERANCE * scale


def test_a_gated_mlp_s_first_layer_gives_both_halves():
    """fc1 of a gated MLP (DINOv2 g/14's fused weights_in) holds the gate's and the values' columns."""
    names = dict(vit_layers.block_variables(TransformerConfig(32, 1, 4, 40, "silu", gated=True), 0))
    assert names["block_0/mlp/fc1/kernel"] == (32, 80) and names["block_0/mlp/fc2/kernel"] == (40, 32)
    assert dict(vit_layers.block_variables(TransformerConfig(32, 1, 4, 40), 0))["block_0/mlp/fc1/kernel"] == (32, 40)


def test_register_tokens_go_after_the_class_token_without_positions(graph):
    rng = np.random.default_rng(2)
    tokens = rng.standard_normal((2, 5, 8)).astype(np.float32)  # the class token and 4 patches, positions added
    placeholder = tf1.placeholder(tf.float32, [None, 5, 8])
    assert vit.register_tokens(placeholder, 0) is placeholder
    output = vit.register_tokens(placeholder, 3)
    registers = rng.standard_normal((3, 8)).astype(np.float32)
    ours = run(graph, output, {"register_tokens": registers}, {placeholder: tokens})
    assert ours.shape == (2, 8, 8)
    np.testing.assert_array_equal(ours[:, 0], tokens[:, 0])
    np.testing.assert_array_equal(ours[:, 1:4], np.stack([registers] * 2))
    np.testing.assert_array_equal(ours[:, 4:], tokens[:, 1:])
    assert vit_layers.embedding_variables(8, 3, 4, registers=3)[-1] == ("register_tokens", (3, 8))


def test_bf16_keeps_layer_norms_in_float32_and_the_graph_small(graph):
    config = TransformerConfig(64, 2, 4, 256, layer_scale=True)
    output = vit.transformer(tf1.placeholder(tf.bfloat16, [None, 5, 64]), config)
    dtypes = {v.op.name: v.dtype.base_dtype for v in tf1.global_variables()}
    assert dtypes["block_1/layer_norm_2/gamma"] == tf.float32 and dtypes["block_1/mlp/fc1/kernel"] == tf.bfloat16
    assert output.dtype == tf.bfloat16
    assert graph.as_graph_def().ByteSize() < 100_000  # no weight is a constant


def test_bad_arguments_are_refused_naming_the_value(graph):
    with pytest.raises(ValueError, match="activation='relu'"):
        TransformerConfig(32, 1, 4, 64, "relu")
    with pytest.raises(ValueError, match="width=30, .* heads=4"):
        TransformerConfig(30, 1, 4, 64)
    with pytest.raises(ValueError, match=r"tokens must be \[N, T, 32\]"):
        vit.transformer(tf1.placeholder(tf.float32, [None, 5, 16]), TransformerConfig(32, 1, 4, 64))
    with pytest.raises(ValueError, match="10x10 pixels is not cut into 3x3"):
        vit.patch_embedding(tf1.placeholder(tf.float32, [None, 10, 10, 3]), 3, 8)

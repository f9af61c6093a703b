"""The Vision Transformer's pieces from raw TensorFlow ops, shared by the image towers (DINOv2, CLIP, SigLIP) and the
text towers (CLIP's, SigLIP's): patch embedding, class token and position embeddings, pre-LayerNorm blocks,
LayerNorm, a multi-head attention-pooling head (SigLIP's image tower), a dense layer.

    tokens = patch_embedding(pixels, patch=14, width=384)           # [N, 256, 384]
    tokens = class_token_and_positions(tokens)                       # [N, 257, 384]
    tokens = transformer(tokens, vit_layers.TransformerConfig(384, 12, 6, 1536, layer_scale=True))
    tokens = layer_norm(tokens, *layer_norm_variables("layer_norm"), epsilon=1e-6)

A block (as in DINOv2, CLIP and keras-hub's versions of them):

    h   = x + layer_scale_1 * attention(layer_norm_1(x))         (layer_scale_* only with layer_scale)
    out = h + layer_scale_2 * fc2(activation(fc1(layer_norm_2(h))))
    gated (SwiGLU): fc1 gives [a, b] (2 x mlp_width): fc2(activation(a) * b), activation silu (DINOv2 g/14)

attention: multi-head self-attention, query/key/value/output projections with biases, softmax(q k^T / sqrt(d)
+ mask) v, with an optional additive mask (CLIP's causal text tower; SigLIP's text tower has none); activation:
the exact GELU (erf), QuickGELU x * sigmoid(1.702 x) (OpenAI's CLIP), GELU's tanh approximation (SigLIP) or SiLU
x * sigmoid(x) (SwiGLU's gate).

The attention-pooling head (big_vision's MAPHead, transformers' SiglipMultiheadAttentionPoolingHead):

    h   = attention(query = probe, keys and values = the tokens)      one learnt query, every image alike
    out = h + fc2(activation(fc1(layer_norm(h))))                     [N, width]

Variables are created with `tf.compat.v1.get_variable` (zeros; the engine loads their values from host arrays,
never graph constants) under the caller's variable scope, named as `vit_layers` lists them
("block_0/attention/query/kernel", "class_token", ...). They are created in the compute dtype, except the
LayerNorms' gamma and beta, float32 whatever the precision: every LayerNorm is computed in float32 (a
float16 variance of activations in the hundreds overflows, and bfloat16's 8-bit mantissa would round the
normalisation itself); so is the attention's softmax.
"""

import math

import tensorflow as tf

from models.vit.vit_layers import ACTIVATIONS

tf1 = tf.compat.v1


def _variable(name, shape, dtype):
    return tf1.get_variable(name, shape, dtype, tf1.zeros_initializer())


def layer_norm_variables(name, width):
    """The float32 gamma and beta [width] of the LayerNorm `name` (a variable scope) under the current scope."""
    with tf1.variable_scope(name):
        return _variable("gamma", [width], tf.float32), _variable("beta", [width], tf.float32)


def layer_norm(inputs, gamma, beta, epsilon):
    """LayerNorm over the last axis, computed in float32.

    Args:
      inputs: [..., C] of the compute dtype.
      gamma, beta: [C] (float32, or cast to it).
      epsilon: added to the variance.

    Returns:
      [..., C] of the inputs' dtype: (inputs - mean) / sqrt(variance + epsilon) * gamma + beta.
    """
    dtype = inputs.dtype
    values, gamma, beta = (tensor if tensor.dtype == tf.float32 else tf.cast(tensor, tf.float32)
                           for tensor in (inputs, gamma, beta))
    mean, variance = tf.nn.moments(values, axes=[-1], keepdims=True)
    normalized = tf.nn.batch_normalization(values, mean, variance, beta, gamma, epsilon)
    return normalized if dtype == tf.float32 else tf.cast(normalized, dtype)


def patch_embedding(pixels, patch, width, bias=True):
    """Cuts the image into patch x patch squares, each projected to `width` channels (a convolution of stride
    `patch`, no padding), in row-major order. Variables patch_embedding/kernel [patch, patch, 3, width] and
    (bias=True) patch_embedding/bias [width].

    Args:
      pixels: [N, H, W, 3] of the compute dtype, normalised; H and W multiples of `patch`.
      patch: the patches' side in pixels.
      width: channels.
      bias: the projection has a bias (DINOv2's; CLIP's has none).

    Returns:
      [N, (H / patch) * (W / patch), width] of the pixels' dtype.
    """
    height, image_width = pixels.shape[1], pixels.shape[2]
    if height % patch or image_width % patch:
        raise ValueError("an image of %dx%d pixels is not cut into %dx%d patches" % (height, image_width, patch,
                                                                                    patch))
    with tf1.variable_scope("patch_embedding"):
        kernel = _variable("kernel", [patch, patch, 3, width], pixels.dtype)
        net = tf.nn.conv2d(pixels, kernel, patch, "VALID")
        if bias:
            net = tf.nn.bias_add(net, _variable("bias", [width], pixels.dtype))
    return tf.reshape(net, [-1, (height // patch) * (image_width // patch), width])


def class_token_and_positions(tokens):
    """Puts the class token (variable class_token [width]) before the tokens and adds the position embeddings
    (variable position_embedding [1 + T, width], the class token's first).

    Args:
      tokens: [N, T, width].

    Returns:
      [N, 1 + T, width] of the tokens' dtype.
    """
    count, width = tokens.shape[1], tokens.shape[2]
    class_token = _variable("class_token", [width], tokens.dtype)
    positions = _variable("position_embedding", [1 + count, width], tokens.dtype)
    batch = tf.shape(tokens)[0]
    class_tokens = tf.tile(tf.reshape(class_token, [1, 1, width]), tf.stack([batch, 1, 1]))
    return tf.concat([class_tokens, tokens], axis=1) + positions


def positions(tokens):
    """Adds the position embeddings (variable position_embedding [T, width]) to tokens without a class token
    (SigLIP's patches, or a text tower's tokens).

    Args:
      tokens: [N, T, width].

    Returns:
      [N, T, width] of the tokens' dtype.
    """
    count, width = tokens.shape[1], tokens.shape[2]
    return tokens + _variable("position_embedding", [count, width], tokens.dtype)


def register_tokens(tokens, count):
    """Puts `count` register tokens (variable register_tokens [count, width]) after the class token: learnt
    tokens without position embeddings, which the blocks attend to and nothing reads out (DINOv2 with registers).

    Args:
      tokens: [N, 1 + T, width], the class token first (position embeddings already added).
      count: registers; 0 returns the tokens as they are.

    Returns:
      [N, 1 + count + T, width] of the tokens' dtype.
    """
    if not count:
        return tokens
    width = tokens.shape[2]
    registers = _variable("register_tokens", [count, width], tokens.dtype)
    batch = tf.shape(tokens)[0]
    registers = tf.tile(tf.reshape(registers, [1, count, width]), tf.stack([batch, 1, 1]))
    return tf.concat([tokens[:, :1], registers, tokens[:, 1:]], axis=1)


def _dense(rows, name, inputs, outputs):
    """rows [M, inputs] @ <name>/kernel [inputs, outputs] + <name>/bias [outputs]."""
    with tf1.variable_scope(name):
        kernel = _variable("kernel", [inputs, outputs], rows.dtype)
        bias = _variable("bias", [outputs], rows.dtype)
    return tf.nn.bias_add(tf.matmul(rows, kernel), bias)


def dense(rows, name, inputs, outputs):
    """A dense layer with a bias under variable scope `name`: rows [M, inputs] @ <name>/kernel [inputs, outputs] +
    <name>/bias [outputs], of the rows' dtype (SigLIP's text `head`)."""
    return _dense(rows, name, inputs, outputs)


def activation(inputs, name):
    """The MLP's activation: "gelu" (exact, erf), "quick_gelu" (x * sigmoid(1.702 x)), "gelu_tanh" (GELU's tanh
    approximation, 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))): PyTorch's gelu(approximate="tanh")) or "silu"
    (x * sigmoid(x))."""
    if name == "gelu":
        return tf.nn.gelu(inputs, approximate=False)
    if name == "gelu_tanh":
        return tf.nn.gelu(inputs, approximate=True)
    if name == "quick_gelu":
        return inputs * tf.sigmoid(tf.constant(1.702, inputs.dtype) * inputs)
    if name == "silu":
        return inputs * tf.sigmoid(inputs)
    raise ValueError("activation=%r; expected one of %s" % (name, ", ".join(ACTIVATIONS)))


def attention(tokens, heads, mask=None):
    """Multi-head self-attention (variables attention/{query,key,value,output}/{kernel,bias}).

    Args:
      tokens: [N, T, width] of the compute dtype.
      heads: attention heads; each attends with width / heads channels.
      mask: None, or an additive float mask broadcastable to [N, heads, T, T] (0 where a token may attend,
        a large negative number where it may not: CLIP's causal mask), added to the scores before the softmax.

    Returns:
      [N, T, width] of the tokens' dtype.
    """
    count, width = tokens.shape[1], tokens.shape[2]
    depth = width // heads
    rows = tf.reshape(tokens, [-1, width])  # the projections as 2-D matmuls on [N * T, width]

    def split(name):  # [N * T, width] -> [N, heads, T, depth]
        projected = _dense(rows, name, width, width)
        return tf.transpose(tf.reshape(projected, [-1, count, heads, depth]), [0, 2, 1, 3])

    with tf1.variable_scope("attention"):
        query, key, value = split("query"), split("key"), split("value")
        scores = tf.matmul(query, key, transpose_b=True) * tf.constant(1 / math.sqrt(depth), tokens.dtype)
        if scores.dtype != tf.float32:
            scores = tf.cast(scores, tf.float32)
        if mask is not None:
            scores = scores + tf.cast(mask, tf.float32)
        weights = tf.nn.softmax(scores, axis=-1)
        if weights.dtype != tokens.dtype:
            weights = tf.cast(weights, tokens.dtype)
        mixed = tf.reshape(tf.transpose(tf.matmul(weights, value), [0, 2, 1, 3]), [-1, width])
        return tf.reshape(_dense(mixed, "output", width, width), tf.shape(tokens))


def _scaled(branch, name, config):
    """The branch times layer_scale_<k>/gamma [width] with LayerScale, else as it is."""
    if not config.layer_scale:
        return branch
    with tf1.variable_scope(name):
        return branch * _variable("gamma", [config.width], branch.dtype)


def block(tokens, config, mask=None):
    """One pre-LayerNorm transformer block under the current variable scope (the caller's block_<i>).

    Args:
      tokens: [N, T, width] of the compute dtype.
      config: a vit_layers.TransformerConfig.
      mask: None, or an additive attention mask (see `attention`).

    Returns:
      [N, T, width] of the tokens' dtype.
    """
    width = config.width
    normalized = layer_norm(tokens, *layer_norm_variables("layer_norm_1", width), config.epsilon)
    tokens = tokens + _scaled(attention(normalized, config.heads, mask), "layer_scale_1", config)
    rows = layer_norm(tf.reshape(tokens, [-1, width]), *layer_norm_variables("layer_norm_2", width), config.epsilon)
    return tokens + _scaled(tf.reshape(mlp(rows, config), tf.shape(tokens)), "layer_scale_2", config)


def mlp(rows, config):
    """The block's MLP (variables mlp/fc1, mlp/fc2) on rows [M, width]: fc2(activation(fc1(rows))), or gated
    (SwiGLU): fc1's 2 x mlp_width outputs split in halves a, b, fc2(activation(a) * b).

    Returns:
      [M, width] of the rows' dtype.
    """
    hidden = config.mlp_width
    with tf1.variable_scope("mlp"):
        if not config.gated:
            return _dense(activation(_dense(rows, "fc1", config.width, hidden), config.activation), "fc2",
                          hidden, config.width)
        gate, values = tf.split(_dense(rows, "fc1", config.width, 2 * hidden), 2, axis=1)
        return _dense(activation(gate, config.activation) * values, "fc2", hidden, config.width)


def transformer(tokens, config, mask=None, depth=None):
    """`depth` (default config.depth) blocks, block_0 ... under the current variable scope.

    Args:
      tokens: [N, T, config.width] of the compute dtype.
      config: a vit_layers.TransformerConfig.
      mask: None, or an additive attention mask every block uses (see `attention`).
      depth: build only the first `depth` blocks (an intermediate layer's output).

    Returns:
      [N, T, config.width] of the tokens' dtype.
    """
    if tokens.shape.rank != 3 or tokens.shape[2] != config.width:
        raise ValueError("tokens must be [N, T, %d]; got %s" % (config.width, tokens.shape))
    for index in range(config.depth if depth is None else depth):
        with tf1.variable_scope("block_%d" % index):
            tokens = block(tokens, config, mask)
    return tokens


def attention_pooling(tokens, config):
    """A multi-head attention-pooling head (MAP) under the current variable scope (the caller's "head"): one learnt
    query (variable probe [width]) attends over the tokens with `config.heads` heads, then a LayerNorm and an
    MLP with a residual: transformers' SiglipMultiheadAttentionPoolingHead (PyTorch's nn.MultiheadAttention, whose
    in_proj packs the query, key and value projections), big_vision's MAPHead.

    Args:
      tokens: [N, T, width] of the compute dtype (SigLIP: the patches after the post-LayerNorm).
      config: a vit_layers.TransformerConfig: width, heads, MLP width, activation, LayerNorm epsilon.

    Returns:
      [N, width] of the tokens' dtype.
    """
    count, width, heads = tokens.shape[1], config.width, config.heads
    depth = width // heads
    probe = _variable("probe", [width], tokens.dtype)
    rows = tf.reshape(tokens, [-1, width])
    with tf1.variable_scope("attention"):
        # The query is the same for every image: projected once, [1, heads, 1, depth], broadcast over the batch.
        query = tf.reshape(_dense(probe[None], "query", width, width), [1, heads, 1, depth])

        def split(name):  # [N * T, width] -> [N, heads, T, depth]
            return tf.transpose(tf.reshape(_dense(rows, name, width, width), [-1, count, heads, depth]), [0, 2, 1, 3])

        key, value = split("key"), split("value")
        scores = tf.matmul(query, key, transpose_b=True) * tf.constant(1 / math.sqrt(depth), tokens.dtype)
        weights = tf.nn.softmax(tf.cast(scores, tf.float32), axis=-1)  # [N, heads, 1, T]
        if weights.dtype != tokens.dtype:
            weights = tf.cast(weights, tokens.dtype)
        pooled = _dense(tf.reshape(tf.matmul(weights, value), [-1, width]), "output", width, width)
    normalized = layer_norm(pooled, *layer_norm_variables("layer_norm", width), config.epsilon)
    return pooled + mlp(normalized, config)

"""The Vision Transformer's variables, by name and shape, for any size: the table `vit.py` builds its graph from and
the models' weight files (DINOv2, CLIP) map their checkpoints onto. No TensorFlow.

A transformer of `depth` pre-LayerNorm blocks of `width` channels; the variables of block i, under the model's
scope (kernels are [inputs, outputs], as `x @ kernel`: a checkpoint's PyTorch [outputs, inputs] is transposed
when it is read):

    block_<i>/layer_norm_1/gamma, beta              [width]          (float32 whatever the precision)
    block_<i>/attention/query/kernel, bias          [width, width], [width]
    block_<i>/attention/key/kernel, bias            (the same)
    block_<i>/attention/value/kernel, bias          (the same)
    block_<i>/attention/output/kernel, bias         (the same)
    block_<i>/layer_scale_1/gamma                   [width]          (only with layer_scale: DINOv2)
    block_<i>/layer_norm_2/gamma, beta              [width]          (float32)
    block_<i>/mlp/fc1/kernel, bias                  [width, mlp_width], [mlp_width]   ([width, 2 * mlp_width],
                                                                       [2 * mlp_width] when gated: SwiGLU)
    block_<i>/mlp/fc2/kernel, bias                  [mlp_width, width], [width]
    block_<i>/layer_scale_2/gamma                   [width]          (only with layer_scale)

and an image tower's embeddings:

    patch_embedding/kernel                          [patch, patch, 3, width]  (a conv of stride patch)
    patch_embedding/bias                            [width]          (only with patch_bias: DINOv2, not CLIP)
    class_token                                     [width]
    position_embedding                              [1 + patches, width]  ([patches, width] without a class
                                                                           token: SigLIP)
    register_tokens                                 [registers, width]   (only with registers: DINOv2's)

and a multi-head attention-pooling head (MAP: SigLIP's image tower), under its scope ("head/"):

    probe                                           [width]          (the learnt query)
    attention/query, key, value, output/kernel, bias  [width, width], [width]
    layer_norm/gamma, beta                          [width]          (float32)
    mlp/fc1/kernel, bias; mlp/fc2/kernel, bias      as a block's MLP
"""

import dataclasses

# exact GELU (erf); x * sigmoid(1.702 x), OpenAI's CLIP; GELU's tanh approximation (PyTorch's
# gelu(approximate="tanh"), transformers' "gelu_pytorch_tanh"), SigLIP's; x * sigmoid(x), the gate of SwiGLU
# (DINOv2 g/14)
ACTIVATIONS = ("gelu", "quick_gelu", "gelu_tanh", "silu")


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """The size of a stack of pre-LayerNorm transformer blocks.

    Attributes:
      width: channels of the residual stream.
      depth: blocks.
      heads: attention heads (width is a multiple of it).
      mlp_width: the MLP's hidden channels.
      activation: one of ACTIVATIONS.
      layer_scale: each branch is scaled by a learnt per-channel gamma before it is added (DINOv2's LayerScale).
      epsilon: of every LayerNorm.
      gated: the MLP is gated (SwiGLU, DINOv2 g/14's): fc1 gives 2 x mlp_width channels, the activation of the
        first half times the second half goes into fc2.
    """

    width: int
    depth: int
    heads: int
    mlp_width: int
    activation: str = "gelu"
    layer_scale: bool = False
    epsilon: float = 1e-6
    gated: bool = False

    def __post_init__(self):
        if self.activation not in ACTIVATIONS:
            raise ValueError("activation=%r; expected one of %s" % (self.activation, ", ".join(ACTIVATIONS)))
        if min(self.width, self.depth, self.heads, self.mlp_width) < 1 or self.width % self.heads:
            raise ValueError("width=%d, depth=%d, heads=%d, mlp_width=%d: all must be positive, width a multiple "
                             "of heads" % (self.width, self.depth, self.heads, self.mlp_width))


def block_variables(config, index):
    """((name, shape), ...) of block `index`, in the order above ("block_0/layer_norm_1/gamma", ...)."""
    width, hidden = config.width, config.mlp_width
    fc1 = 2 * hidden if config.gated else hidden
    names = [("layer_norm_1/gamma", (width,)), ("layer_norm_1/beta", (width,))]
    for projection in ("query", "key", "value", "output"):
        names += [("attention/%s/kernel" % projection, (width, width)), ("attention/%s/bias" % projection, (width,))]
    if config.layer_scale:
        names.append(("layer_scale_1/gamma", (width,)))
    names += [("layer_norm_2/gamma", (width,)), ("layer_norm_2/beta", (width,)),
              ("mlp/fc1/kernel", (width, fc1)), ("mlp/fc1/bias", (fc1,)),
              ("mlp/fc2/kernel", (hidden, width)), ("mlp/fc2/bias", (width,))]
    if config.layer_scale:
        names.append(("layer_scale_2/gamma", (width,)))
    return tuple(("block_%d/%s" % (index, name), shape) for name, shape in names)


def transformer_variables(config):
    """((name, shape), ...) of every block, in order."""
    return tuple(variable for index in range(config.depth) for variable in block_variables(config, index))


def embedding_variables(width, patch, patches, patch_bias=True, class_token=True, registers=0):
    """((name, shape), ...) of an image tower's embeddings: `patches` patches of patch x patch pixels, a class
    token before them or not (SigLIP has none), and `registers` register tokens (Darcet et al., "Vision
    Transformers Need Registers", 2023)."""
    names = [("patch_embedding/kernel", (patch, patch, 3, width))]
    if patch_bias:
        names.append(("patch_embedding/bias", (width,)))
    if not class_token:
        return tuple(names + [("position_embedding", (patches, width))])
    names += [("class_token", (width,)), ("position_embedding", (1 + patches, width))]
    if registers:
        names.append(("register_tokens", (registers, width)))
    return tuple(names)


def describe(config):
    """The transformer's size in words, for a job's settings: "width 1024, 24 blocks, 16 heads, MLP 4096, gelu,
    LayerNorm epsilon 1e-05" (and ", LayerScale", ", gated" where they hold)."""
    return "width %d, %d blocks, %d heads, MLP %d, %s%s%s, LayerNorm epsilon %s" % (
        config.width, config.depth, config.heads, config.mlp_width, config.activation,
        ", gated" if config.gated else "", ", LayerScale" if config.layer_scale else "", config.epsilon)


def attention_pooling_variables(config):
    """((name, shape), ...) of a multi-head attention-pooling head (`vit.attention_pooling`) of a
    TransformerConfig's width and MLP, under its scope ("probe", "attention/query/kernel", ...)."""
    width, hidden = config.width, config.mlp_width
    names = [("probe", (width,))]
    for projection in ("query", "key", "value", "output"):
        names += [("attention/%s/kernel" % projection, (width, width)), ("attention/%s/bias" % projection, (width,))]
    return tuple(names + [("layer_norm/gamma", (width,)), ("layer_norm/beta", (width,)),
                          ("mlp/fc1/kernel", (width, hidden)), ("mlp/fc1/bias", (hidden,)),
                          ("mlp/fc2/kernel", (hidden, width)), ("mlp/fc2/bias", (width,))])


def size(variables):
    """Parameters of ((name, shape), ...)."""
    total = 0
    for _, shape in variables:
        count = 1
        for dimension in shape:
            count *= dimension
        total += count
    return total


def hf_block_parameters(prefix, width, mlp_width):
    """One pre-LN transformer block's parameters as transformers names them under `prefix` (CLIP's and SigLIP's
    encoder layers): [(name, shape), ...], PyTorch's layouts ([out, in] for a linear layer's weight)."""
    parameters = []
    for projection in ("q_proj", "k_proj", "v_proj", "out_proj"):
        parameters += [("%sself_attn.%s.weight" % (prefix, projection), (width, width)),
                       ("%sself_attn.%s.bias" % (prefix, projection), (width,))]
    return parameters + [(prefix + "layer_norm1.weight", (width,)), (prefix + "layer_norm1.bias", (width,)),
                         (prefix + "mlp.fc1.weight", (mlp_width, width)), (prefix + "mlp.fc1.bias", (mlp_width,)),
                         (prefix + "mlp.fc2.weight", (width, mlp_width)), (prefix + "mlp.fc2.bias", (width,)),
                         (prefix + "layer_norm2.weight", (width,)), (prefix + "layer_norm2.bias", (width,))]


def hf_text_encoder_parameters(vocabulary_size, context_length, config):
    """A text tower's embeddings, blocks and final LayerNorm as transformers names them under "text_model." (CLIP's
    and SigLIP's, before their different heads): [(name, shape), ...], PyTorch's layouts.

    Args:
      vocabulary_size, context_length: the token and position embeddings' rows.
      config: the text tower's TransformerConfig (width, depth, mlp_width).
    """
    prefix, width = "text_model.", config.width
    parameters = [(prefix + "embeddings.token_embedding.weight", (vocabulary_size, width)),
                  (prefix + "embeddings.position_embedding.weight", (context_length, width))]
    for index in range(config.depth):
        parameters += hf_block_parameters("%sencoder.layers.%d." % (prefix, index), width, config.mlp_width)
    return parameters + [(prefix + "final_layer_norm.weight", (width,)), (prefix + "final_layer_norm.bias", (width,))]


def random_hf_array(rng, name, shape):
    """A seeded random value for the transformers parameter `name` of `shape` (CLIP's and SigLIP's random
    checkpoints): LayerNorms' weights U(0.5, 1.5) and biases U(-0.1, 0.1); embeddings N(0, 0.5); other biases
    U(-0.1, 0.1); matrices N(0, gain / sqrt(fan in)) of PyTorch's [out, in, ...], gain 0.5 for a block's output
    projections (out_proj, fc2) so that the residual stream stays near unit scale through the depth.

    Args:
      rng: a numpy Generator (the values depend on the calls made to it before, in order).
      name, shape: the parameter's.

    Returns:
      float32 array of `shape`.
    """
    import numpy as np
    if "norm" in name:
        if name.endswith("weight"):
            return rng.uniform(0.5, 1.5, shape).astype(np.float32)
        return rng.uniform(-0.1, 0.1, shape).astype(np.float32)
    if "embedding" in name and "patch_embedding" not in name:
        return rng.standard_normal(shape, dtype=np.float32) * np.float32(0.5)
    if name.endswith("bias"):
        return rng.uniform(-0.1, 0.1, shape).astype(np.float32)
    fan_in = int(np.prod(shape[1:]))  # PyTorch's [out, in, ...]
    gain = 0.5 if ("out_proj" in name or "fc2" in name) else 1.0
    return rng.standard_normal(shape, dtype=np.float32) * np.float32(gain / np.sqrt(fan_in))

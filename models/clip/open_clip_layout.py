"""open_clip's layout of a CLIP checkpoint (`open_clip_model.safetensors`, its `CLIP` and `CustomTextCLIP` of
github:mlfoundations/open_clip, src/open_clip/model.py and transformer.py) renamed into Hugging Face's, and back.
No TensorFlow.

    visual.conv1.weight                                   vision_model.embeddings.patch_embedding.weight
    visual.class_embedding, visual.positional_embedding   vision_model.embeddings.class_embedding, ...
    visual.ln_pre, visual.ln_post                         vision_model.pre_layrnorm, post_layernorm
    visual.transformer.resblocks.<i>.ln_1, ln_2           vision_model.encoder.layers.<i>.layer_norm1, 2
    ....attn.in_proj_weight, in_proj_bias [3W, W]         ....self_attn.{q,k,v}_proj (q, k, v stacked, in order)
    ....attn.out_proj, mlp.c_fc, mlp.c_proj               ....self_attn.out_proj, mlp.fc1, mlp.fc2
    visual.proj [W, E] (x @ proj)                         visual_projection.weight [E, W] (transposed)
    token_embedding.weight, positional_embedding          text_model.embeddings.token_embedding.weight, ...
    transformer.resblocks.<i>...., ln_final               text_model.encoder.layers.<i>...., final_layer_norm
    text_projection [W, E] (x @ it)                       text_projection.weight [E, W] (transposed)
    logit_scale                                           logit_scale

CustomTextCLIP keeps the text tower's names under `text.` (text.token_embedding.weight, ...); the `attn_mask`
buffers some versions store are not read.
"""

import numpy as np

from models.files import WeightsError


def _open_clip_block(source, target):
    """{open_clip name: (Hugging Face names, how)} of one residual block: "split" for the fused q, k, v."""
    pairs = {"ln_1": "layer_norm1", "ln_2": "layer_norm2", "attn.out_proj": "self_attn.out_proj",
             "mlp.c_fc": "mlp.fc1", "mlp.c_proj": "mlp.fc2"}
    names = {}
    for ours, theirs in pairs.items():
        for kind in ("weight", "bias"):
            names["%s%s.%s" % (source, ours, kind)] = ("%s%s.%s" % (target, theirs, kind),)
    for kind in ("weight", "bias"):
        names["%sattn.in_proj_%s" % (source, kind)] = tuple(
            "%sself_attn.%s_proj.%s" % (target, projection, kind) for projection in "qkv")
    return names


def open_clip_names(model):
    """How open_clip's names become Hugging Face's: {open_clip name: (Hugging Face names, ...)}.

    A name with three targets is the fused in_proj (q, k, v stacked on the first axis); `visual.proj` and
    `text_projection` are transposed.
    """
    names = {"visual.conv1.weight": ("vision_model.embeddings.patch_embedding.weight",),
             "visual.class_embedding": ("vision_model.embeddings.class_embedding",),
             "visual.positional_embedding": ("vision_model.embeddings.position_embedding.weight",),
             "visual.proj": ("visual_projection.weight",),
             "token_embedding.weight": ("text_model.embeddings.token_embedding.weight",),
             "positional_embedding": ("text_model.embeddings.position_embedding.weight",),
             "text_projection": ("text_projection.weight",),
             "logit_scale": ("logit_scale",)}
    for ours, theirs in (("visual.ln_pre", "vision_model.pre_layrnorm"),
                         ("visual.ln_post", "vision_model.post_layernorm"),
                         ("ln_final", "text_model.final_layer_norm")):
        for kind in ("weight", "bias"):
            names["%s.%s" % (ours, kind)] = ("%s.%s" % (theirs, kind),)
    for index in range(model.vision.depth):
        names.update(_open_clip_block("visual.transformer.resblocks.%d." % index,
                                      "vision_model.encoder.layers.%d." % index))
    for index in range(model.text.depth):
        names.update(_open_clip_block("transformer.resblocks.%d." % index, "text_model.encoder.layers.%d." % index))
    return names


def from_open_clip(tensors, model, path="<arrays>"):
    """open_clip's arrays renamed (and split, transposed) into Hugging Face's layout.

    Args:
      tensors: {open_clip name: array}, as `read_tensors` gives them.
      model: a `clip_layers.Config`.
      path: the file, for messages.

    Returns:
      {Hugging Face name: array}: those of `tensors` that open_clip's CLIP has (others, e.g. `attn_mask`
      buffers, are left out).

    Raises:
      WeightsError: a fused in_proj whose first axis is not three times its width.
    """
    if "text.token_embedding.weight" in tensors:  # CustomTextCLIP: the text tower under "text."
        tensors = {name[5:] if name.startswith("text.") else name: array for name, array in tensors.items()}
    converted = {}
    for source, targets in open_clip_names(model).items():
        if source not in tensors:
            continue  # reported, with the Hugging Face name, by the check of the arrays needed
        array = tensors[source]
        if source in ("visual.proj", "text_projection"):
            array = array.T
        if len(targets) == 1:
            converted[targets[0]] = array
            continue
        if array.shape[0] % 3:
            raise WeightsError("weights=%s: %s has shape %s: not q, k and v stacked (a first axis of 3 x width)"
                               % (path, source, tuple(array.shape)))
        converted.update(zip(targets, np.split(array, 3, axis=0)))
    return converted


def to_open_clip(weights, model):
    """Hugging Face's arrays in open_clip's layout (the inverse of `from_open_clip`), e.g. for tests."""
    arrays = {}
    for source, targets in open_clip_names(model).items():
        if not all(target in weights for target in targets):
            continue
        array = weights[targets[0]] if len(targets) == 1 else np.concatenate([weights[name] for name in targets])
        arrays[source] = np.asarray(array.T if source in ("visual.proj", "text_projection") else array, order="C")
    return arrays

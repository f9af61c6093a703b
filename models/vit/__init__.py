"""The Vision Transformer, once: the pieces every transformer family builds from (CLIP's and SigLIP's two towers,
DINOv2).

    vit_layers  its variables by name and shape for any size (TransformerConfig), no TensorFlow
    vit_config  a checkpoint's own config read field by field (Hugging Face's config.json, open_clip's
                open_clip_config.json), a field the code cannot run refused in one line naming it; no TensorFlow
    vit         its pieces from raw ops: patch embedding, class token and positions, register tokens,
                pre-LayerNorm blocks (GELU, QuickGELU, GELU's tanh approximation or a gated SwiGLU MLP,
                LayerScale, an attention mask), LayerNorm, the attention-pooling head (SigLIP)

A family's size is a TransformerConfig (read from its checkpoint's config), never a copy of these blocks. May
import: nothing of the project but itself (TensorFlow in vit.py only). Importing the package imports nothing.
"""

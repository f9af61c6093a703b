"""The Vision Transformer, once: the pieces every transformer family builds from (CLIP's two towers, DINOv2).

    vit_layers  its variables by name and shape for any size (TransformerConfig), no TensorFlow
    vit         its pieces from raw ops: patch embedding, class token and positions, pre-LayerNorm blocks
                (GELU or QuickGELU, LayerScale, an attention mask), LayerNorm

A family's size is a TransformerConfig (read from its checkpoint), never a copy of these blocks. May import:
nothing of the project but itself (TensorFlow in vit.py only). Importing the package imports nothing.
"""

"""SigLIP and SigLIP 2 (the fixed-resolution checkpoints): an image tower with an attention-pooling head and a text
tower in one space, any size (read from the checkpoint's config.json) and the sizes users know by name.

    siglip_layers     the sizes (config.json read as transformers reads it; the presets), the checkpoint's names
                      and shapes; no TensorFlow
    siglip            the image tower's ModelSpec (the registry's `siglip` and presets) and TextTower, from
                      models.vit's blocks
    siglip_weights    transformers' model.safetensors mapped onto the variables, checked; random folders written;
                      Checkpoint, what the weights argument names
    siglip_tokenizer  SigLIP's SentencePiece and SigLIP 2's Gemma tokenizer through the `tokenizers` library

May import: models.vit, the shared modules of models (common, files, hub_download, safetensors_files) and
parallel.model (and parallel.output.durable, standard library only, to write files); no other family, never the
engine. Importing the package imports nothing.
"""

"""CLIP (OpenAI's ViT-B/32 and ViT-B/16): an image tower and a text tower in one embedding space.

    clip_layers     the sizes (a TransformerConfig per tower), the checkpoint's names and shapes; no TensorFlow
    clip            the image tower's ModelSpec (VIT_B32, VIT_B16: the registry's objects) and TextTower, from
                    models.vit's blocks
    clip_weights    the safetensors checkpoint (Hugging Face's layout; open_clip's renamed into it): read,
                    checked, random folders written; Checkpoint, what the weights argument names
    clip_tokenizer  the byte-level BPE tokenizer (Hugging Face's tokenizers) of a checkpoint's tokenizer.json, or
                    built from its vocab.json and merges.txt; the tests' vocabulary from clip_test_merges.txt
                    (package data, with its README)

May import: models.vit, the shared modules of models (common, files, hub_download, hub_checkpoint, registry,
safetensors_files, text_tokenizer) and parallel.model; no other family, never the engine. Importing the package
imports nothing.
"""

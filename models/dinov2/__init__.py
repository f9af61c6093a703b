"""DINOv2 (ViT-S/14, ViT-B/14): self-supervised image features from models.vit's blocks.

    dinov2_layers   the sizes (pinned checkpoints, parameter counts), endpoints, variables; no TensorFlow
    dinov2          the ModelSpec (bicubic short side 256, centre 224); VITS14, VITB14: the registry's objects
    dinov2_weights  Hugging Face's model.safetensors mapped onto the variables; the position embeddings' resize
                    on the host; random weights

May import: models.vit, the shared modules of models (common, files, hub_download, hub_checkpoint, registry,
safetensors_files) and parallel.model; no other family, never the engine. Importing the package imports nothing.
"""

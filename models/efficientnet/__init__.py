"""EfficientNet (B0): Keras's keras.applications.EfficientNetB0 from raw ops, batch norms folded in at load time.

    efficientnet_layers   the table: Keras's DEFAULT_BLOCKS_ARGS at width and depth 1.0, Keras's layers; no
                          TensorFlow
    efficientnet          the graph (preprocessing inside), its endpoints, Keras's files, the ModelSpec
    efficientnet_weights  Keras's .h5 files (notop, full): read, checked, written; random weights

May import: the shared modules of models (common, files, keras_h5, imagenet_download) and parallel.model; no
other family, never the engine. Importing the package imports nothing.
"""

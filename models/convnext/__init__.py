"""ConvNeXt (Tiny): Keras's keras.applications.ConvNeXtTiny from raw ops.

    convnext_layers   the table (names, Keras names, shapes); no TensorFlow
    convnext          the graph (preprocessing inside), its endpoints, Keras's files, the ModelSpec
    convnext_weights  Keras's .h5 files (Keras 2 and 3 names): read, checked, written (random)

May import: the shared modules of models (common, files, keras_h5, imagenet_download) and parallel.model; no
other family, never the engine. Importing the package imports nothing.
"""

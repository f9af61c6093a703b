"""ResNet (ResNet50): Keras's keras.applications.ResNet50 from raw ops, batch norms folded in at load time.

    resnet_layers   the table by Keras's layer names (shapes, strides, Keras's layer order); no TensorFlow
    resnet          the graph, its endpoints, Keras's files (KerasFile), the ModelSpec
    resnet_weights  Keras's .h5 files (notop, full): read by name and checked; random ones written

May import: the shared modules of models (common, files, keras_h5, imagenet_download), models.vgg16 (Caffe's
preprocessing, which both share) and parallel.model; no other family, never the engine. Importing the
package imports nothing.
"""

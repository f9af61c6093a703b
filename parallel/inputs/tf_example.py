"""tf.train.Example without TensorFlow: its schema built with protobuf alone, and what a job reads of one.

    parse(data)                  -> the Example serialized in `data` (bytes), or None when it is not one
    image_feature(features, image_column, path) -> the name of the image's feature (ValueError when none)
    image_bytes(features, name, record)         -> the image's bytes, or ImageError("missing")
    own_key(features)            -> a record's own key ("key", else "image/filename") as text, or None
    feature_text(feature)        -> a feature's value as the index keeps it (`--keep`), or None

The input layer imports no TensorFlow (importing its example_pb2 imports all of it): the schema of
tensorflow/core/example/{example,feature}.proto is built here, in a descriptor pool of its own, and
parses the same bytes into messages of the same fields.
"""

import functools
import json

import numpy as np
from google.protobuf.message import DecodeError

from parallel.inputs.decode import ImageError

IMAGE_FEATURES = ("image/encoded", "jpg", "jpeg", "png", "webp", "image")  # found by name, in this order
KEY_FEATURES = ("key", "image/filename")  # a record's own key: img2dataset's, else ImageNet's file name


def parse(data):
    """The tf.train.Example serialized in `data`, or None when it is not one."""
    try:
        return _example_class().FromString(data)
    except (DecodeError, RuntimeError, ValueError):
        return None


@functools.lru_cache(maxsize=None)
def _example_class():
    """tf.train.Example's message class, from its schema (tensorflow/core/example/{example,feature}.proto)
    built here with protobuf alone, in a pool of its own: the input layer does not import TensorFlow."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    field = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(name="parallel/tf_example.proto", package="tensorflow", syntax="proto3")

    def message(name, *fields, parent=proto):
        added = (parent.message_type if parent is proto else parent.nested_type).add(name=name)
        for number, (field_name, kind, label, type_name) in enumerate(fields, 1):
            added.field.add(name=field_name, number=number, type=kind, label=label,
                            **({"type_name": type_name} if type_name else {}))
        return added

    repeated, optional = field.LABEL_REPEATED, field.LABEL_OPTIONAL
    message("BytesList", ("value", field.TYPE_BYTES, repeated, None))
    message("FloatList", ("value", field.TYPE_FLOAT, repeated, None)).field[0].options.packed = True
    message("Int64List", ("value", field.TYPE_INT64, repeated, None)).field[0].options.packed = True
    feature = message("Feature", *[(name, field.TYPE_MESSAGE, optional, ".tensorflow." + kind) for name, kind in
                                   (("bytes_list", "BytesList"), ("float_list", "FloatList"),
                                    ("int64_list", "Int64List"))])
    feature.oneof_decl.add(name="kind")
    for added in feature.field:
        added.oneof_index = 0
    features = message("Features", ("feature", field.TYPE_MESSAGE, repeated, ".tensorflow.Features.FeatureEntry"))
    entry = message("FeatureEntry", ("key", field.TYPE_STRING, optional, None),
                    ("value", field.TYPE_MESSAGE, optional, ".tensorflow.Feature"), parent=features)
    entry.options.map_entry = True
    message("Example", ("features", field.TYPE_MESSAGE, optional, ".tensorflow.Features"))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("tensorflow.Example"))


def image_feature(features, image_column, path):
    """The name of the image's feature among an Example's `features` (`image_column`, or the first of
    IMAGE_FEATURES that is a bytes_list); ValueError naming the file `path` and the features it has."""
    names = ", ".join(sorted(features)) or "none"
    if image_column is None:
        for name in IMAGE_FEATURES:
            if name in features and features[name].WhichOneof("kind") == "bytes_list":
                return name
        raise ValueError("%s has no image feature (a bytes_list named %s); its features: %s; pass --image-column "
                         "to name it" % (path, ", ".join(IMAGE_FEATURES), names))
    if image_column not in features:
        raise ValueError("%s has no feature %r; its features: %s; pass --image-column to name the image's"
                         % (path, image_column, names))
    kind = features[image_column].WhichOneof("kind")
    if kind != "bytes_list":
        raise ValueError("the feature %r of %s is a %s, not the bytes_list of an image; its features: %s; pass "
                         "--image-column to name the image's" % (image_column, path, kind, names))
    return image_column


def image_bytes(features, name, record):
    """The image's bytes of `record` (the first value of its feature `name`), or ImageError("missing")."""
    feature = features.get(name)
    if feature is None or feature.WhichOneof("kind") != "bytes_list" or not feature.bytes_list.value:
        return ImageError("missing", "%s has no image bytes (no value of its feature %r)" % (record, name))
    return feature.bytes_list.value[0]


def own_key(features):
    """A record's own key (KEY_FEATURES: its "key", else its "image/filename", one value) as text, or None."""
    for name in KEY_FEATURES:
        feature = features.get(name)
        if feature is not None:
            kind = feature.WhichOneof("kind")
            values = getattr(feature, kind).value if kind else ()
            if len(values) != 1:
                return None
            value = values[0]
            return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else str(value)
    return None


def feature_text(feature):
    """A feature's value kept beside its record: None when absent or empty; bytes decoded UTF-8 (errors
    replaced), numbers str() (a float32 its shortest text); a list of one value is that value, of several a
    JSON list of them."""
    kind = feature.WhichOneof("kind") if feature is not None else None
    if kind is None:
        return None
    values = list(getattr(feature, kind).value)
    if kind == "bytes_list":
        values = [value.decode("utf-8", "replace") for value in values]
    elif kind == "float_list":  # float32s, as their shortest text (0.1, not 0.10000000149011612)
        values = [float(str(np.float32(value))) for value in values]
    if not values:
        return None
    if len(values) == 1:
        return values[0] if kind == "bytes_list" else str(values[0])
    return json.dumps(values, ensure_ascii=False)

"""The input layer: which images a job has, and each image decoded, a batch at a time.

    sources       what --images names: a folder, a prefix of a store (s3://b/photos/), tar shards,
                  Parquet or TFRecord files (a path or URL, a brace pattern, a glob, several)
    file_kinds    tars, Parquet and TFRecord files, told by a name's ending or first bytes; a folder
                  holding such files and no image
    patterns      a pattern's files: bash's brace expansion, then globs, local or in a store
    discovery     which files under a folder are images, with their sizes and times
    remote        objects of a store through fsspec: listed, described (size, time, ETag), fetched
                  (pinned to the recorded ETag: ObjectChanged) and retried
    locations     a job's image or tar, a path or a URL alike: where it is, described, opened as one
                  stream (an object's reopened where it broke, pinned to one version)
    manifest      the job's images (or tars): the frozen manifest and its checksums
    sorting       the images of a folder or a list file in path order, spilled to disk in sorted runs
                  (memory does not grow with the job); a list file read
    changes       what changed in the folder since the job started, and the refusal
    decode        one image file, or its bytes -> uint8 [H, W, 3] RGB, or why not (the failure kinds)
    resize        how a decoded image becomes (H, W): the Resize rule (mode, filter, short side)
    reader        paths or URLs -> decoded uint8 batches [B, 224, 224, 3], in order, on a pool of threads
    members       the keys of images in files read as streams (tar://<member>::<tar>,
                  parquet://<id>::<file>, tfrecord://<id>::<file>) and their index entries
    tars          the index of a shard (each image's offset, size and values kept), written, read,
                  merged; a member read back by one byte range, a row by its entry
    streamed      files read as streams behind one call (tars, Parquet, TFRecord); a key's image read
    tar_stream    a tar read front to back once: its image members and their index entries, damage
                  accounted for; a member name that comes twice
    parquet_stream  a Parquet file read once: its rows' images (datasets, img2dataset), streamed
    tfrecord_stream a TFRecord file (plain or GZIP) read once: its records' images, checksums checked
    tf_example    tf.train.Example parsed with protobuf alone (no TensorFlow)
    streams       a stream of (key, bytes), a tar's members -> decoded batches, in order, read ahead

It knows files, objects and images, not devices, outputs or jobs. May import: parallel.messages,
parallel.output.durable (the manifest and a tar index are written durably), NumPy, Pillow,
pyarrow; fsspec and its stores (s3fs, aiohttp) on first use, for URLs only. No TensorFlow.

The names below are imported on first use (PEP 562).
"""

from parallel.lazy import lazy_exports

# Exported name -> the submodule that defines it.
_EXPORTS = {
    "IMAGE_EXTENSIONS": "parallel.inputs.discovery",
    "Manifest": "parallel.inputs.manifest", "discover_images": "parallel.inputs.manifest",
    "read_list": "parallel.inputs.sorting",
    "ImageError": "parallel.inputs.decode", "load_image": "parallel.inputs.decode",
    "RESIZE_MODES": "parallel.inputs.resize", "Resize": "parallel.inputs.resize",
    "ImageReader": "parallel.inputs.reader", "step_lengths": "parallel.inputs.reader",
    "Source": "parallel.inputs.sources", "parse_images": "parallel.inputs.sources",
    "read_member": "parallel.inputs.tars", "read_index": "parallel.inputs.tars",
    "StreamReader": "parallel.inputs.streams",
    "ObjectChanged": "parallel.inputs.remote", "StoreUnavailable": "parallel.inputs.remote",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)

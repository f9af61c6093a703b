"""The input layer: which images a job has, and each image decoded, a batch at a time.

    discovery     which files under a folder are images, with their sizes and times
    manifest      the job's images: a list file, the frozen manifest and its checksums
    changes       what changed in the folder since the job started, and the refusal
    decode        one image file -> uint8 [H, W, 3] RGB, or why not (the failure kinds)
    reader        paths -> decoded uint8 batches [B, 224, 224, 3], in order, on a pool of threads

It knows files and images, not devices, outputs or jobs. May import: parallel.messages,
parallel.output.durable (the manifest is written durably), NumPy, Pillow, pyarrow. No TensorFlow.

The names below are imported on first use (PEP 562).
"""

from parallel.lazy import lazy_exports

# Exported name -> the submodule that defines it.
_EXPORTS = {
    "IMAGE_EXTENSIONS": "parallel.inputs.discovery",
    "Manifest": "parallel.inputs.manifest", "discover_images": "parallel.inputs.manifest",
    "read_list": "parallel.inputs.manifest",
    "ImageError": "parallel.inputs.decode", "load_image": "parallel.inputs.decode",
    "RESIZE_MODES": "parallel.inputs.decode",
    "ImageReader": "parallel.inputs.reader", "step_lengths": "parallel.inputs.reader",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)

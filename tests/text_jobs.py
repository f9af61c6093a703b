"""Jobs of a small CLIP with captions and labels, for the tests of the text side (parallel/jobs/text_pass.py) and of
search over it (search/captions.py): its weights, six small images, and their datasets with captions.

    with clip_weights(folder) as weights: ...        # CLIP ViT-B/32 is the small CLIP meanwhile (tests/small_clip.py)
    write_images(root)                                # a/00.png .. a/05.png
    files = write_datasets(root, folder)              # {layout: (files, text column)}: Parquet, TFRecord, tars
    jobs.run(config(weights, files, output, text_column="caption"))
"""

import contextlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import dataset_files
import small_clip
from stores import tar_bytes

NAMES = ["a/%02d.png" % number for number in range(6)]


@contextlib.contextmanager
def clip_weights(folder):
    """The small CLIP's folder (str), CLIP ViT-B/32's image and text towers being it until the context closes.

    Its text tower is built for two lengths, 8 and 77, not six: each job builds it (on each device), and two
    cost a third of the time (tests/test_devices_text_runner.py runs all six)."""
    from models.clip import clip, clip_weights as weights_module
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(clip.VIT_B32, "model", small_clip.SMALL)
        patch.setattr(weights_module.VIT_B32, "model", small_clip.SMALL)
        patch.setattr(clip, "TEXT_LENGTHS", (8,))
        with small_clip.small_clip(Path(folder)) as written:
            yield str(written)


def write_images(root):
    """Six small images of random colours, NAMES under `root`: the folder."""
    rng = np.random.default_rng(3)
    for name in NAMES:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 255, (24, 32, 3), dtype=np.uint8)).save(root / name)
    return root


def write_datasets(images, folder):
    """{layout: (the files, the text column)} of the images under `images` in three files of two each, each image's
    caption "caption of <name>" (`dataset_files.caption`): img2dataset's Parquet, WebDataset's TFRecord, tars."""
    (folder / "tars").mkdir(parents=True)
    tars = [folder / "tars" / ("%06d.tar" % number) for number in range(3)]
    for number, tar in enumerate(tars):  # WebDataset samples: an image, then its caption
        tar.write_bytes(tar_bytes([member for name in NAMES[2 * number:2 * number + 2] for member in (
            (name, (images / name).read_bytes()), (name[:-4] + ".txt", dataset_files.caption(name).encode()))]))
    return {"parquet": (dataset_files.write_files("img2dataset", images, folder / "parquet", 2), "caption"),
            "tfrecord": (dataset_files.write_files("wds_tfrecord", images, folder / "tfrecord", 2), "txt"),
            "tars": (tars, "txt")}


def config(weights, images, output, **options):
    """A Parquet job of the small CLIP's embedding over `images` (files, or a folder), in shards of one file (or
    image, unless `shard_size` says), steps of one image: a shard of two embeds its captions in two chunks."""
    from models.clip import clip
    from parallel import jobs
    from parallel.devices import resolve_devices
    model = clip.VIT_B32.feature_model("embedding", weights=weights)
    images = images if isinstance(images, Path) else tuple(map(str, images))
    options = dict({"shard_size": 1}, **options)
    output = output if "://" in str(output) else Path(output)  # a store's URL, or a path
    return jobs.Config(model=model, images=images, output=output, output_format="parquet",
                       devices=resolve_devices(devices="cpu:0", gpu_count=0), per_device_batch=1, workers=1, **options)

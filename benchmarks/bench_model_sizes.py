"""One image's time for each size of the transformer families, compute only: the table of docs/models.md.

    python benchmarks/bench_model_sizes.py                              # every size below
    python benchmarks/bench_model_sizes.py --sizes clip_h14 dinov2_g14 --batch-size 4 --batches 3

For each size: the image tower's graph at that size (a preset's, or the size open_clip's own model config gives:
LAION's H/14 and bigG), its variables zeros (speed does not depend on their values: no weights file is written),
on one CPU device (the Session's only one, as `--devices cpu:0`) in fp32; one batch of random uint8 images of
the model's input size run first (start-up, excluded), then --batches batches timed; seconds per image = the
time over the images. Each size in a fresh process, one after the other, so that one's memory is gone before
the next (bigG's image tower alone is 7.4 GB of float32). The parameters printed are the whole checkpoint's
(both towers of CLIP and SigLIP), as the published files count them.
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# name: (family, preset or open_clip model config, parameters of the checkpoint, as transformers 5.24 counts them)
SIZES = {
    "clip_b32": ("clip", "clip_vit_b32", 151_277_313),
    "clip_b16": ("clip", "clip_vit_b16", 149_620_737),
    "clip_l14": ("clip", "clip_vit_l14", 427_616_513),
    "clip_l14_336": ("clip", "clip_vit_l14_336", 427_944_193),
    "clip_h14": ("clip", "ViT-H-14", 986_109_441),
    "clip_bigg14": ("clip", "ViT-bigG-14", 2_539_567_105),
    "dinov2_s14": ("dinov2", "dinov2_vits14", 22_056_576),
    "dinov2_b14": ("dinov2", "dinov2_vitb14", 86_580_480),
    "dinov2_l14": ("dinov2", "dinov2_vitl14", 304_368_640),
    "dinov2_g14": ("dinov2", "dinov2_vitg14", 1_136_480_768),
    "dinov2_s14_reg": ("dinov2", "dinov2_vits14_reg", 22_058_112),
    "siglip_b16_224": ("siglip", "siglip_base_patch16_224", 203_155_970),
    "siglip2_b16_256": ("siglip", "siglip2_base_patch16_256", 375_234_050),
    "siglip_l16_256": ("siglip", "siglip_large_patch16_256", 652_150_786),
    "siglip_so400m14_384": ("siglip", "siglip_so400m_patch14_384", 877_960_498),
    "siglip2_so400m16_256": ("siglip", "siglip2_so400m_patch16_256", 1_135_670_962),
    "siglip2_giant16_256": ("siglip", "siglip2_giant_opt_patch16_256", 1_871_393_906),
}

CHILD = r"""
import json, os, sys, time, importlib.util, tempfile
from pathlib import Path
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
sys.path.insert(0, sys.argv[1])
import numpy as np
import tensorflow as tf
family, size, batch, batches = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
tf1 = tf.compat.v1
if family == "clip":
    from models.clip import clip, clip_config, clip_layers
    if size in clip_layers.CONFIGS:
        model = clip_layers.CONFIGS[size]
    else:  # open_clip's own model config, read as a checkpoint's open_clip_config.json
        configs = Path(importlib.util.find_spec("open_clip").submodule_search_locations[0]) / "model_configs"
        path = Path(tempfile.mkdtemp()) / "open_clip_config.json"
        path.write_text(json.dumps({"model_cfg": json.loads((configs / (size + ".json")).read_text())}))
        model = clip_config.read_open_clip_config(path)
    side, width = model.image_size, model.projection
    build = lambda images: clip.image_tower(images, model, "embedding")
elif family == "siglip":
    from models.siglip import siglip, siglip_layers
    model = siglip_layers.PRESETS[size].config
    side, width = model.image_size, model.vision.width
    build = lambda images: siglip.image_tower(images, model, "embedding")
else:
    from models.dinov2 import dinov2, dinov2_layers
    variant = dinov2_layers.VARIANTS[size]
    side, width = dinov2_layers.IMAGE_SIZE[0], variant.width
    build = lambda images: dinov2.dinov2(images, variant, "class_token")
with tf.Graph().as_default() as graph:
    images = tf1.placeholder(tf.uint8, [None, side, side, 3])
    features = build(images)
    initialise = tf1.global_variables_initializer()
    config = tf1.ConfigProto(device_count={"CPU": 1})
    with tf1.Session(graph=graph, config=config) as session:
        session.run(initialise)
        pixels = np.random.default_rng(0).integers(0, 255, (batch, side, side, 3), dtype=np.uint8)
        session.run(features, {images: pixels})  # start-up
        started = time.perf_counter()
        for _ in range(batches):
            session.run(features, {images: pixels})
        elapsed = time.perf_counter() - started
print(json.dumps({"seconds_per_image": elapsed / (batch * batches), "input": side, "features": width}))
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="*", default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--batches", type=int, default=3)
    args = parser.parse_args()
    from benchmarks.run_benchmarks import machine
    flags = set(open("/proc/cpuinfo").read().split("flags", 1)[1].split("\n", 1)[0].split())
    print("machine: %s; CPU flags: %s" % (machine(), " ".join(sorted(
        flags & {"avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16"})) or "no AVX2"))
    print("command: %s" % " ".join([Path(sys.argv[0]).name] + sys.argv[1:]))
    for name in args.sizes:
        family, size, parameters = SIZES[name]
        done = subprocess.run([sys.executable, "-c", CHILD, str(ROOT), family, size, str(args.batch_size),
                               str(args.batches)], capture_output=True, text=True)
        if done.returncode != 0:
            print("%-16s failed, exit status %d: %s" % (name, done.returncode,
                                                        (done.stderr.strip().splitlines() or ["?"])[-1]), flush=True)
            continue
        result = json.loads(done.stdout.strip().splitlines()[-1])
        print("%-16s %s: %13s parameters, %4d px, %4d floats, %.3f s per image" % (
            name, size, "{:,}".format(parameters), result["input"], result["features"],
            result["seconds_per_image"]), flush=True)


if __name__ == "__main__":
    main()

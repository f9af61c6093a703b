"""Each model's speed: run_inference.py --model M end-to-end against Keras's `predict` compute-only, and CLIP L/14
end to end against open_clip's, both from the JPEGs.

    python benchmarks/bench_models.py --workdir /tmp/bench-models                 # every model
    python benchmarks/bench_models.py --workdir /tmp/bench-models --models resnet50
    python benchmarks/bench_models.py --workdir /tmp/bench-models --models clip_l14_laion --rounds 3

For each model, alternated for --rounds rounds on the same CPU devices, batch and weights:
- ours: `run_inference.py --model M --weights FILE` on --images JPEGs of 640x480, as a user runs it, its
  images/s read from its own summary line (the read -> run -> write loop; process start-up excluded);
- keras: `keras.applications.<Model>` on the same weights file (CLIP: keras-hub's `CLIPVisionEncoder`, its
  pooler and `vision_projection`, unit-normalised, holding the same checkpoint), `Model.predict` on arrays
  already decoded, resized and preprocessed in memory (compute only: Keras is given no decoding, no reading,
  no writing), in a fresh process, traced on one batch before it is timed.
For SigLIP (B/16 at 224, SigLIP 2 B/16 at 256) the reference is transformers, end to end from the same JPEGs as
ours: its SiglipModel holding the same checkpoint (`from_pretrained` of the random folder), fp32 on PyTorch's CPU
threads (one a core), each batch opened with Pillow, processed by SiglipImageProcessor (the whole image resized,
bicubic, rescaled, normalised) and embedded by `get_image_features`, then unit-normalised (as our `embedding`), in
a fresh process, its first batch excluded.
- open_clip (OPEN_CLIP: CLIP L/14 of LAION's config, `run_inference.py --model clip` on the folder open_clip
  wrote): open_clip's own model (`create_model_and_transforms("local-dir:FOLDER")`, PyTorch on the CPU, fp32 as
  ours) end to end from the same JPEGs, as a user runs it: a torch DataLoader of --workers processes opening each
  file with PIL and applying open_clip's own preprocessing (bicubic resize of the short side, centre crop,
  normalisation), batches of --batch-size into `encode_image(normalize=True)` under `torch.inference_mode()`, the
  features kept in memory; timed from the first batch asked to the last computed, in a fresh process, after the
  model is built (as ours excludes start-up). The random weights are open_clip's own: its `create_model` of the
  config, its `state_dict()` saved as open_clip_model.safetensors with open_clip_config.json, once per workdir.
The ratio ours / reference of each round is printed; the median is judged against the bar (>= 1.0).
For CLIP the text tower's sentences/s is printed too (`text_rate`: `TextTower.embed` on --sentences token id
rows in batches of 64, in a fresh process, after one batch).

Weights are seeded random (`python -m models.weight_files random --model M`): speed does not depend on
their values.
"""

import argparse
import dataclasses
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from benchmarks.run_benchmarks import machine, make_jpegs  # noqa: E402

BAR = 1.0


@dataclasses.dataclass(frozen=True)
class Reference:
    """How Keras computes the features our default layer of a model gives.

    keras: Python building the Keras model `model` whose output is those features, from the module `keras`
      and the weights file `weights` (a path).
    preprocess: Python expression of `x` (float32 [N, 224, 224, 3] RGB, 0..255) giving the model's input.
    weights_file: the name of the weights file (CLIP: folder) written by the random command and read by both.
    """

    keras: str
    preprocess: str
    weights_file: str


REFERENCES = {
    "vgg16": Reference(
        keras=('base = keras.applications.VGG16(weights=None)\nbase.load_weights(weights)\n'
               'model = keras.Model(base.input, base.get_layer("fc2").output)'),
        preprocess="keras.applications.vgg16.preprocess_input(x)",
        weights_file="vgg16_weights_tf_dim_ordering_tf_kernels.h5"),
    # Our avg_pool from the full file is the classifier's LayerNorm after the pooling (preprocessing is inside).
    "convnext_tiny": Reference(
        keras=('base = keras.applications.ConvNeXtTiny(weights=None)\nbase.load_weights(weights)\n'
               'model = keras.Model(base.input, base.get_layer("convnext_tiny_head_layernorm").output)'),
        preprocess="x",
        weights_file="convnext_tiny.h5"),
    "efficientnet_b0": Reference(
        keras=('base = keras.applications.EfficientNetB0(weights=None)\nbase.load_weights(weights)\n'
               'model = keras.Model(base.input, base.get_layer("avg_pool").output)'),
        preprocess="x",  # inside the model
        weights_file="efficientnetb0.h5"),
    "resnet50": Reference(
        keras=('model = keras.applications.ResNet50(weights=None, include_top=False, pooling="avg")\n'
               'model.load_weights(weights)'),
        preprocess="keras.applications.resnet.preprocess_input(x)",
        weights_file="resnet50_weights_tf_dim_ordering_tf_kernels_notop.h5"),
}

def _keras_hub_dinov2(width, heads):
    """keras-hub's DINOV2Backbone for 224 px, loaded by keras-hub's own converter from a folder holding our
    model.safetensors (a config.json is written beside it); its output's class token, as our class_token."""
    return ('import json, pathlib\n'
            'from keras_hub.src.models.dinov2.dinov2_backbone import DINOV2Backbone\n'
            'from keras_hub.src.utils.transformers import convert_dinov2\n'
            'from keras_hub.src.utils.transformers.safetensor_utils import SafetensorLoader\n'
            'folder = pathlib.Path(weights).parent\n'
            'config = {"model_type": "dinov2", "image_size": 518, "patch_size": 14, "num_hidden_layers": 12, '
            '"hidden_size": %d, "num_attention_heads": %d, "mlp_ratio": 4, "layerscale_value": 1.0, '
            '"use_swiglu_ffn": False, "hidden_dropout_prob": 0.0, "drop_path_rate": 0.0}\n'
            '(folder / "config.json").write_text(json.dumps(config))\n'
            'arguments = convert_dinov2.convert_backbone_config(config)\n'
            'arguments.update(image_shape=(224, 224, 3))\n'
            'backbone = DINOV2Backbone(**arguments)\n'
            'with SafetensorLoader(str(folder)) as loader:\n'
            '    convert_dinov2.convert_weights(backbone, loader, config)\n'
            'model = keras.Model(backbone.input, backbone.output[:, 0])' % (width, heads))


# keras-hub's DINOv2 takes normalised pixels (its image converter, left out here as Keras's preprocessing is).
_IMAGENET = "(x / 255 - np.array([0.485, 0.456, 0.406], np.float32)) / np.array([0.229, 0.224, 0.225], np.float32)"
REFERENCES["dinov2_vits14"] = Reference(keras=_keras_hub_dinov2(384, 6), preprocess=_IMAGENET,
                                        weights_file="model.safetensors")
REFERENCES["dinov2_vitb14"] = Reference(keras=_keras_hub_dinov2(768, 12), preprocess=_IMAGENET,
                                        weights_file="model.safetensors")
# keras-hub's CLIP holding our checkpoint (tests/keras_hub_clip.py maps its arrays), its image embedding.
_CLIP_KERAS = ('sys.path[:0] = [%r, %r]\n'
               'from keras_hub_clip import keras_hub_clip\n'
               'from models.clip import clip_layers, clip_weights\n'
               'config = clip_layers.config("{model}")\n'
               'arrays = clip_weights.load_weights(weights + "/model.safetensors", config, ("vision", "text"))\n'
               'backbone = keras_hub_clip(config, arrays)\n'
               'images = keras.Input((224, 224, 3))\n'
               'pooled = backbone.vision_pooler(backbone.vision_encoder(images))\n'
               'model = keras.Model(images, keras.layers.UnitNormalization()(backbone.vision_projection(pooled)))'
               % (str(ROOT), str(ROOT / "tests")))
for _name in ("clip_vit_b32", "clip_vit_b16"):
    REFERENCES[_name] = Reference(
        keras=_CLIP_KERAS.replace("{model}", _name),
        preprocess="(x / 255 - np.float32((0.48145466, 0.4578275, 0.40821073))) / "
                   "np.float32((0.26862954, 0.26130258, 0.27577711))",
        weights_file="clip-random")
LAYERS = {"vgg16": "relu7"}  # our layer equal to the Keras output above, where it is not the model's default
# SigLIP's reference is transformers on PyTorch, end to end from the JPEGs (TRANSFORMERS_SCRIPT).
TRANSFORMERS = ("siglip_base_patch16_224", "siglip2_base_patch16_256")
for _name in TRANSFORMERS:
    REFERENCES[_name] = Reference(keras="", preprocess="", weights_file="siglip-random")

TRANSFORMERS_SCRIPT = r"""
import os, sys, time
from pathlib import Path
import numpy as np
import torch
from PIL import Image
from transformers import SiglipImageProcessor, SiglipModel
torch.set_num_threads(os.cpu_count())
weights, images, per_step = sys.argv[1], sorted(Path(sys.argv[2]).glob("*.jpg")), int(sys.argv[3])
model = SiglipModel.from_pretrained(weights, dtype=torch.float32).eval()
side = model.config.vision_config.image_size
processor = SiglipImageProcessor(size={"height": side, "width": side})

def embed(paths):
    batch = [Image.open(path).convert("RGB") for path in paths]
    with torch.inference_mode():
        pooled = model.get_image_features(**processor(images=batch, return_tensors="pt")).pooler_output
    return torch.nn.functional.normalize(pooled, dim=-1).numpy()

embed(images[:per_step])  # the first batch: start-up, excluded as ours is
started = time.perf_counter()
for begin in range(0, len(images), per_step):
    embed(images[begin:begin + per_step])
print(len(images) / (time.perf_counter() - started))
"""

# {name: open_clip's model config}: `--model clip` on the folder open_clip writes, against open_clip itself.
OPEN_CLIP = {"clip_l14_laion": "ViT-L-14"}

OPEN_CLIP_WRITE = r"""
import json, sys
from pathlib import Path
import open_clip, torch
from open_clip.factory import get_model_config
from safetensors.torch import save_file
folder, name = Path(sys.argv[1]), sys.argv[2]
torch.manual_seed(0)
model = open_clip.create_model(name)  # open_clip's own initialisation: random weights of LAION's config
temporary = folder.with_name(folder.name + ".partial")
temporary.mkdir()
save_file({key: value.contiguous() for key, value in model.state_dict().items()},
          str(temporary / "open_clip_model.safetensors"))
(temporary / "open_clip_config.json").write_text(json.dumps({"model_cfg": get_model_config(name), "preprocess_cfg": {
    "mean": list(open_clip.OPENAI_DATASET_MEAN), "std": list(open_clip.OPENAI_DATASET_STD)}}))
temporary.rename(folder)
"""

OPEN_CLIP_SCRIPT = r"""
import sys, time
from pathlib import Path
import open_clip, torch
from PIL import Image
folder, images = sys.argv[1], sorted(Path(sys.argv[2]).glob("*.jpg"))
batch, workers = int(sys.argv[3]), int(sys.argv[4])
model, _, preprocess = open_clip.create_model_and_transforms("local-dir:" + folder)
model.eval()

class Files(torch.utils.data.Dataset):
    def __len__(self):
        return len(images)

    def __getitem__(self, index):
        with Image.open(images[index]) as image:
            return preprocess(image.convert("RGB"))

loader = torch.utils.data.DataLoader(Files(), batch_size=batch, num_workers=workers)
features = []
started = time.perf_counter()
with torch.inference_mode():
    for pixels in loader:
        features.append(model.encode_image(pixels, normalize=True))
elapsed = time.perf_counter() - started
print(sum(len(rows) for rows in features) / elapsed)
"""


def open_clip_folder(workdir, model):
    """The folder of open_clip's own random weights of `model` (written once, by open_clip, in a fresh process)."""
    folder = workdir / model / "open-clip-random"
    if not folder.exists():
        folder.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-c", OPEN_CLIP_WRITE, str(folder), OPEN_CLIP[model]], check=True,
                       capture_output=True)
    return folder


def open_clip_rate(args, workdir, model, images):
    """images/s of open_clip end to end from the JPEGs (OPEN_CLIP_SCRIPT), one fresh process."""
    result = subprocess.run([sys.executable, "-c", OPEN_CLIP_SCRIPT, str(open_clip_folder(workdir, model)),
                             str(images), str(args.batch_size), str(args.workers)], capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit("%s: the open_clip run failed: %s" % (model, result.stderr.strip().splitlines()[-1]))
    return float(result.stdout.split()[-1])

KERAS_SCRIPT = r"""
import os, sys, time
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np
import keras, tensorflow as tf
weights, count, per_step = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
exec(sys.argv[4])
x = np.random.default_rng(0).integers(0, 255, (count, 224, 224, 3)).astype(np.float32)
inputs = eval(sys.argv[5])
model.predict(inputs[:per_step], batch_size=per_step, verbose=0)  # traced: start-up, excluded as ours is
started = time.perf_counter()
model.predict(inputs, batch_size=per_step, verbose=0)
print(count / (time.perf_counter() - started))
"""


def weights_path(workdir, model):
    path = workdir / model / REFERENCES[model].weights_file
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "models.weight_files", "random", str(path), "--model", model],
                       cwd=ROOT, check=True, capture_output=True)
    return path


def ours(args, workdir, model, images):
    """images/s of run_inference.py on `images`, from its summary line."""
    weights = open_clip_folder(workdir, model) if model in OPEN_CLIP else weights_path(workdir, model)
    command = [sys.executable, str(ROOT / "run_inference.py"), "--model", "clip" if model in OPEN_CLIP else model,
               "--images", str(images), "--weights", str(weights), "--devices", args.devices,
               "--batch-size", str(args.batch_size), "--output", str(workdir / model / "features.npy"),
               "--overwrite"]
    if model in LAYERS:
        command += ["--layer", LAYERS[model]]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit("%s: run_inference.py failed: %s" % (model, result.stderr.strip().splitlines()[-1]))
    summary = result.stderr.strip().splitlines()[-1]
    written = int(summary.split(" written")[0].split()[-1])
    loop = float(summary.split(" skipped in ")[1].split(" s ")[0])
    return written / loop, " ".join(command[1:])


def transformers_rate(args, workdir, model, images):
    """images/s of transformers' SiglipModel end to end from the JPEGs (TRANSFORMERS_SCRIPT), one fresh process."""
    per_step = args.batch_size * len(args.devices.split(","))
    result = subprocess.run([sys.executable, "-c", TRANSFORMERS_SCRIPT, str(weights_path(workdir, model)),
                             str(images), str(per_step)], capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit("%s: the transformers run failed: %s" % (model, result.stderr.strip().splitlines()[-1]))
    return float(result.stdout.split()[-1])


def keras_rate(args, workdir, model):
    reference = REFERENCES[model]
    per_step = args.batch_size * len(args.devices.split(","))
    result = subprocess.run([sys.executable, "-c", KERAS_SCRIPT, str(weights_path(workdir, model)), str(args.images),
                             str(per_step), reference.keras, reference.preprocess],
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit("%s: the Keras run failed: %s" % (model, result.stderr.strip().splitlines()[-1]))
    return float(result.stdout.split()[-1])


TEXT_SCRIPT = r"""
import os, sys, time
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
sys.path.insert(0, sys.argv[4])
import numpy as np
from models.clip.clip import TextTower
from models.clip.clip_tokenizer import Tokenizer
weights, model, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
words = "a photo of the dog cat red blue car on beach in snow with two small big old new man woman".split()
rng = np.random.default_rng(0)
sentences = [" ".join(rng.choice(words, rng.integers(3, 16))) for _ in range(count)]
with TextTower(model, weights=weights) as tower:
    ids = Tokenizer.from_folder(tower.tokenizer_folder).encode(sentences)
    tower.embed(ids[:64])  # the first run: start-up, excluded
    started = time.perf_counter()
    for begin in range(0, count, 64):
        tower.embed(ids[begin:begin + 64])
    print(count / (time.perf_counter() - started))
"""


def text_rate(args, workdir, model):
    """sentences/s of CLIP's text tower (tokenized beforehand) in batches of 64, one fresh process."""
    result = subprocess.run([sys.executable, "-c", TEXT_SCRIPT, str(weights_path(workdir, model)), model,
                             str(args.sentences), str(ROOT)], capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit("%s: the text tower's run failed: %s" % (model, result.stderr.strip().splitlines()[-1]))
    return float(result.stdout.split()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="*", default=list(REFERENCES), choices=list(REFERENCES) + list(OPEN_CLIP))
    parser.add_argument("--devices", default="cpu:0")
    parser.add_argument("--batch-size", type=int, default=12)
    parser.add_argument("--images", type=int, default=96, help="JPEGs of 640x480 for ours; arrays for Keras")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sentences", type=int, default=512, help="for CLIP's text tower")
    parser.add_argument("--workers", type=int, default=os.cpu_count(),
                        help="open_clip's DataLoader processes (ours decodes on one thread per core; default: cores)")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench_models_"))
    workdir.mkdir(parents=True, exist_ok=True)
    images = make_jpegs(workdir / "photos", args.images, (640, 480))
    flags = set(open("/proc/cpuinfo").read().split("flags", 1)[1].split("\n", 1)[0].split())
    print("machine: %s; CPU flags: %s" % (machine(), " ".join(sorted(
        flags & {"avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16"})) or "no AVX2"))
    print("command: %s" % " ".join([Path(sys.argv[0]).name] + sys.argv[1:]))
    for model in args.models:
        ratios = []
        for round_index in range(args.rounds):
            our_rate, command = ours(args, workdir, model, images)
            if model in TRANSFORMERS:
                theirs, what = transformers_rate(args, workdir, model, images), "transformers end to end"
            elif model in OPEN_CLIP:
                theirs, what = open_clip_rate(args, workdir, model, images), "open_clip end to end"
            else:
                theirs, what = keras_rate(args, workdir, model), "keras predict"
            ratios.append(our_rate / theirs)
            print("%-16s round %d: ours %.2f images/s, %s %.2f images/s, ratio %.3f"
                  % (model, round_index + 1, our_rate, what, theirs, our_rate / theirs), flush=True)
        median = float(np.median(ratios))
        print("%-16s median ours/%s %.3f (bar >= %s: %s)   [%s]"
              % (model, what.split()[0], median, BAR, "met" if median >= BAR else "NOT met", command), flush=True)
        if model.startswith("clip_") and model not in OPEN_CLIP:
            print("%-16s text tower: %.1f sentences/s (batches of 64)" % (model, text_rate(args, workdir, model)),
                  flush=True)


if __name__ == "__main__":
    main()

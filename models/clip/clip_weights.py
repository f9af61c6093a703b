"""CLIP's weight files: Hugging Face's `model.safetensors` (and open_clip's `open_clip_model.safetensors`),
read into NumPy, checked against the table in `clip_layers.py`, and written with random weights; and what a
`weights` argument means (`Checkpoint`: the published checkpoint at a pinned commit, another of the hub's at a
commit, a folder or a file).

The two layouts hold the same arrays under other names:
- Hugging Face (`CLIPModel`): `vision_model.embeddings.patch_embedding.weight`, `...encoder.layers.<i>.
  self_attn.{q,k,v,out}_proj.{weight,bias}`, `...mlp.fc1`, `visual_projection.weight` [512, 768], ...
  The conversion of OpenAI's checkpoints also stores the buffers `*.embeddings.position_ids` (int64 0, 1, 2,
  ...): not read.
- open_clip (`CLIP` of github:mlfoundations/open_clip, src/open_clip/model.py and transformer.py):
  `visual.conv1.weight`, `visual.class_embedding`, `visual.positional_embedding`, `visual.ln_pre`,
  `visual.transformer.resblocks.<i>.{ln_1, attn.in_proj_weight [3W, W] (q, k, v stacked), attn.in_proj_bias,
  attn.out_proj, ln_2, mlp.c_fc, mlp.c_proj}`, `visual.ln_post`, `visual.proj` [768, 512] (applied as
  x @ proj: the transpose of Hugging Face's), and for the text tower `token_embedding.weight`,
  `positional_embedding`, `transformer.resblocks.<i>...`, `ln_final`, `text_projection` [512, 512] (x @ it).
The layout is told by the names; open_clip's is renamed into Hugging Face's, so everything downstream reads one.
open_clip's file does not say which activation its MLPs use: it is read as OpenAI's architecture (QuickGELU),
which is right for OpenAI's weights and wrong for checkpoints trained with GELU (LAION's, open_clip's default).

No TensorFlow here, so that

    python -m models.weight_files random clip-random --model clip_vit_b32

starts at once: it writes a folder in Hugging Face's layout, `model.safetensors` with seeded RANDOM weights
shaped as the published checkpoint's. Features computed with them are meaningless.
"""

from pathlib import Path

import numpy as np

from models.clip import clip_layers
from models.registry import layout_of_file, what_else
from models.files import WeightsError, fingerprint
from models.hub_checkpoint import (HubCheckpoint, check_model_type, hub_checkpoint, hub_checkpoint_folder,
                                   is_hub_weights)
from models.safetensors_files import read_tensors, write_tensors

HF_FILE = "model.safetensors"                   # Hugging Face's name of the checkpoint in its repository
OPEN_CLIP_FILE = "open_clip_model.safetensors"  # open_clip's
TOKENIZER_FILES = ("vocab.json", "merges.txt")  # the BPE vocabulary and merges beside the checkpoint
TOKENIZER_JSON = "tokenizer.json"               # the tokenizers library's file of both, read first when there



# ----------------------------------------------------------------------------- reading

def load_weights(path, model, towers=("vision",)):
    """Reads a CLIP checkpoint, checking every array the asked towers need.

    Args:
      path: a safetensors file in Hugging Face's or open_clip's layout.
      model: a `clip_layers.Config` (the shapes expected).
      towers: which parts to return, any of "vision" (the image tower and its projection), "text" (the text
        tower and its projection) and "logit_scale" (the contrastive loss's temperature, which neither tower
        uses: a scalar, [] as in the published files, or [1] as the random command wrote it before).

    Returns:
      {Hugging Face name: float32 array in PyTorch's layout}, e.g. "visual_projection.weight": [512, 768].

    Raises:
      WeightsError: the file is missing or not safetensors, or lacks an array or has one of another shape
        (of another CLIP model?); the message names the file, the array and the shapes.
    """
    tensors = read_tensors(path)
    if "visual.conv1.weight" in tensors or "token_embedding.weight" in tensors:
        tensors = from_open_clip(tensors, model, path)
    parts = {"vision": clip_layers.vision_parameters(model), "text": clip_layers.text_parameters(model),
             "logit_scale": (clip_layers.LOGIT_SCALE,)}
    expected = ()
    for tower in towers:
        if tower not in parts:
            raise ValueError("towers=%r; expected any of 'vision', 'text' and 'logit_scale'" % (towers,))
        expected += parts[tower]
    return _checked(tensors, expected, path, model)


def _checked(tensors, expected, path, model):
    """The arrays `expected` names, as float32, after checking that each is there with its shape."""
    weights = {}
    for name, shape in expected:
        if name not in tensors:
            known = sum(other in tensors for other, _ in clip_layers.parameters(model))
            raise WeightsError("weights=%s has no array %s: it has %d of %s's %d arrays (not a CLIP checkpoint in "
                               "Hugging Face's or open_clip's layout?)%s" % (path, name, known, model.name,
                                                                            len(clip_layers.parameters(model)),
                                                                            what_else(path, model.name)))
        array = tensors[name]
        if tuple(shape) == () and tuple(array.shape) == (1,):
            array = array.reshape(())  # a scalar stored as [1], as the random command wrote logit_scale before
        if tuple(array.shape) != tuple(shape):
            raise WeightsError("weights=%s: %s has shape %s; %s needs %s (a checkpoint of another CLIP model?)"
                               % (path, name, tuple(array.shape), model.name, tuple(shape)))
        if not np.issubdtype(array.dtype, np.floating):
            raise WeightsError("weights=%s: %s is %s, not floats" % (path, name, array.dtype))
        weights[name] = np.asarray(array, dtype=np.float32, order="C")  # not ascontiguousarray: it makes [] [1]
    return weights


def _open_clip_block(source, target):
    """{open_clip name: (Hugging Face names, how)} of one residual block: "split" for the fused q, k, v."""
    pairs = {"ln_1": "layer_norm1", "ln_2": "layer_norm2", "attn.out_proj": "self_attn.out_proj",
             "mlp.c_fc": "mlp.fc1", "mlp.c_proj": "mlp.fc2"}
    names = {}
    for ours, theirs in pairs.items():
        for kind in ("weight", "bias"):
            names["%s%s.%s" % (source, ours, kind)] = ("%s%s.%s" % (target, theirs, kind),)
    for kind in ("weight", "bias"):
        names["%sattn.in_proj_%s" % (source, kind)] = tuple(
            "%sself_attn.%s_proj.%s" % (target, projection, kind) for projection in "qkv")
    return names


def open_clip_names(model):
    """How open_clip's names become Hugging Face's: {open_clip name: (Hugging Face names, ...)}.

    A name with three targets is the fused in_proj (q, k, v stacked on the first axis); `visual.proj` and
    `text_projection` are transposed.
    """
    names = {"visual.conv1.weight": ("vision_model.embeddings.patch_embedding.weight",),
             "visual.class_embedding": ("vision_model.embeddings.class_embedding",),
             "visual.positional_embedding": ("vision_model.embeddings.position_embedding.weight",),
             "visual.proj": ("visual_projection.weight",),
             "token_embedding.weight": ("text_model.embeddings.token_embedding.weight",),
             "positional_embedding": ("text_model.embeddings.position_embedding.weight",),
             "text_projection": ("text_projection.weight",),
             "logit_scale": ("logit_scale",)}
    for ours, theirs in (("visual.ln_pre", "vision_model.pre_layrnorm"),
                         ("visual.ln_post", "vision_model.post_layernorm"),
                         ("ln_final", "text_model.final_layer_norm")):
        for kind in ("weight", "bias"):
            names["%s.%s" % (ours, kind)] = ("%s.%s" % (theirs, kind),)
    for index in range(model.vision.depth):
        names.update(_open_clip_block("visual.transformer.resblocks.%d." % index,
                                      "vision_model.encoder.layers.%d." % index))
    for index in range(model.text.depth):
        names.update(_open_clip_block("transformer.resblocks.%d." % index, "text_model.encoder.layers.%d." % index))
    return names


def from_open_clip(tensors, model, path="<arrays>"):
    """open_clip's arrays renamed (and split, transposed) into Hugging Face's layout.

    Args:
      tensors: {open_clip name: array}, as `read_tensors` gives them.
      model: a `clip_layers.Config`.
      path: the file, for messages.

    Returns:
      {Hugging Face name: array}: those of `tensors` that open_clip's CLIP has (others, e.g. `attn_mask`
      buffers, are left out).

    Raises:
      WeightsError: a fused in_proj whose first axis is not three times its width.
    """
    converted = {}
    for source, targets in open_clip_names(model).items():
        if source not in tensors:
            continue  # reported, with the Hugging Face name, by the check of the arrays needed
        array = tensors[source]
        if source in ("visual.proj", "text_projection"):
            array = array.T
        if len(targets) == 1:
            converted[targets[0]] = array
            continue
        if array.shape[0] % 3:
            raise WeightsError("weights=%s: %s has shape %s: not q, k and v stacked (a first axis of 3 x width)"
                               % (path, source, tuple(array.shape)))
        converted.update(zip(targets, np.split(array, 3, axis=0)))
    return converted


def to_open_clip(weights, model):
    """Hugging Face's arrays in open_clip's layout (the inverse of `from_open_clip`), e.g. for tests."""
    arrays = {}
    for source, targets in open_clip_names(model).items():
        if not all(target in weights for target in targets):
            continue
        array = weights[targets[0]] if len(targets) == 1 else np.concatenate([weights[name] for name in targets])
        arrays[source] = np.asarray(array.T if source in ("visual.proj", "text_projection") else array, order="C")
    return arrays


# ----------------------------------------------------------------------------- writing

def random_weights(model, seed=0):
    """Seeded random weights for every parameter of `model`'s checkpoint, float32.

    The scales keep each block's branch of the residual stream's own order, so that the features depend on
    the image and the text through all the blocks: linear weights with unit gain (N(0, 1 / fan_in)) and
    half of it where a branch ends (out_proj, fc2), LayerNorm scales 0.5 .. 1.5, biases -0.1 .. 0.1,
    embeddings N(0, 0.5), logit_scale ln(100) as trained. Features computed with them are meaningless:
    they are for tests, benchmarks and checking an installation.

    Args:
      model: a `clip_layers.Config`.
      seed: seed of numpy's default generator; the same seed gives the same weights.

    Returns:
      {Hugging Face name: array}, the shapes of `clip_layers.parameters(model)`.
    """
    rng = np.random.default_rng(seed)

    def array(name, shape):
        if name == "logit_scale":
            return np.asarray(np.log(100.0), np.float32)
        if "norm" in name:
            if name.endswith("weight"):
                return rng.uniform(0.5, 1.5, shape).astype(np.float32)
            return rng.uniform(-0.1, 0.1, shape).astype(np.float32)
        if "embedding" in name and "patch_embedding" not in name:
            return rng.standard_normal(shape, dtype=np.float32) * np.float32(0.5)
        if name.endswith("bias"):
            return rng.uniform(-0.1, 0.1, shape).astype(np.float32)
        fan_in = int(np.prod(shape[1:]))  # PyTorch's [out, in, ...]
        gain = 0.5 if ("out_proj" in name or "fc2" in name) else 1.0
        return rng.standard_normal(shape, dtype=np.float32) * np.float32(gain / np.sqrt(fan_in))

    return {name: array(name, shape) for name, shape in clip_layers.parameters(model)}


def position_ids(model):
    """The buffers Hugging Face's conversion of OpenAI's checkpoints stores beside the weights: int64 [1, 50]
    (B/32; [1, 197] for B/16) and [1, 77], 0, 1, 2, ... (`load_weights` ignores them)."""
    return {"vision_model.embeddings.position_ids": np.arange(model.positions, dtype=np.int64)[None],
            "text_model.embeddings.position_ids": np.arange(model.context_length, dtype=np.int64)[None]}


def write_checkpoint(weights, path, layout="hf", model=None):
    """Writes CLIP's arrays as a safetensors file, durably.

    Args:
      weights: {Hugging Face name: array}.
      path: the file to write.
      layout: "hf" (Hugging Face's names and `position_ids` buffers, header metadata {"format": "pt"}, as
        its files have) or "open_clip".
      model: the `clip_layers.Config`.
    """
    if layout == "open_clip":
        write_tensors(path, to_open_clip(weights, model))
    elif layout == "hf":
        write_tensors(path, dict(weights, **position_ids(model)), {"format": "pt"})
    else:
        raise ValueError("layout=%r; expected 'hf' or 'open_clip'" % (layout,))


class RandomFiles:
    """The `random` command's writer for one CLIP model (the registry's `weights` entry).

    Attributes:
      RANDOM_SUFFIXES: {"": a folder in Hugging Face's layout, ".safetensors": the checkpoint alone}.
    """

    RANDOM_SUFFIXES = {"": "Hugging Face's folder (%s, %s)" % (HF_FILE, ", ".join((TOKENIZER_JSON,) + TOKENIZER_FILES)),
                       ".safetensors": "Hugging Face's %s" % HF_FILE}

    def __init__(self, model):
        self.model = model

    def tensors(self):
        """{name: shape} of the image tower's tensors in Hugging Face's checkpoint: what tells this model's
        checkpoints from the others' (`models.registry.holder`)."""
        return dict(clip_layers.vision_parameters(self.model))

    def write_random(self, path, seed=0):
        """Writes seeded random weights of the model to `path`: a folder (the path has no extension) holding
        model.safetensors and the tests' tokenizer.json, vocab.json and merges.txt (a real prefix of CLIP's merges:
        `models.clip.clip_tokenizer.write_test_vocabulary`), or the .safetensors file alone. 151 M (B/32) or 150 M
        (B/16) float32 parameters, about 600 MB. The folder is made whole or not at all."""
        from models.clip.clip_tokenizer import write_test_vocabulary

        path = Path(path)
        weights = random_weights(self.model, seed)
        if path.suffix.lower() == ".safetensors":
            write_checkpoint(weights, path, model=self.model)
            return
        path.mkdir()
        try:
            write_checkpoint(weights, path / HF_FILE, model=self.model)
            write_test_vocabulary(path)
        except BaseException:
            for child in path.iterdir():
                child.unlink()
            path.rmdir()
            raise


VIT_B32 = RandomFiles(clip_layers.VIT_B32)
VIT_B16 = RandomFiles(clip_layers.VIT_B16)


# ----------------------------------------------------------------------------- the weights argument

# The published checkpoints, each pinned to a commit of its repository ("imagenet", the default name, means it).
# openai/clip-vit-base-patch32's model.safetensors came with the commit c237dc49 (the conversion to safetensors;
# its main branch had only the pickled pytorch_model.bin). openai/clip-vit-base-patch16 is pinned where public
# evaluation code pins it (MTEB's model table, among others): 57c21647, its main branch as that code cites it,
# which public listings show with pytorch_model.bin; whether it holds model.safetensors could not be checked here
# (no network): if it does, that is read; if it holds only the pickle, "imagenet" is refused in one line, never
# unpickled (models/hub_checkpoint.py). No public source names the files' SHA-256: each is checked against the
# hub's own hash (models/hub_download.py).
PINNED_COMMITS = {"clip_vit_b32": "c237dc49a33fc61debc9276459120b7eac67e7ef",
                  "clip_vit_b16": "57c216476eefef5ab752ec549e440a49ae4ae5f3"}
_RANDOM_COMMAND = "python -m models.weight_files random clip-random --model %s"
_HUB_FILES = ("config.json", TOKENIZER_JSON) + TOKENIZER_FILES  # beside the weights, when the commit has them


def hub_checkpoint_of(model, weights="imagenet"):
    """The HubCheckpoint that `weights` names for `model` (a clip_layers.Config): "imagenet", its pinned commit,
    or "hf://ORG/NAME@COMMIT".

    Raises:
      WeightsError: a model without a pinned commit, or an hf:// form that names none (models.hub_checkpoint).
    """
    what, command = "CLIP %s checkpoint's" % model.name, _RANDOM_COMMAND % model.name
    if weights != "imagenet":
        return hub_checkpoint(weights, what, command)
    if model.name not in PINNED_COMMITS:
        raise WeightsError("weights=imagenet: no commit of %s is pinned here; pass hf://%s@COMMIT, or a downloaded "
                           "folder, --weights FOLDER" % (model.name, model.hub_repo))
    return HubCheckpoint(model.hub_repo, PINNED_COMMITS[model.name], what, command)


class Checkpoint:
    """A CLIP model's `weights` argument: "imagenet" (the published checkpoint at its pinned commit) or
    "hf://ORG/NAME@COMMIT", fetched into huggingface_hub's cache with their tokenizer files when first read; a
    folder in Hugging Face's layout (model.safetensors, or open_clip_model.safetensors, with tokenizer.json, or
    vocab.json and merges.txt); or a .safetensors file (the tokenizer's files then looked for beside it).

    Attributes:
      identity: its part of a job's identity (the hub's repository, commit and file, or the file's fingerprint).
      files: the local files it reads, which a job never writes over: () for the hub's.
    """

    def __init__(self, weights, model, cache_dir=None):
        """
        Args:
          weights: "imagenet", "hf://ORG/NAME@COMMIT", a folder or a .safetensors file.
          model: the clip_layers.Config.
          cache_dir: the hub's cache folder for the hub's checkpoints (default: huggingface_hub's).

        Raises:
          WeightsError: a path that is neither a file nor a folder holding a checkpoint; a hub checkpoint not
            pinned to a commit. (The hub's files are fetched when they are first read, not here.)
        """
        self.model, self._cache_dir, self._folder = model, cache_dir, None
        self.hub = hub_checkpoint_of(model, weights) if weights == "imagenet" or is_hub_weights(weights) else None
        if self.hub is not None:
            self.identity, self.files = self.hub.file(HF_FILE).identity, ()
            return
        path = Path(weights)
        if path.is_dir():
            found = [path / name for name in (HF_FILE, OPEN_CLIP_FILE) if (path / name).is_file()]
            if not found:
                raise WeightsError("weights=%s is a folder without %s or %s" % (weights, HF_FILE, OPEN_CLIP_FILE))
            path = found[0]
        elif not path.is_file():
            raise WeightsError("weights=%s is neither a file nor a folder (pass a folder holding %s, the file "
                               "itself, 'imagenet' or hf://ORG/NAME@COMMIT)" % (weights, HF_FILE))
        elif layout_of_file(path):  # an .npy, an .h5: said now, not as a safetensors header's length
            raise WeightsError("weights=%s is not a safetensors file: %s" % (weights, layout_of_file(path)))
        self._path = path
        self.identity, self.files = fingerprint(path), (str(path),)

    def _hub_folder(self):
        """The hub checkpoint's snapshot folder, its files fetched once, its config's model type checked."""
        if self._folder is None:
            folder = hub_checkpoint_folder(self.hub, (HF_FILE, OPEN_CLIP_FILE), _HUB_FILES, self._cache_dir)
            check_model_type(folder, "clip", self.hub.weights)
            self._folder = folder
        return self._folder

    def path(self):
        """The checkpoint to read: the hub's (model.safetensors, else open_clip_model.safetensors; downloaded if
        absent), else the file."""
        if self.hub is None:
            return self._path
        folder = self._hub_folder()
        return next(folder / name for name in (HF_FILE, OPEN_CLIP_FILE) if (folder / name).is_file())

    def tokenizer_folder(self):
        """The folder of the tokenizer's files that came with the weights (fetched for the hub's): tokenizer.json,
        or vocab.json and merges.txt.

        Raises:
          WeightsError: they are not beside the checkpoint.
        """
        folder = self._hub_folder() if self.hub is not None else self._path.parent
        if not (folder / TOKENIZER_JSON).is_file() and not all((folder / name).is_file() for name in TOKENIZER_FILES):
            raise WeightsError("weights=%s: no tokenizer.json, nor vocab.json and merges.txt, beside it (the "
                               "tokenizer's files that come with the checkpoint)"
                               % (self.hub.weights if self.hub is not None else self._path))
        return folder

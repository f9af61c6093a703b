"""SigLIP's weight files: transformers' `model.safetensors` with its `config.json` (the size) and tokenizer files, read
into NumPy and checked against the table in `siglip_layers.py`, written with random weights; and what a `weights`
argument means (`Checkpoint`: a preset's published files at a pinned commit, or a folder).

The layout is transformers' `SiglipModel`'s (SigLIP 2's fixed-resolution checkpoints included):
`vision_model.embeddings.patch_embedding.{weight,bias}`, `vision_model.embeddings.position_embedding.weight`,
`vision_model.encoder.layers.<i>.{self_attn.{q,k,v,out}_proj, layer_norm1, mlp.fc1, mlp.fc2, layer_norm2}`,
`vision_model.post_layernorm`, `vision_model.head.{probe [1, 1, W], attention.in_proj_weight [3W, W] (q, k, v
stacked, nn.MultiheadAttention's packing), attention.in_proj_bias, attention.out_proj, layernorm, mlp}`,
`text_model.embeddings.{token,position}_embedding.weight`, `text_model.encoder.layers.<i>...`,
`text_model.final_layer_norm`, `text_model.head.{weight,bias}`, `logit_scale` [1], `logit_bias` [1].

No TensorFlow here, so that

    python -m models.weight_files random siglip-random --model siglip2_base_patch16_256

starts at once: it writes a folder in transformers' layout (config.json, model.safetensors and a small tokenizer of
the model's kind) with seeded RANDOM weights. Features computed with them are meaningless.
"""

import json
from pathlib import Path

import numpy as np

from models.files import WeightsError, fingerprint
from models.hub_checkpoint import check_model_type, hub_checkpoint, hub_checkpoint_folder, is_hub_weights
from models.hub_download import HubFile, hub_file
from models.safetensors_files import read_tensors, write_tensors
from models.siglip import siglip_layers
from models.siglip.siglip_layers import CONFIG_FILE
from models.vit.vit_config import hf_activation
from models.vit.vit_layers import random_hf_array

HF_FILE = "model.safetensors"
SPIECE_FILE = "spiece.model"              # SigLIP's SentencePiece model
TOKENIZER_FILE = "tokenizer.json"         # SigLIP 2's (Gemma's) tokenizer, for the `tokenizers` library
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"


# ----------------------------------------------------------------------------- reading

def load_weights(path, model, towers=("vision",)):
    """Reads a SigLIP checkpoint, checking every array the asked towers need.

    Args:
      path: transformers' model.safetensors.
      model: a `siglip_layers.Config` (the shapes expected).
      towers: any of "vision" (the image tower with its pooling head), "text" (the text tower with its head) and
        "logits" (logit_scale and logit_bias: the probability of an image and a sentence).

    Returns:
      {transformers' name: float32 array in PyTorch's layout}.

    Raises:
      WeightsError: the file is missing or not safetensors, lacks an array, or has one of another shape (a
        checkpoint of another size than its config.json says?); the message names the file, the array and shapes.
    """
    parts = {"vision": siglip_layers.vision_parameters(model), "text": siglip_layers.text_parameters(model),
             "logits": siglip_layers.LOGITS}
    expected = ()
    for tower in towers:
        if tower not in parts:
            raise ValueError("towers=%r; expected any of 'vision', 'text' and 'logits'" % (towers,))
        expected += parts[tower]
    tensors = read_tensors(path)
    weights = {}
    for name, shape in expected:
        if name not in tensors:
            known = sum(other in tensors for other, _ in siglip_layers.parameters(model))
            raise WeightsError("weights=%s has no array %s: it has %d of the %d arrays of a SigLIP checkpoint of this "
                               "size (not transformers' SiglipModel layout?)" % (
                                   path, name, known, len(siglip_layers.parameters(model))))
        array = tensors[name]
        if tuple(array.shape) != tuple(shape):
            raise WeightsError("weights=%s: %s has shape %s; its %s says %s" % (
                path, name, tuple(array.shape), CONFIG_FILE, tuple(shape)))
        if not np.issubdtype(array.dtype, np.floating):
            raise WeightsError("weights=%s: %s is %s, not floats" % (path, name, array.dtype))
        weights[name] = np.ascontiguousarray(array, dtype=np.float32)
    return weights


def logits(weights):
    """(logit_scale, logit_bias) as floats, from `load_weights(..., towers=("logits",))`."""
    return float(weights["logit_scale"].reshape(())), float(weights["logit_bias"].reshape(()))


# ----------------------------------------------------------------------------- writing

def random_weights(model, seed=0):
    """Seeded random weights for every parameter of `model`'s checkpoint, float32.

    The scales keep each block's branch of the residual stream's own order, so that the features depend on the
    image and the text through all the blocks: linear weights with unit gain (N(0, 1 / fan_in)), half of it where a
    branch ends (out_proj, fc2), LayerNorm scales 0.5 .. 1.5, biases -0.1 .. 0.1, embeddings and the probe N(0, 0.5),
    logit_scale ln(10) and logit_bias -10 (the order of a trained SigLIP's). Features computed with them are
    meaningless: they are for tests, benchmarks and checking an installation.

    Args:
      model: a `siglip_layers.Config`.
      seed: seed of numpy's default generator; the same seed gives the same weights.

    Returns:
      {transformers' name: array}, the shapes of `siglip_layers.parameters(model)`.
    """
    rng = np.random.default_rng(seed)

    def array(name, shape):
        if name == "logit_scale":
            return np.full(shape, np.log(10.0), np.float32)
        if name == "logit_bias":
            return np.full(shape, -10.0, np.float32)
        if name.endswith("probe"):  # the pooling head's query: an embedding's scale
            return rng.standard_normal(shape, dtype=np.float32) * np.float32(0.5)
        return random_hf_array(rng, name, shape)

    return {name: array(name, shape) for name, shape in siglip_layers.parameters(model)}


def config_dict(model):
    """A config.json's content for `model`, in transformers' layout (every size written out), as
    `SiglipConfig(...).to_dict()` would hold it: what the random command writes beside its weights."""
    def tower(config, model_type):
        return {"model_type": model_type, "hidden_size": config.width, "intermediate_size": config.mlp_width,
                "num_hidden_layers": config.depth, "num_attention_heads": config.heads,
                "hidden_act": hf_activation(config.activation),
                "layer_norm_eps": config.epsilon}
    text = dict(tower(model.text, "siglip_text_model"), vocab_size=model.vocabulary_size,
                max_position_embeddings=model.context_length, projection_size=model.projection)
    vision = dict(tower(model.vision, "siglip_vision_model"), image_size=model.image_size,
                  patch_size=model.patch_size, num_channels=3)
    return {"architectures": ["SiglipModel"], "model_type": "siglip", "text_config": text, "vision_config": vision}


def write_checkpoint(weights, folder, model):
    """Writes a folder in transformers' layout: model.safetensors (header metadata {"format": "pt"}) and config.json
    (`config_dict`), each durably; the tokenizer's files are the caller's."""
    from parallel.output.durable import replace_atomically  # standard library only: no engine
    folder = Path(folder)
    write_tensors(folder / HF_FILE, weights, {"format": "pt"})
    replace_atomically(folder / CONFIG_FILE, (json.dumps(config_dict(model), indent=2) + "\n").encode())


class RandomFiles:
    """The `random` command's writer for one SigLIP model (the registry's `weights` entry).

    Attributes:
      RANDOM_SUFFIXES: {"": a folder in transformers' layout}.
    """

    RANDOM_SUFFIXES = {"": "transformers' folder (%s, %s, a tokenizer)" % (CONFIG_FILE, HF_FILE)}

    def __init__(self, name):
        self.name = name

    def tensors(self):
        """{name: shape} of the preset's image tower and token embeddings in transformers' checkpoint: what tells its
        checkpoints from the others' (`models.registry.holder`; the vocabulary tells SigLIP 2 from SigLIP)."""
        model = siglip_layers.preset(self.name).config
        return dict(siglip_layers.vision_parameters(model) + siglip_layers.text_parameters(model)[:1])

    def write_random(self, path, seed=0):
        """Writes seeded random weights of the preset to the folder `path` (made whole or not at all), with a small
        tokenizer of its kind (`siglip_tokenizer.write_random_tokenizer`). SigLIP B/16 holds 203 M float32
        parameters (813 MB), SigLIP 2 B/16 375 M (1.5 GB: Gemma's vocabulary of 256,000)."""
        from models.siglip.siglip_tokenizer import write_random_tokenizer

        if self.name == siglip_layers.FAMILY:
            raise WeightsError("model=siglip takes its size from a checkpoint's %s: write random weights of a named "
                               "size (--model %s, ...)" % (CONFIG_FILE, next(iter(siglip_layers.PRESETS))))
        preset = siglip_layers.preset(self.name)
        path = Path(path)
        path.mkdir()
        try:
            write_checkpoint(random_weights(preset.config, seed), path, preset.config)
            write_random_tokenizer(path, gemma=preset.siglip2)
        except BaseException:
            for child in path.iterdir():
                child.unlink()
            path.rmdir()
            raise


def __getattr__(name):
    """The registry's weights objects, one per name: `siglip` and each preset (PEP 562)."""
    if name == siglip_layers.FAMILY or name in siglip_layers.PRESETS:
        return RandomFiles(name)
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


# ----------------------------------------------------------------------------- the weights argument

_RANDOM_COMMAND = "python -m models.weight_files random siglip-random --model %s"


def hub_files(preset):
    """{file name: HubFile} that "imagenet" means for a preset: the checkpoint, its config and its tokenizer's
    files, at the pinned commit. None of their SHA-256s is pinned here (no public source gives them): each is
    checked against the hub's own hash (models/hub_download.py)."""
    names = {HF_FILE: "SigLIP weights (%s)" % preset.hub_repo, CONFIG_FILE: "SigLIP's config",
             TOKENIZER_CONFIG_FILE: "SigLIP's tokenizer config"}
    if preset.siglip2:
        names[TOKENIZER_FILE] = "SigLIP 2's Gemma tokenizer"
    else:
        names[SPIECE_FILE] = "SigLIP's SentencePiece model"
    command = _RANDOM_COMMAND % preset.config.name
    return {name: HubFile(preset.hub_repo, preset.revision, name, None, what, command) for name, what in names.items()}


class Checkpoint:
    """A SigLIP model's `weights` argument: "imagenet" (a preset's published files, from the hub's cache or
    downloaded into it at the pinned commit), "hf://ORG/NAME@COMMIT" (a checkpoint of the hub at a commit, its files
    fetched into huggingface_hub's cache), or a folder in transformers' layout (config.json, model.safetensors, and
    spiece.model or tokenizer.json for the text tower).

    Attributes:
      model: the siglip_layers.Config: the preset's, or the checkpoint's config.json's (checked to be the preset's
        when `name` is one: a folder's now, a hub checkpoint's when it is fetched, as the weights are read).
      identity: its part of a job's identity (the hub file's repository and commit, or the file's fingerprint).
      files: the local files it reads, which a job never writes over: () for the hub's.
      folder: the folder of its config and tokenizer files (downloaded for the hub's when asked: `tokenizer_folder`).
    """

    def __init__(self, weights, name, cache_dir=None):
        """
        Args:
          weights: "imagenet", "hf://ORG/NAME@COMMIT", or a folder (or the model.safetensors in one).
          name: the registry's name: "siglip" (the size from the checkpoint's config.json: an hf:// checkpoint's
            fetched now, with the weights) or a preset's.
          cache_dir: the hub's cache folder for the hub's checkpoints (default: huggingface_hub's).

        Raises:
          WeightsError: "imagenet" for "siglip" (no size named); a path that is not a folder holding
            model.safetensors and config.json; an hf:// form that names no commit; a folder whose config.json is not
            the preset's size. ConfigError: a config.json this code cannot compute (one line naming the field).
        """
        self.name, self._cache_dir, self.hub, self.folder = name, cache_dir, None, None
        self.imagenet = weights == "imagenet"
        self._preset = siglip_layers.PRESETS.get(name)
        if self.imagenet:
            if self._preset is None:
                raise WeightsError("weights=imagenet: --model %s reads its size from a checkpoint; pass --weights "
                                   "FOLDER (config.json, model.safetensors and the tokenizer's files) or "
                                   "hf://ORG/NAME@COMMIT, or name a size (--model %s, ...)"
                                   % (name, next(iter(siglip_layers.PRESETS))))
            self._hub = hub_files(self._preset)
            self.model = self._preset.config
            self.identity, self.files = self._hub[HF_FILE].identity, ()
            return
        if is_hub_weights(weights):
            self.hub = hub_checkpoint(weights, "SigLIP %s checkpoint's" % name, _RANDOM_COMMAND % name)
            self.identity, self.files = self.hub.file(HF_FILE).identity, ()
            # The family's size is the config's: fetched now, with the weights; a preset's when it is read.
            self.model = self._preset.config if self._preset is not None else self._hub_folder()[1]
            return
        path = Path(weights)
        if path.is_file() and path.name == HF_FILE:
            path = path.parent
        if not path.is_dir():
            raise WeightsError("weights=%s is not a folder (pass the checkpoint's folder: %s, %s and its tokenizer's "
                               "files)" % (weights, CONFIG_FILE, HF_FILE))
        if not (path / HF_FILE).is_file():
            raise WeightsError("weights=%s is a folder without %s" % (weights, HF_FILE))
        self.model, self.folder = self._sized(path, weights), path
        self.identity, self.files = fingerprint(path / HF_FILE), (str(path / HF_FILE), str(path / CONFIG_FILE))

    def _sized(self, folder, weights):
        """The Config of `folder`'s config.json, checked to be the preset's size when the name is a preset's."""
        model = siglip_layers.read_config(folder, self.name)
        if self._preset is not None and not siglip_layers.same_size(model, self._preset.config):
            raise WeightsError("weights=%s: its %s is not %s's size (%s); pass --model siglip to take the size from "
                               "it" % (weights, CONFIG_FILE, self.name, self._preset.config.describe()))
        return model

    def _hub_folder(self):
        """(folder, Config) of the hf:// checkpoint: its files fetched once, its config's model type and size
        checked."""
        if self.folder is None:
            folder = hub_checkpoint_folder(self.hub, (HF_FILE,), cache_dir=self._cache_dir)
            check_model_type(folder, siglip_layers.FAMILY, self.hub.weights)
            self._hub_model, self.folder = self._sized(folder, self.hub.weights), folder
        return self.folder, self._hub_model

    def path(self):
        """model.safetensors: the hub's cache file for "imagenet" and hf:// (downloaded if absent), else the
        folder's."""
        if self.imagenet:
            return hub_file(self._hub[HF_FILE], self._cache_dir)
        return (self._hub_folder()[0] if self.hub is not None else self.folder) / HF_FILE

    def tokenizer_folder(self):
        """The folder of the tokenizer's files that came with the weights (downloaded for the hub's).

        Raises:
          WeightsError: neither spiece.model nor tokenizer.json is beside the checkpoint.
        """
        if self.imagenet:
            folders = {hub_file(file, self._cache_dir).parent for name, file in self._hub.items() if name != HF_FILE}
            return folders.pop()  # one commit, one snapshot folder
        folder = self._hub_folder()[0] if self.hub is not None else self.folder
        if not any((folder / name).is_file() for name in (SPIECE_FILE, TOKENIZER_FILE)):
            raise WeightsError("weights=%s: no %s or %s beside it (the tokenizer's files that come with the "
                               "checkpoint)" % (self.hub.weights if self.hub is not None else folder, SPIECE_FILE,
                                                TOKENIZER_FILE))
        return folder

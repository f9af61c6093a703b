"""`--weights hf://ORG/NAME@COMMIT`: a checkpoint of the Hugging Face hub at a pinned commit, its files fetched into
huggingface_hub's cache (`hub_download.hub_file`: checked against the hub's hashes), and the kind of model its
config says it is. Every family whose files come from the hub reads them through here; a family's `imagenet`
name is such a checkpoint, pinned in the family's module.

    checkpoint = hub_checkpoint("hf://openai/clip-vit-base-patch16@57c216476eefef5ab752ec549e440a49ae4ae5f3")
    folder = hub_checkpoint_folder(checkpoint)   # <cache>/models--openai--clip-vit-base-patch16/snapshots/57c2.../
    folder = hub_checkpoint_folder(checkpoint.weights)   # the same: the --weights string will do
    check_model_type(folder, "clip", checkpoint.weights)   # config.json's model_type is one CLIP's family reads

The form is huggingface_hub's URI (`parse_hf_uri`): a model repository and a revision, which must be a commit id
(40 hex digits): a branch or a tag moves, and the features with it, so `hf://ORG/NAME` and `hf://ORG/NAME@main`
are refused, in one line saying how to pin them or pass a downloaded folder.

The folder holds the commit's weights (the first of `weight_files` it has: model.safetensors, else
open_clip_model.safetensors) and those of the configs and tokenizer files it has (config.json,
open_clip_config.json, preprocessor_config.json, tokenizer.json, vocab.json and merges.txt, spiece.model, ...). A
commit with only pickled weights (pytorch_model.bin) is refused in one line: a pickle can run code when it is
read, and is never read here.
"""

import dataclasses
import json
from pathlib import Path

from models.files import MODEL_TYPES, WeightsError, checkpoint_model_type
from models.hub_download import (COMMIT, HubFile, HubFileAbsent, HubUnreachable, cache_path, cached_absent,
                                 hub_file, hub_has, hub_offline)

HUB_SCHEME = "hf://"
WEIGHT_FILES = ("model.safetensors", "open_clip_model.safetensors")
PICKLED_FILES = ("pytorch_model.bin", "open_clip_pytorch_model.bin")
CONFIG_FILES = ("config.json", "open_clip_config.json", "preprocessor_config.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt",
                   "spiece.model")


@dataclasses.dataclass(frozen=True)
class HubCheckpoint:
    """A repository of the hub at a pinned commit.

    Attributes:
      repo: "owner/name".
      revision: the commit id, 40 hex digits.
      what: what it holds, for messages ("CLIP clip_vit_b16 weights").
      random_command: the command that writes random weights in its layout, offered when it cannot be had.
      sha256: ((file name, SHA-256), ...) pinned here; any other file is checked against the hub's hash.
    """

    repo: str
    revision: str
    what: str = "checkpoint"
    random_command: str = "python -m models.weight_files random FOLDER --model NAME"
    sha256: tuple = ()

    def __post_init__(self):
        HubFile(self.repo, self.revision, "-", None, self.what, self.random_command)  # the same checks of a pin

    @property
    def weights(self):
        """The --weights that names it: hf://owner/name@commit."""
        return "%s%s@%s" % (HUB_SCHEME, self.repo, self.revision)

    def file(self, filename):
        """The HubFile of one of its files, with its pinned SHA-256 if it has one."""
        return HubFile(self.repo, self.revision, filename, dict(self.sha256).get(filename),
                       "%s %s" % (self.what, filename), self.random_command)


def is_hub_weights(weights):
    """Whether a --weights value names a hub checkpoint (hf://...), not a path or a name."""
    return isinstance(weights, str) and weights.startswith(HUB_SCHEME)


def hub_checkpoint(weights, what="checkpoint", random_command=HubCheckpoint.random_command, sha256=()):
    """The HubCheckpoint `weights` names: "hf://ORG/NAME@COMMIT" (huggingface_hub's `parse_hf_uri`).

    Raises:
      WeightsError: not that form (one line saying what is wrong): no commit, a branch or tag instead of one,
        another kind of repository (a dataset), a file inside the repository, or a malformed name.
    """
    from huggingface_hub import parse_hf_uri
    from huggingface_hub.errors import HfUriError

    try:
        uri = parse_hf_uri(weights)
    except HfUriError as error:
        raise WeightsError("weights=%s: %s; expected hf://ORG/NAME@COMMIT"
                           % (weights, str(error).splitlines()[0].removeprefix("Invalid HF URI '%s'. " % weights)
                              .rstrip(". "))) from None
    pinned = "hf://%s@COMMIT (COMMIT: the 40 hex digits of the commit whose files you mean, listed at " \
             "https://huggingface.co/%s/commits/main)" % (uri.id, uri.id)
    folder = "or pass a downloaded folder, --weights FOLDER (`hf download %s --local-dir FOLDER`)" % uri.id
    if uri.type != "model":
        raise WeightsError("weights=%s names a %s repository; expected a model's, hf://ORG/NAME@COMMIT"
                           % (weights, uri.type))
    if uri.path_in_repo:
        raise WeightsError("weights=%s names the file %s; expected the repository at a commit, hf://%s@COMMIT "
                           "(its files are found there)" % (weights, uri.path_in_repo, uri.id))
    if uri.revision is None:
        raise WeightsError("weights=%s names no commit, and weights must be pinned: pass %s, %s"
                           % (weights, pinned, folder))
    if not COMMIT.fullmatch(uri.revision):
        raise WeightsError("weights=%s: %r is a branch or a tag, which moves (and the features with it), not a "
                           "commit id: pass %s, %s" % (weights, uri.revision, pinned, folder))
    return HubCheckpoint(uri.id, uri.revision, what, random_command, tuple(sha256))


def hub_checkpoint_folder(checkpoint, weight_files=WEIGHT_FILES, optional=CONFIG_FILES + TOKENIZER_FILES,
                          cache_dir=None):
    """The folder of `checkpoint`'s files in huggingface_hub's cache, those absent downloaded into it: its weights
    (the first of `weight_files` the commit has) and those of `optional` it has.

    A file the cache holds is not asked for again, nor one the cache records the commit lacks; offline
    (HF_HUB_OFFLINE, or a hub that cannot be reached) the optional files not in the cache are passed over, the
    weights are not.

    Args:
      checkpoint: a HubCheckpoint, or the --weights that names one ("hf://ORG/NAME@COMMIT").
      weight_files: the weights files a family reads, in its order of preference.
      optional: the other files, taken when the commit has them.
      cache_dir: the hub's cache folder (default: huggingface_hub's).

    Returns:
      Path of the commit's snapshot folder: <cache>/models--<owner>--<name>/snapshots/<commit>.

    Raises:
      WeightsError: none of `weight_files` at that commit (one line; a commit with only a pickle says so), an
        hf:// form that names no commit, or what `hub_download.hub_file` raises for a file that cannot be had.
    """
    if not isinstance(checkpoint, HubCheckpoint):
        checkpoint = hub_checkpoint(checkpoint)
    found = None
    for name in weight_files:
        file = checkpoint.file(name)
        if cache_path(file, cache_dir).is_file():
            found = file
            break
        if cached_absent(file, cache_dir):
            continue
        try:
            hub_file(file, cache_dir)
        except HubFileAbsent:
            continue
        found = file
        break
    if found is None:
        raise _no_weights(checkpoint, weight_files)
    for name in optional:
        file = checkpoint.file(name)
        if cache_path(file, cache_dir).is_file() or cached_absent(file, cache_dir) or hub_offline():
            continue
        try:
            hub_file(file, cache_dir)
        except HubFileAbsent:
            continue
        except HubUnreachable:
            break  # the weights came from the cache: so may the rest (asking each file would wait each time)
    return cache_path(found, cache_dir).parent


def _no_weights(checkpoint, weight_files):
    """The one line refusing a commit that has none of `weight_files` (only a pickle, or nothing)."""
    names = " or ".join(weight_files)
    pickle = None if hub_offline() else next((name for name in PICKLED_FILES if hub_has(checkpoint.file(name))), None)
    if pickle:
        return WeightsError("%s has no %s, only %s: a pickle, which can run code when it is read and is never read "
                            "here; pass a commit that has %s, or a folder holding one (converted from it by a "
                            "program you trust), --weights FOLDER" % (checkpoint.weights, names, pickle,
                                                                      weight_files[0]))
    return WeightsError("%s has no %s: pass a commit that has, or a folder holding one, --weights FOLDER"
                        % (checkpoint.weights, names))


def check_model_type(folder, family, weights):
    """Refuses (one line) a checkpoint whose config says it is a kind of model that `family` does not read.

    Args:
      folder: the checkpoint's folder.
      family: the folder of models/ that is to read it ("clip", "dinov2"): --model decides it.
      weights: the --weights given, for the message.

    Returns:
      The model type found (None when the folder has no config to tell).

    Raises:
      WeightsError: a model type of another family (naming the --model values that read it), or of none.
    """
    from models import registry

    found = checkpoint_model_type(folder)
    if found is None or MODEL_TYPES.get(found) == family:
        return found
    other = MODEL_TYPES.get(found)
    if other in registry.FAMILIES:  # the family's own name reads any of its sizes from the config
        advice = "pass --model %s, which reads its size from the config" % other
    else:
        names = [entry.name for entry in registry.ENTRIES if other is not None and other == _family(entry.graph)]
        advice = "pass --model %s" % " or ".join(names) if names else "no model here reads it"
    raise WeightsError("weights=%s is a %s checkpoint (its config's model_type), not a %s one: %s"
                       % (weights, found, family, advice))


def _family(graph):
    """The family folder of a registry entry's graph ("models.clip.clip:VIT_B32" -> "clip"; "" for VGG16's)."""
    parts = graph.split(":")[0].split(".")
    return parts[1] if len(parts) > 2 else ""

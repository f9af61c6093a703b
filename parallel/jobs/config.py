"""What a job is asked to do: `Config` (one run, everything the CLI parses) and `Distribution`.

`parallel.jobs.runner.run(config)` runs one: on this process alone, or as its part of a job spread
over several (`config.distribution`).
"""

import dataclasses
import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Optional

from parallel.devices.selection import CPU_BATCH, GPU_BATCH, Devices
from parallel.engine import check_batching
from parallel.inputs.manifest import check_shard_size
from parallel.inputs.sorting import folder_entries, list_entries, read_list
from parallel.inputs.sources import FOLDER, PARQUET, TFRECORD, parse_images
from parallel.inputs.streamed import check_first
from parallel.jobs.identity import own_files
from parallel.model import ModelSpec
from parallel.output import FORMATS, ErrorLog, sidecar_path
from parallel.output.record import ERRORS_SUFFIX
from parallel.locations import is_url


@dataclasses.dataclass(frozen=True)
class Config:
    """One run. Everything the CLI parses; no flags are read anywhere else.

    Attributes:
      model: the model to run (see `ModelSpec`).
      images: folder searched recursively for images; or an object-store prefix
        ("s3://bucket/photos/"), tars (a path or URL, a brace pattern, a glob), or a list of
        tars: see `parallel.inputs.sources` (`source` is what it names).
      output: output file (a Path), or an object-store URL (a str: s3://bucket/feats.parquet); its
        sidecars sit beside it.
      devices: checked `Devices` (see `parallel.devices.resolve_devices`).
      per_device_batch: images per device per step; a host batch is this times the devices.
        None: by device kind (`Devices.default_batch`: 12 on CPU devices, 64 on GPUs).
      resize: "crop" (centre square, then resize) or "stretch"; None: the model's (`ModelSpec.resize_mode`).
      output_format: "csv", "parquet" or "npy".
      workers: decode threads; None: one per core.
      prefetch_batches: host batches decoded ahead of the devices.
      overwrite: start afresh instead of resuming an existing output.
      strict: the first unreadable image stops the run.
      progress: show a progress bar (the CLI sets it when stderr is a terminal).
      images_from: None, or a file listing the images (see `parallel.inputs.sorting.list_entries`);
        relative paths in it are relative to `images`.
      shard_size: images per shard (for tars, tars per shard) of the job, on one process or many;
        None: the size the job was started with, else the largest multiple of the images per step
        up to 10,000 (tars: about 256 MiB of them). A job started with another size is refused.
      keep_shards: leave `<output>.shards/` (a Parquet dataset) once the output is written, on one
        process or many (one process then keeps each shard once its rows are in the output).
      distribution: None (one process), or how the job is spread over processes (`Distribution`).
        Its `shard_size` and `keep_shards`, where given, are the same settings as these: the two
        are made one (a shard size given in both must agree).
      image_column: for Parquet and TFRecord files, the column or feature holding each image's bytes;
        None: found by the names datasets, img2dataset and TensorFlow's ImageNet scripts write.
      keep: names of values kept beside each image's row in the output's index of members
        (`<output>.members.parquet`): a Parquet column, a TFRecord feature, or a tar sample's sibling
        member by extension ("txt", "json", "cls"); () keeps none.
      text_column: the kept value (a name as `keep` takes it, kept with the others) holding each image's
        caption, embedded by the model's text tower (`ModelSpec.text`) and scored against the image in
        `<output>.text.parquet` (parallel.output.text_rows); None: no caption.
      labels: label names: the `labels_top` nearest each image (zero-shot), and their cosines, in
        `<output>.text.parquet`; each embedded once, as `label_template` with "{}" replaced by it.
    """

    model: ModelSpec
    images: object
    output: Path
    devices: Devices
    per_device_batch: Optional[int] = None
    resize: Optional[str] = None
    output_format: str = "csv"
    workers: Optional[int] = None
    prefetch_batches: int = 2
    overwrite: bool = False
    strict: bool = False
    progress: bool = False
    images_from: Optional[Path] = None
    shard_size: Optional[int] = None
    keep_shards: bool = False
    distribution: Optional["Distribution"] = None
    image_column: Optional[str] = None
    keep: tuple = ()
    text_column: Optional[str] = None
    labels: tuple = ()
    label_template: str = "{}"
    labels_top: int = 5

    def __post_init__(self):
        if self.resize is None:  # the model's own (frozen: object.__setattr__), recorded as any mode given
            object.__setattr__(self, "resize", getattr(self.model, "resize_mode", "crop"))
        if self.per_device_batch is None:  # by the kind of the devices that compute (frozen: object.__setattr__)
            if self.distribution is not None and self.distribution.kind == "ray":  # the actors', not this host's
                object.__setattr__(self, "per_device_batch",
                                   GPU_BATCH if self.distribution.gpus_per_worker else CPU_BATCH)
            else:
                object.__setattr__(self, "per_device_batch", self.devices.default_batch())
        check_batching(self.per_device_batch, self.resize, self.workers, self.prefetch_batches)
        if self.output_format not in FORMATS:
            raise ValueError("output_format must be one of %s; got %r" % (", ".join(FORMATS), self.output_format))
        if self.distribution is not None and not isinstance(self.distribution, Distribution):
            raise ValueError("distribution must be a Distribution or None; got %r" % (self.distribution,))
        if self.shard_size is not None:
            check_shard_size(self.shard_size)
        if self.distribution is not None:
            self._share_sharding()
        self._check_kept()
        self._check_text()
        if self.distribution is not None and self.overwrite:
            raise ValueError("overwrite with a distributed job would let each process erase the others' shards: "
                             "remove %s and its files yourself, or choose another output" % self.output)

    def _check_kept(self):
        """ValueError (one line) for an image_column or keep= that the images cannot have."""
        keep = (self.keep,) if isinstance(self.keep, str) else tuple(self.keep)
        object.__setattr__(self, "keep", keep)
        for name in keep:
            if not isinstance(name, str) or not name or "," in name:
                raise ValueError("keep= takes names of columns, features or members; got %r" % (name,))
        if len(set(keep)) < len(keep):
            raise ValueError("keep=%s names a value twice" % ",".join(keep))
        if self.image_column is not None and (not isinstance(self.image_column, str) or not self.image_column):
            raise ValueError("image_column must be a column's name; got %r" % (self.image_column,))
        if keep and not self.source.streamed:
            raise ValueError("keep=%s keeps values that come with images in tars, Parquet or TFRecord files; "
                             "images=%s is a %s" % (",".join(keep), self.images, self.source.kind))
        if self.image_column is not None and self.source.kind not in (PARQUET, TFRECORD):
            raise ValueError("image_column=%s names a column of Parquet or TFRecord files; images=%s is not such "
                             "files" % (self.image_column, self.images))

    def _check_text(self):
        """ValueError (one line, naming the value received) for a text_column or labels the job cannot have; the
        text column kept with the others (frozen: object.__setattr__)."""
        column, labels = self.text_column, tuple(self.labels)
        if column is None and not labels:
            return
        if self.model.text is None:
            asked = "text_column=%s" % column if column is not None else "labels= (%d labels)" % len(labels)
            raise ValueError("%s needs a model with a text tower, its layer in that tower's space (CLIP's or SigLIP's "
                             "embedding); model %s's layer %s has none" % (asked, self.model.name,
                                                                           self.model.output_name))
        if column is not None:
            if not isinstance(column, str) or not column or "," in column:
                raise ValueError("text_column takes the name of a column, feature or member; got %r" % (column,))
            if not self.source.streamed:
                raise ValueError("text_column=%s names a value that comes with images in tars, Parquet or TFRecord "
                                 "files; images=%s is a %s" % (column, self.images, self.source.kind))
            if column not in self.keep:  # the readers bring only what is kept (the members index holds it too)
                object.__setattr__(self, "keep", self.keep + (column,))
        for label in labels:
            if not isinstance(label, str) or not label.strip() or "\n" in label:
                raise ValueError("labels must be names of one line; got %r" % (label,))
        if len(set(labels)) < len(labels):
            raise ValueError("labels name %r twice" % next(label for label in labels if labels.count(label) > 1))
        if not isinstance(self.label_template, str) or self.label_template.count("{}") != 1:
            raise ValueError("label_template must hold {} once, where each label goes; got %r" % (self.label_template,))
        top = self.labels_top
        if isinstance(top, bool) or not isinstance(top, int) or top < 1:
            raise ValueError("labels_top must be at least 1; got %r" % (top,))
        object.__setattr__(self, "labels", labels)
        object.__setattr__(self, "labels_top", min(top, len(labels)) if labels else top)

    @property
    def label_prompts(self):
        """What the text tower embeds of each label: `label_template` with "{}" replaced by it."""
        return [self.label_template.replace("{}", label) for label in self.labels]

    def _share_sharding(self):
        """The shard size and keep_shards of the Config and of its Distribution made one (frozen: object.__setattr__).

        They are the job's, whatever the number of processes; a spread job has long given them in its
        Distribution, which the job layer reads them from.
        """
        distribution = self.distribution
        if None not in (self.shard_size, distribution.shard_size) and self.shard_size != distribution.shard_size:
            raise ValueError("shard_size=%d and the distribution's shard_size=%d disagree: give one"
                             % (self.shard_size, distribution.shard_size))
        shard_size = distribution.shard_size if self.shard_size is None else self.shard_size
        keep_shards = bool(self.keep_shards or distribution.keep_shards)
        object.__setattr__(self, "shard_size", shard_size)
        object.__setattr__(self, "keep_shards", keep_shards)
        if (distribution.shard_size, distribution.keep_shards) != (shard_size, keep_shards):
            object.__setattr__(self, "distribution", dataclasses.replace(distribution, shard_size=shard_size,
                                                                         keep_shards=keep_shards))

    @functools.cached_property
    def source(self):
        """The `parallel.inputs.sources.Source` that `images` names (ValueError when it names none)."""
        own = self.output if is_url(self.output) else os.path.abspath(self.output)
        source = parse_images(self.images, folder_of_files=self.images_from is None, own=own)
        if source.streamed:  # a glob beside the output (data/*.parquet) would take its own files for inputs
            ours = not is_url(own) and os.path.exists(sidecar_path(own))  # a file named so is the protocol's refusal
            files = tuple(name for name in source.files if not name.startswith(own + ".") and (name != own or not ours))
            if not files:
                raise ValueError("images=%s names only files of output=%s" % (source.description, self.output))
            source = dataclasses.replace(source, files=files)
        if source.streamed and self.images_from is not None:
            raise ValueError("images_from= lists images, and images= names %s files: give one or the other"
                             % source.kind)
        return source

    @property
    def image_root(self):
        """What the job's image keys are relative to: the folder (resolved) or the prefix URL; "" for tars."""
        return self.source.root

    @property
    def settings(self):
        """What the output records and a rerun must match: the model's settings, the images, the resizing
        (--resize, the model's image size, and its resize filter and short side unless they are the defaults)."""
        source = {"images": self.source.description}
        if self.source.streamed:  # shards of files, their images found as they are read (parallel.jobs.shards)
            source["input"] = self.source.kind  # "tars", "parquet", "tfrecord"
        if self.image_column is not None:
            source["image_column"] = self.image_column
        if self.keep:
            source["keep"] = ",".join(self.keep)
        if self.images_from is not None:
            source["images_from"] = str(Path(self.images_from).resolve())
        if self.text_column is not None:  # what the text tower gives each row (parallel.output.text_rows)
            source["text_column"] = self.text_column
        if self.labels:
            prompts = json.dumps(self.label_prompts, ensure_ascii=False).encode("utf-8", "surrogateescape")
            source["labels"] = "%d, sha256 %s" % (len(self.labels), hashlib.sha256(prompts).hexdigest())
            source["labels_top"] = str(self.labels_top)
        resizing = dict(resize=self.resize, image_size="%dx%d" % tuple(self.model.image_size))
        # A model's own filter and short side change its features: recorded when they are not the defaults
        # (ModelSpec's class attributes), so that the sidecars of the models that keep them stay as they were.
        if self.model.resize_filter != ModelSpec.resize_filter:
            resizing["resize_filter"] = self.model.resize_filter
        if self.model.resize_short_side is not None:
            resizing["resize_short_side"] = str(self.model.resize_short_side)
        return dict(self.model.settings, **source, **resizing)

    def scan(self):
        """The Manifest of the job's images as they are now (the folder, the prefix, the list file), or of its tars."""
        if self.images_from is not None:
            return read_list(self.images_from, self.image_root)
        if self.source.kind == FOLDER and not is_url(self.output):  # an object in a store is never a local image
            return self.source.scan(exclude=own_files(Path(self.image_root), Path(self.output)))
        manifest = self.source.scan()
        if self.source.kind in (PARQUET, TFRECORD):  # a file of another kind, no image column: one line, now
            check_first(self.source.kind, manifest.paths, manifest.etags, manifest.sizes, self.image_column, self.keep)
        return manifest

    def entries(self):
        """`scan`, sorted in runs spilled to disk (`parallel.inputs.sorting.SortedEntries`): what a
        manifest is first written from, in memory that does not grow with the job (a folder, a list
        file; a prefix's listing and the tars are held, as fsspec lists them)."""
        if self.images_from is not None:
            return list_entries(self.images_from, self.image_root)
        if self.source.kind == FOLDER:
            exclude = () if is_url(self.output) else own_files(Path(self.image_root), Path(self.output))
            return folder_entries(self.source.root, exclude)
        return self.scan()

    @property
    def output_location(self):
        """The output as a Summary names it: a Path, or the store's URL."""
        return self.output if is_url(self.output) else Path(self.output)

    @property
    def errors_location(self):
        """The output's errors file as a Summary names it: a Path, or the store's URL."""
        return "%s%s" % (self.output, ERRORS_SUFFIX) if is_url(self.output) else ErrorLog.path_for(self.output)

    @property
    def host_batch(self):
        """Images per `sess.run`: per_device_batch on each device."""
        return self.per_device_batch * len(self.devices.names)

    @property
    def step_geometry(self):
        """What decides which images share a step and how many each device computes at once: {str: str}.

        A model's rounding may depend on it (oneDNN, cuDNN), so it is part of the job's record: every
        process of a job computes with the same. Under Ray it is that of each actor (gpus_per_worker
        GPUs, or one CPU device), not of the driver's host.
        """
        if self.distribution is not None and self.distribution.kind == "ray":
            devices = self.distribution.gpus_per_worker or 1
        else:
            devices = len(self.devices.names)
        return {"per_device_batch": str(self.per_device_batch), "devices": str(devices)}


@dataclasses.dataclass(frozen=True)
class Distribution:
    """How one job is spread over processes (see `parallel.jobs.shards`, `parallel.jobs.distributed`).

    Attributes:
      kind: "static" (each process is one rank of a scheduler: Slurm, torchrun, Kubernetes,
        TF_CONFIG) or "ray" (a Ray cluster's actors pull shards).
      rank, world_size: --rank and --world-size (static); None: from the environment.
      shard_size, keep_shards: `Config.shard_size` and `Config.keep_shards`, which say the same on any
        number of processes (the Config makes the two one); given here as spread jobs always could.
      wait_seconds: how long a process waits for another that is writing the manifest.
      ray_address: the Ray cluster to join ("auto", "ray://host:10001"); None: start one here.
      gpus_per_worker: GPUs each Ray actor is given (0: actors compute on the CPU).
      verbose: Ray actors show TensorFlow's log and Ray its own (--verbose); else they are as
        quiet as one process.
    """

    kind: str
    rank: Optional[int] = None
    world_size: Optional[int] = None
    shard_size: Optional[int] = None
    keep_shards: bool = False
    wait_seconds: float = 600.0
    ray_address: Optional[str] = None
    gpus_per_worker: int = 1
    verbose: bool = False

    def __post_init__(self):
        if self.kind not in ("static", "ray"):
            raise ValueError("distribution kind must be 'static' or 'ray'; got %r" % (self.kind,))
        if self.shard_size is not None and (not isinstance(self.shard_size, int) or self.shard_size < 1):
            raise ValueError("shard_size must be at least 1; got %r" % (self.shard_size,))
        if not isinstance(self.gpus_per_worker, int) or self.gpus_per_worker < 0:
            raise ValueError("gpus_per_worker must be 0 or more; got %r" % (self.gpus_per_worker,))


TEMPLATE_PREFIX = "template:"  # a labels file's first line may give the prompt each label is embedded in


def read_labels(path):
    """The labels of a labels file (--labels): one label a line, blank lines skipped; a first line
    `template: a photo of a {}.` gives the sentence each is embedded as ("{}" alone when there is none).

    Returns:
      (labels: tuple of str, template: str), for Config's `labels` and `label_template`.

    Raises:
      ValueError: one line naming the file: it cannot be read, is not UTF-8, holds no label, or its template has no {}.
    """
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as error:
        raise ValueError("--labels %s is not UTF-8 text (byte %d)" % (path, error.start)) from None
    except OSError as error:
        raise ValueError("--labels %s cannot be read: %s" % (path, error.strerror or error)) from None
    labels = [line.strip() for line in lines if line.strip()]
    template = "{}"
    if labels and labels[0].lower().startswith(TEMPLATE_PREFIX):
        template, labels = labels[0][len(TEMPLATE_PREFIX):].strip(), labels[1:]
        if template.count("{}") != 1:
            raise ValueError("--labels %s: its template must hold {} once, where each label goes; got %r"
                             % (path, template))
    if not labels:
        raise ValueError("--labels %s holds no label (one a line)" % path)
    return tuple(labels), template

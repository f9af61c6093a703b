"""DINOv2's weight files: Hugging Face's `model.safetensors` (facebook/dinov2-small, -base, -large, -giant and
dinov2-with-registers-*), read, checked and mapped onto the graph's variables, the position embeddings interpolated
on the host; and random ones written (a file, or a folder with its config.json).

Hugging Face's names (PyTorch layouts: a Linear's weight is [outputs, inputs], a Conv2d's [outputs, 3, 14, 14]):

    embeddings.cls_token [1, 1, C]   embeddings.position_embeddings [1, 1 + 37 * 37, C]   embeddings.mask_token [1, C]
    embeddings.patch_embeddings.projection.weight, .bias
    encoder.layer.<i>.norm1.weight, .bias         encoder.layer.<i>.attention.attention.{query,key,value}.weight, .bias
    encoder.layer.<i>.attention.output.dense.weight, .bias     encoder.layer.<i>.layer_scale1.lambda1
    encoder.layer.<i>.norm2.weight, .bias         encoder.layer.<i>.mlp.fc1.weight, .bias, mlp.fc2.weight, .bias
    encoder.layer.<i>.layer_scale2.lambda1        layernorm.weight, .bias
    g/14's SwiGLU MLP: encoder.layer.<i>.mlp.weights_in.weight [2 x hidden, C] (the gate's rows, then the
    values'), .bias, mlp.weights_out.weight [C, hidden], .bias (transformers 5 splits weights_in into gate_proj
    and up_proj when it loads the file, and writes it back fused)
    with registers: embeddings.register_tokens [1, 4, C]

The position embeddings are stored for 518 px (37 x 37 patches); a 224 px image has 16 x 16. They are
interpolated once, here, in float64 NumPy, as Hugging Face's `Dinov2Embeddings.interpolate_pos_encoding` does
(PyTorch's `F.interpolate(size=(16, 16), mode="bicubic", align_corners=False, antialias=False)`: the cubic
convolution kernel with a = -0.75, taps beyond the border clamped to it, sample i at (i + 0.5) * 37 / 16 - 0.5);
for the checkpoints with registers with `antialias=True`, as `Dinov2WithRegistersEmbeddings` does (PyTorch's
antialiased bicubic, Pillow's: the kernel with a = -0.5 stretched by 37 / 16, centred at (i + 0.5) * 37 / 16,
the taps inside the grid only, renormalised).
Two other references differ, and are not followed: keras-hub's `DINOV2Embedding` on TensorFlow resizes with
`tf.image.resize` (a = -0.5, taps beyond the border dropped and the rest renormalised: `method="keras_hub"`
here reproduces it, for its parity test), and Meta's original code samples at 37 / 16.1 (its 0.1 offset).

No TensorFlow, so that `python -m models.weight_files random OUT.safetensors --model dinov2_vits14` starts at once.
"""

import json
import math
from pathlib import Path

import numpy as np

from models.dinov2 import dinov2_layers
from models.dinov2.dinov2_config import hf_config
from models.dinov2.dinov2_layers import GRID, INTERPOLATIONS, VITB14, VITS14, variables
from models.files import WeightsError
from models.registry import what_else
from models.safetensors_files import read_tensors, write_tensors

FILE_NAME = "model.safetensors"


# ----------------------------------------------------------------------------- the position embeddings

def _cubic(distance, a):
    """The cubic convolution kernel (Keys, 1981) at |distance| < 2, with parameter a."""
    t = abs(distance)
    if t <= 1:
        return ((a + 2) * t - (a + 3)) * t * t + 1
    return a * (((t - 5) * t + 8) * t - 4) if t < 2 else 0.0


def resize_matrix(source, target, method="torch"):
    """The [target, source] matrix of a 1-D bicubic resize (half-pixel centres, no antialiasing).

    Args:
      source, target: lengths.
      method: "torch": a = -0.75, taps beyond the border clamped to it (PyTorch's upsample_bicubic2d);
        "torch_antialias": PyTorch's with antialias=True (`_antialiased`); "keras_hub": a = -0.5, taps beyond the
        border dropped and the others renormalised (TensorFlow's ResizeBicubic with half-pixel centres, which
        keras-hub's DINOv2 uses on TensorFlow).
    """
    if method not in INTERPOLATIONS:
        raise ValueError("method=%r; expected one of %s" % (method, ", ".join(INTERPOLATIONS)))
    if method == "torch_antialias":
        return _antialiased(source, target)
    a = -0.75 if method == "torch" else -0.5
    matrix = np.zeros((target, source))
    for row in range(target):
        position = (row + 0.5) * source / target - 0.5
        first = math.floor(position)
        for tap in range(first - 1, first + 3):
            if method == "keras_hub" and not 0 <= tap < source:
                continue
            matrix[row, min(max(tap, 0), source - 1)] += _cubic(position - tap, a)
        if method == "keras_hub":
            matrix[row] /= matrix[row].sum()
    return matrix


def _antialiased(source, target):
    """PyTorch's bicubic resize with antialias=True (aten's _upsample_bicubic2d_aa, after Pillow's resampling):
    output i is centred at (i + 0.5) * scale in input coordinates (scale = source / target); when downsampling
    (scale > 1) the kernel (a = -0.5) is stretched by scale, its support 2 x scale; the taps are the input
    samples within it (none beyond the border), their weights renormalised to sum to 1."""
    scale = source / target
    support, stretch = (2 * scale, 1 / scale) if scale >= 1 else (2.0, 1.0)
    matrix = np.zeros((target, source))
    for row in range(target):
        centre = scale * (row + 0.5)
        first = max(int(centre - support + 0.5), 0)
        last = min(int(centre + support + 0.5), source)
        for tap in range(first, last):
            matrix[row, tap] = _cubic((tap - centre + 0.5) * stretch, -0.5)
        matrix[row] /= matrix[row].sum()
    return matrix


def interpolate_positions(table, target_grid=GRID, method="torch"):
    """Position embeddings for another grid of patches, computed once on the host.

    Args:
      table: [1 + S * S, C] (or [1, 1 + S * S, C]): the class token's embedding, then S x S patches' in
        row-major order.
      target_grid: T, patches per side of the images the graph takes.
      method: see `resize_matrix`.

    Returns:
      float32 [1 + T * T, C]: the class token's embedding unchanged, the patches' resized bicubically (in
      float64) from S x S to T x T.
    """
    table = np.asarray(table).reshape(-1, np.shape(table)[-1])
    source = math.isqrt(table.shape[0] - 1)
    if source * source != table.shape[0] - 1:
        raise ValueError("position embeddings of %d rows are not a class token and a square grid" % table.shape[0])
    if source == target_grid:
        return table.astype(np.float32)
    grid = table[1:].astype(np.float64).reshape(source, source, -1)
    matrix = resize_matrix(source, target_grid, method)
    resized = np.einsum("ij,jkc,lk->ilc", matrix, grid, matrix).reshape(target_grid * target_grid, -1)
    return np.concatenate([table[:1], resized]).astype(np.float32)


# ----------------------------------------------------------------------------- reading

def hub_names(variant):
    """{our variable name (under the model's scope): Hugging Face's tensor name}, in the graph's order."""
    names = {"patch_embedding/kernel": "embeddings.patch_embeddings.projection.weight",
             "patch_embedding/bias": "embeddings.patch_embeddings.projection.bias",
             "class_token": "embeddings.cls_token", "position_embedding": "embeddings.position_embeddings",
             "layer_norm/gamma": "layernorm.weight", "layer_norm/beta": "layernorm.bias"}
    parts = {"layer_norm_1/gamma": "norm1.weight", "layer_norm_1/beta": "norm1.bias",
             "layer_scale_1/gamma": "layer_scale1.lambda1", "layer_norm_2/gamma": "norm2.weight",
             "layer_norm_2/beta": "norm2.bias", "layer_scale_2/gamma": "layer_scale2.lambda1",
             "attention/output/kernel": "attention.output.dense.weight",
             "attention/output/bias": "attention.output.dense.bias"}
    for projection in ("query", "key", "value"):
        for kind, suffix in (("kernel", "weight"), ("bias", "bias")):
            parts["attention/%s/%s" % (projection, kind)] = "attention.attention.%s.%s" % (projection, suffix)
    # g/14's SwiGLU: its fused gate and values, and its output (our fc1, fc2)
    layers = {"fc1": "weights_in", "fc2": "weights_out"} if variant.transformer.gated else {"fc1": "fc1", "fc2": "fc2"}
    for kind in ("kernel", "bias"):
        for ours, theirs in layers.items():
            parts["mlp/%s/%s" % (ours, kind)] = "mlp.%s.%s" % (theirs, "weight" if kind == "kernel" else "bias")
    if variant.registers:
        names["register_tokens"] = "embeddings.register_tokens"
    for index in range(variant.transformer.depth):
        for ours, theirs in parts.items():
            names["block_%d/%s" % (index, ours)] = "encoder.layer.%d.%s" % (index, theirs)
    return {name: names[name] for name, _ in variables(variant)}


def _hub_shape(name, shape, variant):
    """The shape Hugging Face stores our variable `name` of `shape` in (at 518 px for the positions)."""
    if name == "patch_embedding/kernel":
        return (shape[3], 3, shape[0], shape[1])
    if name.endswith("kernel"):
        return shape[::-1]
    if name in ("class_token", "register_tokens"):
        return (1,) + ((1,) + shape if name == "class_token" else shape)
    if name == "position_embedding":
        return (1, 1 + variant.source_grid ** 2, shape[1])
    return shape


def _ours(name, array):
    """A Hugging Face tensor in our variable's layout (before any interpolation)."""
    if name == "patch_embedding/kernel":
        return np.transpose(array, (2, 3, 1, 0))  # [C, 3, 14, 14] -> [14, 14, 3, C]
    if name.endswith("kernel"):
        return np.ascontiguousarray(array.T)
    if name == "class_token":
        return array.reshape(-1)
    if name == "register_tokens":
        return array.reshape(array.shape[-2:])
    return array


def resolve(path):
    """The safetensors file `path` names: itself, or the model.safetensors in a folder (Hugging Face's layout).

    Raises:
      WeightsError: neither a file nor a folder holding model.safetensors.
    """
    path = Path(path)
    if path.is_dir():
        if not (path / FILE_NAME).is_file():
            raise WeightsError("weights=%s is a folder without %s" % (path, FILE_NAME))
        return path / FILE_NAME
    return path


def load_weights(path, variant, scope=None, interpolation=None):
    """Reads a DINOv2 checkpoint, checks every tensor and shape, and maps it onto the graph's variables.

    Args:
      path: a model.safetensors in Hugging Face's layout (F32, F16 or BF16), or a folder holding one.
      variant: a dinov2_layers.Variant: the size the file must have.
      scope: the variable scope the graph was built under (default: the variant's name).
      interpolation: how the position embeddings are resized from 37 x 37 to 16 x 16 (`resize_matrix`);
        default the variant's (PyTorch's bicubic; antialiased for the checkpoints with registers).

    Returns:
      {"dinov2_vits14/patch_embedding/kernel": float32 [14, 14, 3, 384], ...,
       "dinov2_vits14/position_embedding": float32 [257, 384], ...}: every variable of `variables(variant)`.

    Raises:
      WeightsError: a file that is not safetensors, is truncated, lacks a tensor, or has a wrong shape (one line
        naming the file, the tensor and the shapes: another size of DINOv2 is named as such).
    """
    path = resolve(path)
    tensors = read_tensors(path)
    scope, interpolation = scope or variant.name, interpolation or variant.interpolation
    class_token = tensors.get("embeddings.cls_token")
    if class_token is not None and class_token.shape[-1:] != (variant.width,):
        raise WeightsError("weights=%s: tensor embeddings.cls_token has shape %s; %s needs %s%s"
                           % (path, tuple(class_token.shape), variant.title, (1, 1, variant.width),
                              _other_size(class_token)))
    values, names = {}, hub_names(variant)  # once: it walks every variable of the size
    for name, shape in variables(variant):
        hub_name = names[name]
        if hub_name not in tensors:
            known = sum(theirs in tensors for theirs in names.values())
            raise WeightsError("weights=%s has no tensor %s: it has %d of %s's %d tensors (not a Hugging Face "
                               "DINOv2 checkpoint?)%s" % (path, hub_name, known, variant.title, len(variables(variant)),
                                                          what_else(path, variant.name)))
        array, expected = tensors[hub_name], _hub_shape(name, shape, variant)
        if tuple(array.shape) != expected:
            raise WeightsError("weights=%s: tensor %s has shape %s; %s needs %s%s"
                               % (path, hub_name, tuple(array.shape), variant.title, expected, ""))
        array = _ours(name, array)
        if name == "position_embedding":
            array = interpolate_positions(array, variant.grid, interpolation)
        values["%s/%s" % (scope, name)] = np.ascontiguousarray(array, dtype=np.float32)
    return values


def _other_size(class_token):
    """" (the file is DINOv2 ViT-S/14's?)" when the class token has the width of another size, else ""."""
    widths = {variant.width: variant.title for variant in dinov2_layers.VARIANTS.values() if not variant.registers}
    width = class_token.shape[-1] if class_token.ndim else None
    return " (the file is %s's?)" % widths[width] if width in widths else ""


# ----------------------------------------------------------------------------- writing

def random_tensors(variant, seed=0):
    """Seeded random weights in Hugging Face's layout and names (float32), every tensor of the checkpoint.

    Shaped like a trained network's where it matters to rounding: LayerScale gammas 0.05 .. 0.3 (a trained
    DINOv2's are small; random unit ones would let every block double the residual stream and amplify float
    rounding far beyond what real weights do), kernels of unit gain, LayerNorm gammas 0.5 .. 1.5. Features
    computed with them are meaningless: they are for tests, benchmarks and checking an installation.

    Args:
      variant: a dinov2_layers.Variant.
      seed: seed of numpy's default generator.

    Returns:
      {Hugging Face tensor name: float32 array}, with `embeddings.mask_token` (zeros) as the real files have.
    """
    rng = np.random.default_rng(seed)
    tensors, names = {}, hub_names(variant)
    for name, shape in variables(variant, variant.source_grid):
        hub_name, hub_shape = names[name], _hub_shape(name, shape, variant)
        if name.endswith("kernel"):
            fan_in = int(np.prod(shape[:-1]))
            array = rng.standard_normal(hub_shape, dtype=np.float32) * np.float32(1 / math.sqrt(fan_in))
        elif "layer_scale" in name:
            array = rng.uniform(0.05, 0.3, hub_shape).astype(np.float32)
        elif name.endswith("gamma"):
            array = rng.uniform(0.5, 1.5, hub_shape).astype(np.float32)
        elif name in ("class_token", "position_embedding", "register_tokens"):
            array = (rng.standard_normal(hub_shape) * 0.5).astype(np.float32)
        else:
            array = rng.uniform(-0.2, 0.2, hub_shape).astype(np.float32)
        tensors[hub_name] = array
    tensors["embeddings.mask_token"] = np.zeros((1, variant.width), np.float32)
    return tensors


def write_random(path, variant, seed=0):
    """Writes seeded random weights of `variant` to `path` in the layout of Hugging Face's model.safetensors."""
    write_tensors(path, random_tensors(variant, seed), {"format": "pt"})


def write_random_folder(folder, variant, seed=0):
    """Writes a folder as Hugging Face's of `variant`: model.safetensors (seeded random) and config.json, whole
    or not at all (the folder must not exist)."""
    folder = Path(folder)
    folder.mkdir()
    try:
        write_random(folder / FILE_NAME, variant, seed)
        (folder / "config.json").write_text(json.dumps(hf_config(variant), indent=2) + "\n")
    except BaseException:
        for child in folder.iterdir():
            child.unlink()
        folder.rmdir()
        raise


class RandomFiles:
    """The `random` command's writer for one DINOv2 size (the registry's `models.dinov2.dinov2_weights:VITS14`).

    Attributes:
      RANDOM_SUFFIXES: the layout each suffix is written in.
    """

    RANDOM_SUFFIXES = {".safetensors": "Hugging Face's model.safetensors",
                       "": "Hugging Face's folder (model.safetensors, config.json)"}

    def __init__(self, variant):
        self.variant = variant

    def tensors(self):
        """{name: shape} of the tensors of Hugging Face's checkpoint of this size: what tells its checkpoints from
        the others' (`models.registry.holder`)."""
        names = hub_names(self.variant)  # once: it walks every variable of the size
        return {names[name]: _hub_shape(name, shape, self.variant) for name, shape in variables(self.variant)}

    def write_random(self, path, seed=0):
        """Writes seeded random weights of this size to `path`: Hugging Face's model.safetensors, or a folder
        holding it and its config.json (a path without extension)."""
        if Path(path).suffix:
            write_random(path, self.variant, seed)
        else:
            write_random_folder(path, self.variant, seed)


VITS14_FILES = RandomFiles(VITS14)  # the family's too: `random --model dinov2` writes S/14's size
VITB14_FILES = RandomFiles(VITB14)
VITL14_FILES = RandomFiles(dinov2_layers.VITL14)
VITG14_FILES = RandomFiles(dinov2_layers.VITG14)
VITS14_REG_FILES = RandomFiles(dinov2_layers.VITS14_REG)
VITB14_REG_FILES = RandomFiles(dinov2_layers.VITB14_REG)
VITL14_REG_FILES = RandomFiles(dinov2_layers.VITL14_REG)
VITG14_REG_FILES = RandomFiles(dinov2_layers.VITG14_REG)

"""The PyTorch references of the transformers' parity tests, run as a child process: writes seeded random weights in
each publisher's own layout, with the publisher's own code, and computes what that code computes from them.

    python tests/torch_references.py REQUEST.json
    results = run_references(jobs, tmp_path)      # from a test: the same, in a child process; [{name: array}]

REQUEST.json: {"jobs": [job, ...]}, each job a dict with "kind" and "output" (an .npz written with the results):
- "clip": Hugging Face's CLIPModel(CLIPConfig(**job["config"])), its parameters seeded, `save_pretrained(folder)`
  (config.json and model.safetensors), read back with `CLIPModel.from_pretrained`; outputs "pooled" (the
  vision model's pooler_output), "embedding" (visual_projection of it, L2-normalised), "text" (text_projection of
  the text model's pooler_output, L2-normalised) of job["images"] (uint8 [N, S, S, 3] .npy, normalised with the
  job's "mean" and "std") and job["token_ids"] (int [M, L] .npy).
- "open_clip": open_clip's own model from `folder/open_clip_config.json` (job["config"], written here) by
  `create_model("local-dir:" + folder)`, its parameters seeded, its `state_dict()` saved as
  open_clip_model.safetensors, created again from the folder (open_clip's own loader reads the file); outputs
  "embedding" and "text": `encode_image(preprocess(image), normalize=True)` (open_clip's own preprocessing of the
  PIL images) and `encode_text(ids, normalize=True)`.
- "dinov2": transformers' Dinov2Model, or Dinov2WithRegistersModel when job["config"]["model_type"] says so, the
  same way; outputs "class_token" (pooler_output) and "class_and_patch_mean" (with the mean of the patch tokens,
  the registers left out) of the images normalised with ImageNet's mean and std (BitImageProcessor's).
- "siglip": transformers' SiglipModel(SiglipConfig(text_config=job["text"], vision_config=job["vision"])) the same
  way; outputs "pooled" (`get_image_features`' pooler_output) and "text" (`get_text_features`') of the images
  normalised as SiglipImageProcessor does ((x / 255 - 0.5) / 0.5) and the ids; with job["siglip2"], also
  "siglip2_pooled" and "siglip2_text": transformers' Siglip2Model (the NaFlex class) holding the same weights.
- "interpolate": `F.interpolate` of job["table"] ([1, C, S, S] .npy) to job["size"] (bicubic, align_corners=False,
  antialias=job["antialias"]); output "resized".

The parameters are drawn in name order from torch's generator seeded with job["seed"], shaped like a trained
network's where it matters to rounding: LayerNorm scales 0.5 .. 1.5, LayerScale gammas 0.05 .. 0.3, biases
-0.1 .. 0.1, embeddings N(0, 0.5), matrices N(0, 1 / fan_in) (half that where a residual branch ends),
logit_scale ln(100). A child process because transformers' and torchvision's PyTorch code, loaded after TensorFlow
in one process, crashes it (every test process imports TensorFlow): nothing here imports torch until the child
runs; the library itself never imports it. Every parity test of the PyTorch publishers (CLIP's, open_clip's,
DINOv2's, SigLIP's) goes through this one child, one per test process: started by the first request, it serves the
requests of every module the process runs (importing torch, transformers and open_clip costs 4 to 5 CPU-seconds),
and ends when the session does (tests/conftest.py's torch_reference_child).

    python tests/torch_references.py --serve     the shared child: a request's path a line on stdin, "ok" or
                                                 "error: LAST LINE" a line on its own stdout (what the code it runs
                                                 prints goes to stderr); ends on "quit"
"""

import json
import math
import os
import select
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

import numpy as np

OUTPUT_PROJECTIONS = ("out_proj", "fc2", "c_proj", "weights_out", "down_proj", "output.dense")
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def run_references(jobs, folder):
    """Runs `jobs` (dicts as above, without "output") in this process's PyTorch child; [{name: array}], one per job.

    Args:
      jobs: the jobs; paths in them are strings.
      folder: a folder for the request and the outputs (a pathlib.Path).

    Raises:
      RuntimeError: a job failed (the last line of its error), or the child ended (its last line of stderr).
    """
    global _CHILD
    jobs = [dict(job, output=str(folder / ("reference_%d.npz" % index))) for index, job in enumerate(jobs)]
    request = folder / "references.json"
    request.write_text(json.dumps({"jobs": jobs}))
    if _CHILD is not None and _CHILD.ended:
        close_child()
    if _CHILD is None:
        _CHILD = ReferenceChild()
    _CHILD.run(request)
    return [dict(np.load(job["output"])) for job in jobs]


def close_child():
    """Ends this process's PyTorch child, if a request started it (at the session's end)."""
    global _CHILD
    child, _CHILD = _CHILD, None
    if child is not None:
        child.close()


class ReferenceChild:
    """`python tests/torch_references.py --serve`: one process that imports torch once and runs request after
    request."""

    def __init__(self):
        self._stderr = tempfile.TemporaryFile()
        self._process = subprocess.Popen([sys.executable, str(Path(__file__)), "--serve"], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=self._stderr, text=True)
        self.ended = False  # it died (the next request starts another)

    def run(self, request):
        """Runs the request file `request`; raises RuntimeError as run_references says."""
        from hangs import HANG_SECONDS

        try:
            self._process.stdin.write("%s\n" % request)
            self._process.stdin.flush()
        except BrokenPipeError:
            pass  # it ended: the reply is empty
        if not select.select([self._process.stdout], [], [], HANG_SECONDS)[0]:
            self._process.kill()
        reply = self._process.stdout.readline().strip()
        if reply == "ok":
            return
        if reply.startswith("error: "):
            raise RuntimeError("torch_references.py failed: %s" % reply[len("error: "):])
        self._process.kill()
        status = self._process.wait()
        self.ended = True
        self._stderr.seek(0)
        lines = self._stderr.read().decode(errors="replace").strip().splitlines() or ["?"]
        raise RuntimeError("torch_references.py failed (exit status %s): %s" % (status, lines[-1]))

    def close(self):
        """Asks the child to end and waits for it (a forked test process may hold its stdin open: no EOF)."""
        from hangs import HANG_SECONDS

        try:
            if not self.ended:
                self._process.stdin.write("quit\n")
            self._process.stdin.close()
        except BrokenPipeError:
            pass  # it had ended
        try:
            self._process.wait(timeout=HANG_SECONDS)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._process.stdout.close()
        self._stderr.close()


_CHILD = None  # this process's ReferenceChild, started by the first request


def assert_parity(ours, expected, tolerance=1e-5):
    """Within `tolerance` of the largest reference value; and, since random weights could make that pass for
    nothing, different inputs (rows) differ far beyond it (the spread guard)."""
    assert ours.shape == expected.shape
    scale = np.abs(expected).max()
    assert np.abs(ours - expected).max() <= tolerance * scale, np.abs(ours - expected).max() / scale
    spread = min(np.abs(expected[i] - expected[j]).max() for i in range(len(expected))
                 for j in range(i + 1, len(expected)))
    assert spread >= 100 * tolerance * scale, (spread, scale)


def seed_parameters(module, seed, transposed=("visual.proj", "text_projection")):
    """Fills every parameter of `module` in place, in name order, from a generator seeded with `seed`.

    `transposed` names the matrices applied as x @ W (open_clip's projections): their fan-in is their first axis.
    """
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in sorted(module.named_parameters()):
            shape = parameter.shape

            def uniform(low, high):
                return torch.rand(shape, generator=generator) * (high - low) + low

            if name.endswith("logit_scale"):
                value = torch.full(shape, math.log(100.0))
            elif "lambda1" in name or ".ls_" in name or "layer_scale" in name:
                value = uniform(0.05, 0.3)
            elif parameter.ndim == 1 and ("norm" in name or ".ln_" in name or name.startswith("ln_")
                                          or "layernorm" in name or "layrnorm" in name) and name.endswith("weight"):
                value = uniform(0.5, 1.5)
            elif name.endswith("bias"):
                value = uniform(-0.1, 0.1)
            elif any(key in name for key in ("embedding", "class_embedding", "cls_token", "register_tokens",
                                              "mask_token", "probe")) and "patch" not in name:
                value = torch.randn(shape, generator=generator) * 0.5
            else:
                fan_in = shape[0] if name in transposed else int(np.prod(shape[1:]))
                gain = 0.5 if any(key in name for key in OUTPUT_PROJECTIONS) else 1.0
                value = torch.randn(shape, generator=generator) * (gain / math.sqrt(fan_in))
            parameter.copy_(value)


def constructed(model_class, config):
    """`model_class(config)` without its own initialisation (transformers' `no_init_weights`): `seed_parameters`
    writes every parameter next, so the values drawn there were thrown away (a third of a job's time); the buffers
    (position ids) are the constructor's."""
    from transformers.initialization import no_init_weights

    with no_init_weights():
        return model_class(config)


def normalised(images, mean, std):
    """uint8 [N, S, S, 3] -> float32 NCHW tensor, (x / 255 - mean) / std."""
    import torch

    pixels = (images.astype(np.float32) / 255 - np.float32(mean)) / np.float32(std)
    return torch.from_numpy(pixels.transpose(0, 3, 1, 2).copy())


def unit(rows):
    return (rows / rows.norm(dim=-1, keepdim=True)).numpy()


def clip(job):
    import torch
    from transformers import CLIPConfig, CLIPModel

    folder = Path(job["folder"])
    model = constructed(CLIPModel, CLIPConfig(**job["config"]))
    seed_parameters(model, job["seed"])
    model.save_pretrained(folder)
    model = CLIPModel.from_pretrained(folder).eval()
    images, ids = np.load(job["images"]), torch.from_numpy(np.load(job["token_ids"]).astype(np.int64))
    with torch.no_grad():
        pooled = model.vision_model(pixel_values=normalised(images, job["mean"], job["std"])).pooler_output
        text = model.text_projection(model.text_model(input_ids=ids).pooler_output)
        return {"pooled": pooled.numpy(), "embedding": unit(model.visual_projection(pooled)), "text": unit(text)}


def open_clip(job):
    import open_clip as library
    import torch
    from PIL import Image
    from safetensors.torch import save_file

    folder = Path(job["folder"])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "open_clip_config.json").write_text(json.dumps(job["config"]))
    model = library.create_model("local-dir:%s" % folder)  # no weights in the folder yet: open_clip's own init
    seed_parameters(model, job["seed"])
    save_file({name: tensor.contiguous() for name, tensor in model.state_dict().items()},
              str(folder / "open_clip_model.safetensors"))
    model, _, preprocess = library.create_model_and_transforms("local-dir:%s" % folder)  # read back from the file
    model.eval()
    images = torch.stack([preprocess(Image.fromarray(image)) for image in np.load(job["images"])])
    ids = torch.from_numpy(np.load(job["token_ids"]).astype(np.int64))
    with torch.no_grad():
        return {"embedding": model.encode_image(images, normalize=True).numpy(),
                "text": model.encode_text(ids, normalize=True).numpy()}


def dinov2(job):
    import torch
    from transformers import Dinov2Config, Dinov2Model, Dinov2WithRegistersConfig, Dinov2WithRegistersModel

    folder = Path(job["folder"])
    config = dict(job["config"])
    registers = config.pop("model_type", "dinov2") == "dinov2_with_registers"
    model_class, config_class = ((Dinov2WithRegistersModel, Dinov2WithRegistersConfig) if registers
                                 else (Dinov2Model, Dinov2Config))
    model = constructed(model_class, config_class(**config))
    seed_parameters(model, job["seed"])
    model.save_pretrained(folder)
    model = model_class.from_pretrained(folder).eval()
    skip = 1 + (model.config.num_register_tokens if registers else 0)
    with torch.no_grad():
        outputs = model(pixel_values=normalised(np.load(job["images"]), IMAGENET_MEAN, IMAGENET_STD))
    sequence = outputs.last_hidden_state
    return {"class_token": outputs.pooler_output.numpy(),
            "class_and_patch_mean": torch.cat([sequence[:, 0], sequence[:, skip:].mean(1)], dim=1).numpy()}


def siglip(job):
    import torch
    from transformers import SiglipConfig, SiglipModel

    folder = Path(job["folder"])
    model = constructed(SiglipModel, SiglipConfig(text_config=job["text"], vision_config=job["vision"]))
    seed_parameters(model, job["seed"])
    model.save_pretrained(folder)
    model = SiglipModel.from_pretrained(folder).eval()
    images, ids = np.load(job["images"]), torch.from_numpy(np.load(job["token_ids"]).astype(np.int64))
    with torch.no_grad():
        outputs = {"pooled": model.get_image_features(pixel_values=normalised(images, 0.5, 0.5)).pooler_output,
                   "text": model.get_text_features(input_ids=ids).pooler_output}
        if job.get("siglip2"):
            outputs["siglip2_pooled"], outputs["siglip2_text"] = siglip2_features(folder, job["vision"], job["text"],
                                                                                  images, ids)
    return {name: value.numpy() for name, value in outputs.items()}


def siglip2_features(folder, vision, text, images, ids):
    """Siglip2Model (the NaFlex class) holding the fixed-resolution checkpoint's weights: its patch embedding is a
    linear layer over flattened patches (row, column, channel), its position embeddings resized to the grid (here
    the grid they were stored for), the patches given with a mask of ones. Returns its (pooled, text) tensors."""
    import torch
    from safetensors.torch import load_file
    from transformers import Siglip2Config, Siglip2Model

    patch, side = vision["patch_size"], vision["image_size"]
    grid, width = side // patch, vision["hidden_size"]
    sizes = {key: value for key, value in vision.items() if key != "image_size"}
    model = constructed(Siglip2Model, Siglip2Config(text_config=text, vision_config=dict(sizes,
                                                                                    num_patches=grid * grid))).eval()
    state = load_file(str(folder / "model.safetensors"))
    weight = state["vision_model.embeddings.patch_embedding.weight"]  # [W, 3, P, P] -> [W, P * P * 3]
    state["vision_model.embeddings.patch_embedding.weight"] = weight.permute(0, 2, 3, 1).reshape(width, -1)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise SystemExit("Siglip2Model does not take the checkpoint: missing %s, unexpected %s" % (missing, unexpected))
    count = len(images)
    patches = normalised(images, 0.5, 0.5).permute(0, 2, 3, 1).reshape(count, grid, patch, grid, patch, 3).permute(
        0, 1, 3, 2, 4, 5).reshape(count, grid * grid, patch * patch * 3)
    pooled = model.get_image_features(pixel_values=patches,
                                      pixel_attention_mask=torch.ones(count, grid * grid, dtype=torch.long),
                                      spatial_shapes=torch.tensor([[grid, grid]] * count))
    return pooled.pooler_output, model.get_text_features(input_ids=ids).pooler_output


def interpolate(job):
    import torch

    table = torch.from_numpy(np.load(job["table"]).astype(np.float32))
    resized = torch.nn.functional.interpolate(table, size=tuple(job["size"]), mode="bicubic", align_corners=False,
                                              antialias=job["antialias"])
    return {"resized": resized.numpy()}


KINDS = {"clip": clip, "open_clip": open_clip, "dinov2": dinov2, "siglip": siglip, "interpolate": interpolate}


def main(request):
    for job in json.loads(Path(request).read_text())["jobs"]:
        np.savez(job["output"], **KINDS[job["kind"]](job))


def serve():
    """Runs the request files named on stdin, one a line, until "quit" (or stdin's end); replies on stdout."""
    import torch

    torch.set_num_threads(1)  # the test processes are the parallelism (tests/conftest.py)
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # what transformers or open_clip print goes to stderr, never into a reply
    for line in sys.stdin:
        request = line.strip()
        if request == "quit":
            break
        try:
            main(request)
            replies.write("ok\n")
        except SystemExit as error:  # a job's own refusal: its message, as the interpreter prints it
            replies.write("error: %s\n" % error)
        except Exception as error:  # noqa: BLE001 -- the test names it; each job builds its own models afresh
            replies.write("error: %s\n" % traceback.format_exception_only(type(error), error)[-1].strip())
        replies.flush()


if __name__ == "__main__":
    if sys.argv[1] == "--serve":
        serve()
    else:
        import torch

        torch.set_num_threads(1)
        main(sys.argv[1])

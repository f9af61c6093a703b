"""transformers' SigLIP on PyTorch in a process of its own: writes a checkpoint in the publisher's layout and the
references' features, for tests/test_siglip.py (transformers' modeling code crashes a process that loaded
TensorFlow first, as the tests' do).

    python tests/siglip_reference.py REQUESTS.json

REQUESTS: a list of requests (one process, one import of PyTorch, for all), each {"folder": where
SiglipModel(config).save_pretrained writes, "vision": {...}, "text": {...} (SiglipConfig's sizes), "seed": int,
"images": an .npy of uint8 [N, S, S, 3], "ids": an .npy of int32 [M, L], "siglip2": bool}.
Writes into the folder reference_pooled.npy (get_image_features' pooler_output), reference_text.npy
(get_text_features'), and with "siglip2" the same from Siglip2Model holding the same weights
(siglip2_pooled.npy, siglip2_text.npy).
"""

import json
import sys
from pathlib import Path

import numpy as np


def pixels(images):
    """SiglipImageProcessor's normalisation of uint8 images: float32 (x / 255 - 0.5) / 0.5, channels first."""
    import torch
    return torch.from_numpy((images.astype(np.float32) / 255 - np.float32(0.5)) / np.float32(0.5)).permute(0, 3, 1, 2)


def save_pretrained(folder, vision, text, seed):
    """SiglipModel of these sizes, its parameters drawn (seeded) at a trained network's scales (transformers'
    initialisation makes features that hardly differ), saved with save_pretrained; returns the model."""
    import torch
    from transformers import SiglipConfig, SiglipModel
    torch.manual_seed(seed)
    model = SiglipModel(SiglipConfig(text_config=text, vision_config=vision)).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                parameter.uniform_(0.5, 1.5)
            elif name.endswith("bias") and "logit" not in name:
                parameter.uniform_(-0.1, 0.1)
            elif "embedding.weight" in name or name.endswith("probe"):
                parameter.normal_(0, 0.5)
            elif parameter.dim() >= 2:
                parameter.normal_(0, 1 / np.sqrt(np.prod(parameter.shape[1:])))
    model.save_pretrained(folder, safe_serialization=True)
    return model


def siglip2_features(folder, vision, text, images, ids):
    """Siglip2Model (the NaFlex class) holding the fixed-resolution checkpoint's weights: its patch embedding is a
    linear layer over flattened patches (row, column, channel), its position embeddings resized to the grid (here
    the grid they were stored for), the patches given with a mask of ones."""
    import torch
    from safetensors.torch import load_file
    from transformers import Siglip2Config, Siglip2Model
    patch, side = vision["patch_size"], vision["image_size"]
    grid, width = side // patch, vision["hidden_size"]
    sizes = {key: value for key, value in vision.items() if key not in ("image_size",)}
    model = Siglip2Model(Siglip2Config(text_config=text, vision_config=dict(sizes, num_patches=grid * grid))).eval()
    state = load_file(str(Path(folder) / "model.safetensors"))
    weight = state["vision_model.embeddings.patch_embedding.weight"]  # [W, 3, P, P] -> [W, P * P * 3]
    state["vision_model.embeddings.patch_embedding.weight"] = weight.permute(0, 2, 3, 1).reshape(width, -1)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise SystemExit("Siglip2Model does not take the checkpoint: missing %s, unexpected %s" % (missing, unexpected))
    count = len(images)
    patches = pixels(images).permute(0, 2, 3, 1).reshape(count, grid, patch, grid, patch, 3).permute(
        0, 1, 3, 2, 4, 5).reshape(count, grid * grid, patch * patch * 3)
    with torch.no_grad():
        pooled = model.get_image_features(pixel_values=patches,
                                          pixel_attention_mask=torch.ones(count, grid * grid, dtype=torch.long),
                                          spatial_shapes=torch.tensor([[grid, grid]] * count))
        embedded = model.get_text_features(input_ids=torch.from_numpy(ids).long())
    return pooled.pooler_output.numpy(), embedded.pooler_output.numpy()


def main(request):
    import torch
    folder = Path(request["folder"])
    images, ids = np.load(request["images"]), np.load(request["ids"])
    model = save_pretrained(folder, request["vision"], request["text"], request["seed"])
    with torch.no_grad():
        np.save(folder / "reference_pooled.npy", model.get_image_features(pixel_values=pixels(images)).pooler_output)
        np.save(folder / "reference_text.npy",
                model.get_text_features(input_ids=torch.from_numpy(ids).long()).pooler_output)
    if request.get("siglip2"):
        pooled, embedded = siglip2_features(folder, request["vision"], request["text"], images, ids)
        np.save(folder / "siglip2_pooled.npy", pooled)
        np.save(folder / "siglip2_text.npy", embedded)


if __name__ == "__main__":
    import torch
    torch.set_num_threads(2)  # the machine's cores; the test processes beside it have theirs
    for request in json.loads(Path(sys.argv[1]).read_text()):
        main(request)

"""Small image files for the decode and reader tests: solid colours, noise JPEGs, and files that are not images."""

import numpy as np
from PIL import Image

RED, GREEN, BLUE, WHITE = (255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 255)


def solid(size, colour, mode="RGB"):
    return Image.new(mode, size, colour)


def noise_jpeg(path, size=(64, 64), seed=0):
    pixels = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path, quality=90)
    return path


def write_bad_files(folder, scratch):
    """empty.jpg, text.jpg and page.jpg (text saved as .jpg), cut.jpg and cut.png (truncated) in
    `folder`; the whole files they were cut from are left in `scratch`."""
    (folder / "empty.jpg").write_bytes(b"")
    (folder / "text.jpg").write_text("just some notes\n")
    (folder / "page.jpg").write_text("<!DOCTYPE html><html><body>Not found</body></html>")
    full = noise_jpeg(scratch / "whole.jpg").read_bytes()
    (folder / "cut.jpg").write_bytes(full[:len(full) // 2])
    Image.fromarray(np.random.default_rng(1).integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(scratch / "f.png")
    full = (scratch / "f.png").read_bytes()
    (folder / "cut.png").write_bytes(full[:len(full) // 2])


def write_bombs(folder):
    """Mode "1" PNGs in `folder`: small files, huge images. pillow_bomb.png (15000x15000) is over
    Pillow's own error limit (2 * 89478485 pixels); our_bomb.png (12000x9000) is over ours (1e8)
    but only at Pillow's warning level."""
    Image.new("1", (15000, 15000)).save(folder / "pillow_bomb.png")
    Image.new("1", (12000, 9000)).save(folder / "our_bomb.png")
    return folder

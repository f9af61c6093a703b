"""search_features.py in a process of its own, with tests/small_clip.py's CLIP in ViT-B/32's place.

    python tests/search_child.py serve INDEX --weights SMALL_CLIP_FOLDER --port 0

For the tests that need a real `serve` of a CLIP output (the service's page in a browser) without ViT-B/32's
605 MB: search_features.py runs as the program (`runpy`, as `python search_features.py`), its signal handling and
exit status its own; only the configuration `clip_vit_b32` names, for the text and the image tower, is SMALL (the
same code, small sizes), as tests/services.py's clip_job computed its output.
"""

import runpy
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPOSITORY = TESTS.parent

if __name__ == "__main__":
    sys.path[:1] = [str(REPOSITORY), str(TESTS)]  # the repository's modules, then small_clip
    from models.clip import clip, clip_layers
    from small_clip import SMALL
    clip_layers.CONFIGS["clip_vit_b32"] = SMALL
    clip.VIT_B32 = clip.ImageModel(SMALL)
    sys.argv[0] = str(REPOSITORY / "search_features.py")
    runpy.run_path(sys.argv[0], run_name="__main__")

"""--weights hf://ORG/NAME@COMMIT: parsed once (a commit required), the checkpoint's files fetched into the hub's cache
from a hub on loopback (tests/hub_server.py), a pickle-only commit refused without reading it, offline, and which
family a checkpoint's config names."""

import json

import pytest

from hub_server import FakeHub
from models import hub_checkpoint, hub_download
from models.files import WeightsError
from models.hub_checkpoint import HubCheckpoint, check_model_type, hub_checkpoint_folder

COMMIT = "0123456789abcdef0123456789abcdef01234567"
CONFIG = json.dumps({"model_type": "clip", "projection_dim": 512}).encode()


@pytest.fixture
def hub(fake_hub):
    fake_hub.add("owner/clip", COMMIT, "model.safetensors", b"weights" * 100)
    fake_hub.add("owner/clip", COMMIT, "config.json", CONFIG, lfs=False)
    fake_hub.add("owner/clip", COMMIT, "tokenizer.json", b'{"model": {}}', lfs=False)
    return fake_hub


def test_the_form_is_parsed_once_and_a_commit_is_required():
    checkpoint = hub_checkpoint.hub_checkpoint("hf://owner/clip@%s" % COMMIT)
    assert (checkpoint.repo, checkpoint.revision, checkpoint.weights) == ("owner/clip", COMMIT,
                                                                         "hf://owner/clip@%s" % COMMIT)
    assert hub_checkpoint.hub_checkpoint("hf://models/owner/clip@%s" % COMMIT) == checkpoint
    assert hub_checkpoint.is_hub_weights("hf://owner/clip") and not hub_checkpoint.is_hub_weights("folder/hf")
    refusals = {
        "hf://owner/clip": r"weights=hf://owner/clip names no commit, and weights must be pinned: pass "
                           r"hf://owner/clip@COMMIT \(COMMIT: the 40 hex digits .*\), or pass a downloaded folder, "
                           r"--weights FOLDER \(`hf download owner/clip --local-dir FOLDER`\)",
        "hf://owner/clip@main": r"weights=hf://owner/clip@main: 'main' is a branch or a tag, which moves \(and the "
                                r"features with it\), not a commit id: pass hf://owner/clip@COMMIT",
        "hf://owner/clip@0123abc": r"'0123abc' is a branch or a tag",
        "hf://datasets/owner/images@%s" % COMMIT: "names a dataset repository; expected a model's",
        "hf://owner/clip@%s/model.safetensors" % COMMIT: r"names the file model.safetensors; expected the "
                                                         r"repository at a commit, hf://owner/clip@COMMIT",
        "hf://clip": r"weights=hf://clip: Repository id must be 'namespace/name', got 'clip'; expected "
                     r"hf://ORG/NAME@COMMIT",
    }
    for weights, message in refusals.items():
        with pytest.raises(WeightsError, match=message) as error:
            hub_checkpoint.hub_checkpoint(weights)
        assert "\n" not in str(error.value)


def test_the_folder_holds_the_weights_and_the_files_the_commit_has(hub):
    checkpoint = HubCheckpoint("owner/clip", COMMIT)
    folder = hub_checkpoint_folder(checkpoint)
    assert folder == hub_download.cache_path(checkpoint.file("config.json")).parent
    assert sorted(path.name for path in folder.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json"]
    assert hub_download.cached_absent(checkpoint.file("vocab.json"))  # asked once, recorded absent
    assert not any(request[1].endswith("open_clip_model.safetensors") for request in hub.requests)
    hub.requests.clear()
    assert hub_checkpoint_folder(checkpoint) == folder and hub.requests == []  # all known: nothing asked
    assert hub_checkpoint_folder("hf://owner/clip@" + COMMIT) == folder  # the --weights string will do
    assert check_model_type(folder, "clip", checkpoint.weights) == "clip"


def test_open_clip_s_weights_when_the_commit_has_no_model_safetensors(hub):
    other = "1" * 40
    hub.add("owner/clip", other, "open_clip_model.safetensors", b"open_clip weights")
    hub.add("owner/clip", other, "open_clip_config.json", b"{}", lfs=False)
    folder = hub_checkpoint_folder(HubCheckpoint("owner/clip", other), optional=("open_clip_config.json",))
    assert sorted(path.name for path in folder.iterdir()) == ["open_clip_config.json", "open_clip_model.safetensors"]
    assert hub_checkpoint.checkpoint_model_type(folder) == "open_clip"
    assert check_model_type(folder, "clip", "hf://owner/clip@" + other) == "open_clip"


def test_a_commit_with_only_a_pickle_is_one_line_and_the_pickle_is_never_downloaded(hub):
    pickled = "2" * 40
    hub.add("owner/clip", pickled, "pytorch_model.bin", b"PK\x03\x04 a pickle")
    with pytest.raises(WeightsError, match=r"hf://owner/clip@2{40} has no model.safetensors or "
                                           r"open_clip_model.safetensors, only pytorch_model.bin: a pickle, which can "
                                           r"run code when it is read and is never read here") as error:
        hub_checkpoint_folder(HubCheckpoint("owner/clip", pickled))
    assert "\n" not in str(error.value)
    assert [method for method, path, *_ in hub.requests if path.endswith("/pytorch_model.bin")] == ["HEAD"]
    assert "GET" not in [method for method, *_ in hub.requests]
    empty = "3" * 40
    hub.add("owner/clip", empty, "README.md", b"nothing", lfs=False)
    with pytest.raises(WeightsError, match=r"hf://owner/clip@3{40} has no model.safetensors or "
                                           r"open_clip_model.safetensors: pass a commit that has"):
        hub_checkpoint_folder(HubCheckpoint("owner/clip", empty))


def test_offline_the_cached_checkpoint_is_read_and_an_absent_one_refused_in_one_line(hub, monkeypatch):
    checkpoint = HubCheckpoint("owner/clip", COMMIT, "CLIP weights")
    hub_download.hub_file(checkpoint.file("model.safetensors"))  # only the weights in the cache
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub.requests.clear()
    folder = hub_checkpoint_folder(checkpoint)
    assert [path.name for path in folder.iterdir()] == ["model.safetensors"] and hub.requests == []
    with pytest.raises(WeightsError, match=r"owner/clip@4{40} model.safetensors is not in the hub's cache .* "
                                           r"HF_HUB_OFFLINE is set: pass a downloaded folder, --weights FOLDER"):
        hub_checkpoint_folder(HubCheckpoint("owner/clip", "4" * 40, "CLIP weights"))
    assert hub.requests == []


def test_with_the_weights_cached_an_unreachable_hub_passes_over_the_other_files(hub, monkeypatch):
    checkpoint = HubCheckpoint("owner/clip", COMMIT)
    hub_download.hub_file(checkpoint.file("model.safetensors"))
    with FakeHub() as closed:
        monkeypatch.setenv("HF_ENDPOINT", closed.endpoint)
    assert [path.name for path in hub_checkpoint_folder(checkpoint).iterdir()] == ["model.safetensors"]
    with pytest.raises(hub_download.HubUnreachable, match="cannot download"):
        hub_checkpoint_folder(HubCheckpoint("owner/clip", "5" * 40))


def test_the_config_says_which_family_reads_the_checkpoint(tmp_path):
    assert check_model_type(tmp_path, "clip", "hf://x/y") is None  # no config: the reader checks arrays
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "dinov2"}))
    assert check_model_type(tmp_path, "dinov2", "hf://x/y") == "dinov2"
    with pytest.raises(WeightsError, match=r"weights=hf://x/y is a dinov2 checkpoint \(its config's model_type\), not "
                                           r"a clip one: pass --model dinov2, which reads its size from the config"):
        check_model_type(tmp_path, "clip", "hf://x/y")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(WeightsError, match="is a bert checkpoint .* no model here reads it"):
        check_model_type(tmp_path, "clip", "hf://x/y")
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(WeightsError, match="config.json cannot be read as JSON: Expecting property name"):
        check_model_type(tmp_path, "clip", "hf://x/y")

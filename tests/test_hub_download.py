"""Hugging Face hub files through huggingface_hub, on a hub on loopback (tests/hub_server.py), never the network:
its cache under HF_HOME, the check of the bytes against a pinned SHA-256 or the hub's hash, a cut download
resumed, offline mode, a gated repository's token, and every failure in one line."""

import hashlib

import pytest

from hub_server import FakeHub, git_blob_sha1
from models import hub_download
from models.files import WeightsError

COMMIT = "0123456789abcdef0123456789abcdef01234567"
CONTENT = b"safetensors bytes" * 500
SHA256 = hashlib.sha256(CONTENT).hexdigest()
FILE = hub_download.HubFile("owner/model", COMMIT, "model.safetensors", sha256=None, what="test weights (8 kB)",
                            random_command="python -m models.weight_files random x.safetensors")
PINNED = hub_download.HubFile("owner/model", COMMIT, "model.safetensors", sha256=SHA256, what="test weights (8 kB)",
                              random_command=FILE.random_command)


@pytest.fixture
def home(tmp_path):
    return tmp_path / "hf-home"


@pytest.fixture
def hub(fake_hub):
    fake_hub.add("owner/model", COMMIT, "model.safetensors", CONTENT)
    return fake_hub


def test_url_identity_and_the_checks_of_a_pin(monkeypatch):
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    assert FILE.url == "https://huggingface.co/owner/model/resolve/%s/model.safetensors" % COMMIT
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9/")
    assert FILE.url == "http://127.0.0.1:9/owner/model/resolve/%s/model.safetensors" % COMMIT
    assert PINNED.identity == "hub owner/model@%s model.safetensors, sha256 %s" % (COMMIT, SHA256)
    assert FILE.identity == "hub owner/model@%s model.safetensors, sha256 from the hub's X-Linked-Etag" % COMMIT
    with pytest.raises(ValueError, match="revision='main'; expected a commit id"):
        hub_download.HubFile("owner/model", "main", "model.safetensors", None, "w", "c")
    with pytest.raises(ValueError, match="sha256='abc'"):
        hub_download.HubFile("owner/model", COMMIT, "model.safetensors", "abc", "w", "c")


def test_the_cache_is_huggingface_hub_s(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert hub_download.hub_cache_dir() == tmp_path / "home" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    assert hub_download.cache_path(FILE) == (tmp_path / "cache" / "models--owner--model" / "snapshots" / COMMIT
                                             / "model.safetensors")


def test_a_download_goes_into_huggingface_hub_s_cache_and_is_checked_against_the_hub_s_hash(hub, home):
    from huggingface_hub import try_to_load_from_cache

    path = hub_download.hub_file(FILE)
    assert path == home / "hub" / "models--owner--model" / "snapshots" / COMMIT / "model.safetensors"
    assert path.read_bytes() == CONTENT and path.resolve().name == SHA256  # the hub's blob, named by its hash
    assert try_to_load_from_cache("owner/model", "model.safetensors", cache_dir=home / "hub",
                                  revision=COMMIT) == str(path)  # huggingface_hub's own reader of its cache finds it
    resolve = "/owner/model/resolve/%s/model.safetensors" % COMMIT
    assert [request[:2] for request in hub.requests] == [
        ("HEAD", resolve), ("HEAD", resolve), ("GET", "/blobs/owner/model/%s/model.safetensors" % COMMIT)]
    hub.requests.clear()
    assert hub_download.hub_file(FILE) == path and hub.requests == []  # in the cache: not asked again


def test_a_file_whose_bytes_do_not_match_is_refused_in_one_line_and_not_kept(hub, home):
    hub.add("owner/model", COMMIT, "model.safetensors", b"other bytes", etag=SHA256)  # the hub's hash is a lie
    with pytest.raises(WeightsError, match="has SHA-256 %s, expected %s; nothing was kept"
                       % (hashlib.sha256(b"other bytes").hexdigest(), SHA256)) as error:
        hub_download.hub_file(PINNED)
    assert "\n" not in str(error.value)
    assert not hub_download.cache_path(PINNED).exists()
    assert list((home / "hub" / "models--owner--model" / "blobs").iterdir()) == []
    with pytest.raises(WeightsError, match="has SHA-256 .*, expected %s; nothing was kept" % SHA256):
        hub_download.hub_file(FILE)  # unpinned: checked against the hub's X-Linked-Etag alike


def test_a_hash_the_hub_gives_other_than_the_pinned_one_is_refused_before_the_download(hub):
    hub.add("owner/model", COMMIT, "model.safetensors", b"other bytes")
    with pytest.raises(WeightsError, match="the hub gives owner/model@%s model.safetensors SHA-256 %s, not the pinned "
                                           "%s: nothing was downloaded" % (COMMIT, hashlib.sha256(b"other bytes")
                                                                           .hexdigest(), SHA256)):
        hub_download.hub_file(PINNED)
    assert [method for method, *_ in hub.requests] == ["HEAD"]


def test_a_file_the_hub_keeps_in_git_is_checked_against_its_git_blob_sha1(hub):
    vocabulary = b'{"a</w>": 0}\n' * 100
    hub.add("owner/model", COMMIT, "vocab.json", vocabulary, lfs=False)
    file = hub_download.HubFile("owner/model", COMMIT, "vocab.json", None, "vocabulary", "c")
    assert hub_download.hub_file(file).read_bytes() == vocabulary
    assert hub_download.cache_path(file).resolve().name == git_blob_sha1(vocabulary)
    hub.add("owner/model", COMMIT, "merges.txt", b"changed", lfs=False, etag=git_blob_sha1(b"the original"))
    with pytest.raises(WeightsError, match="has git blob SHA-1 [0-9a-f]{40}, expected %s; nothing was kept"
                       % git_blob_sha1(b"the original")):
        hub_download.hub_file(hub_download.HubFile("owner/model", COMMIT, "merges.txt", None, "merges", "c"))


def test_a_hub_without_a_hash_or_for_another_commit_is_refused_before_the_download(hub):
    hub.add("owner/model", COMMIT, "model.safetensors", CONTENT, etag="W/not-a-hash")
    with pytest.raises(WeightsError, match="the hub gave no hash of owner/model@%s model.safetensors .* none is "
                                           "pinned: nothing was downloaded; pass a downloaded folder" % COMMIT):
        hub_download.hub_file(FILE)
    hub.add("owner/model", COMMIT, "model.safetensors", CONTENT, answered_commit="f" * 40)
    with pytest.raises(WeightsError, match="answered for commit f{40} when owner/model@%s model.safetensors was asked "
                                           "for" % COMMIT):
        hub_download.hub_file(FILE)
    assert [method for method, *_ in hub.requests] == ["HEAD", "HEAD"]


def test_a_cut_download_is_resumed_where_it_stopped(hub):
    """huggingface_hub's http_get resumes with a Range request once a chunk (10 MiB) has been written."""
    content = bytes(range(256)) * (96 * 1024)  # 24 MiB
    hub.add("owner/model", COMMIT, "big.safetensors", content)
    hub.cut_once("big.safetensors")
    file = hub_download.HubFile("owner/model", COMMIT, "big.safetensors", None, "big weights", "c")
    assert hub_download.hub_file(file).read_bytes() == content
    gets = [request for request in hub.requests if request[0] == "GET"]
    assert len(gets) == 2 and gets[0][3] is None and gets[1][3] == "bytes=%d-" % (10 << 20)


def test_offline_mode_reads_the_cache_and_refuses_the_rest_in_one_line(hub, monkeypatch):
    path = hub_download.hub_file(FILE)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub.requests.clear()
    assert hub_download.hub_file(FILE) == path
    with pytest.raises(WeightsError, match=r"^owner/model@%s vocab.json is not in the hub's cache \(.*\) and "
                                           r"HF_HUB_OFFLINE is set: pass a downloaded folder, --weights FOLDER "
                                           r"\(`hf download owner/model --revision %s --local-dir FOLDER` where there "
                                           r"is a network\), or random weights: c$" % (COMMIT, COMMIT)) as error:
        hub_download.hub_file(hub_download.HubFile("owner/model", COMMIT, "vocab.json", None, "vocabulary", "c"))
    assert "\n" not in str(error.value) and hub.requests == []


def test_an_unreachable_hub_is_one_line_offering_a_folder_and_the_random_command(hub, home, monkeypatch):
    with FakeHub() as closed:
        endpoint = closed.endpoint
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    with pytest.raises(hub_download.HubUnreachable, match=r"cannot download owner/model@%s model.safetensors from %s "
                                                          r"\(.*\): offline\? pass a downloaded folder, --weights "
                                                          r"FOLDER" % (COMMIT, endpoint)) as error:
        hub_download.hub_file(FILE)
    assert "\n" not in str(error.value) and str(error.value).endswith(FILE.random_command)
    assert not (home / "hub").exists() or not any((home / "hub").rglob("model.safetensors"))


def test_a_gated_repository_needs_a_token_which_goes_to_the_hub_only(hub, monkeypatch):
    hub.gate("owner/model", "hf_secret")
    with pytest.raises(WeightsError, match=r"owner/model is gated or private \(HTTP 401\): accept its terms on the hub "
                                           r"and set HF_TOKEN") as error:
        hub_download.hub_file(FILE)
    assert "\n" not in str(error.value)
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    hub.requests.clear()
    assert hub_download.hub_file(FILE).read_bytes() == CONTENT
    assert [(method, authorization) for method, _, authorization, _ in hub.requests] == [
        ("HEAD", "Bearer hf_secret"), ("HEAD", "Bearer hf_secret"), ("GET", None)]  # not to the CDN


def test_an_absent_file_a_commit_or_a_repository_the_hub_lacks(hub):
    absent = hub_download.HubFile("owner/model", COMMIT, "nothing.json", None, "nothing", "c")
    assert not hub_download.cached_absent(absent)
    with pytest.raises(hub_download.HubFileAbsent, match="owner/model@%s has no nothing.json" % COMMIT):
        hub_download.hub_file(absent)
    assert hub_download.cached_absent(absent)  # recorded as huggingface_hub records it
    assert hub_download.hub_has(FILE) and not hub_download.hub_has(absent)
    with pytest.raises(WeightsError, match="owner/model has no commit f{40} .HTTP 404.: check the commit"):
        hub_download.hub_file(hub_download.HubFile("owner/model", "f" * 40, "model.safetensors", None, "w", "c"))
    with pytest.raises(WeightsError, match="the hub has no repository owner/other"):
        hub_download.hub_file(hub_download.HubFile("owner/other", COMMIT, "model.safetensors", None, "w", "c"))

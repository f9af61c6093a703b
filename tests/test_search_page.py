"""search.page: the report in a real browser (Debian's chromium through Playwright), thumbnails, the server; each
tile's caption score and a SigLIP sentence's probability, on a page `page` wrote of a small SigLIP's output."""

import contextlib
import csv
import io
import json
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from hangs import HANG_SECONDS
from search.duplicates import histogram
from search.page import GROUPS_PER_PAGE, THUMBS, make_thumbnail, write_page
from search.server import make_server
from services import captioned_copy, kept_job, probability_text, run, siglip_job  # noqa: F401 -- the jobs: fixtures

CHROMIUM = Path("/usr/bin/chromium")
BROWSER_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def photos(folder, count):
    """`count` smooth colour JPEGs (upsampled noise), in two subfolders; their paths relative to `folder`."""
    rng = np.random.default_rng(0)
    names = []
    for index in range(count):
        name = "%s/photo %02d.jpg" % ("ab"[index % 2], index)
        small = Image.fromarray(rng.integers(0, 255, (6, 8, 3), dtype=np.uint8))
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        small.resize((320, 240), Image.BICUBIC).save(folder / name, quality=90)
        names.append(name)
    return names


@pytest.fixture
def report(tmp_path):
    images = tmp_path / "images"
    names = photos(images, 12)
    (images / "broken.jpg").write_bytes(b"not an image")
    queries = [{"label": names[0], "image": str(images / names[0]),
                "neighbours": [(name, 1.0 - 0.01 * rank) for rank, name in enumerate(names[:5])]},
               {"label": "q.npy[0]", "image": None, "neighbours": [("broken.jpg", 0.5), (names[3], 0.4)]}]
    # More groups than a page shows, with a name that would be HTML if it were not escaped.
    groups = [[names[index % 12], names[(index + 1) % 12]] for index in range(GROUPS_PER_PAGE + 7)]
    groups.insert(0, names[:6] + ["broken.jpg"])
    scores = np.random.default_rng(1).uniform(0.2, 1.0, 300)
    page = write_page(tmp_path / "page", queries=queries, groups=groups, histogram=histogram(scores),
                      threshold=0.9, images_root=images, title="Search <b>test</b>", details="12 photos",
                      keep_rule="first-key")
    return page, groups


def test_the_page_holds_everything_inline_and_a_thumbnail_per_image(report):
    page, _ = report
    text = page.read_text()
    assert "<svg" in text and "Content-Security-Policy" in text and "Search &lt;b&gt;test&lt;/b&gt;" in text
    assert "http://" not in text.replace("http://www.w3.org/2000/svg", "") and "https://" not in text
    thumbs = sorted((page.parent / "thumbs").iterdir())
    assert len(thumbs) == 14  # 12 photos, the broken file's placeholder, the query image by its own path
    for thumb in thumbs:
        with Image.open(thumb) as image:
            assert image.format == "JPEG" and max(image.size) == 160


def _colour(path):
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"), dtype=np.float32).mean(axis=(0, 1))


def test_thumbnails_of_tar_members_and_of_objects_in_a_store(tmp_path, s3):
    import tarfile
    from parallel.inputs.tars import Entry, member_key, write_index
    images = tmp_path / "images"
    names = photos(images, 4)
    with tarfile.open(tmp_path / "shard.tar", "w", format=tarfile.GNU_FORMAT) as tar:
        for name in names:
            tar.add(images / name, arcname=name)
    with tarfile.open(tmp_path / "shard.tar") as tar:  # where each member's bytes are, as a job's index says
        entries = [Entry(member_key(info.name, str(tmp_path / "shard.tar")), info.offset_data, info.size)
                   for info in tar.getmembers()]
    write_index(tmp_path / "out.parquet.members.parquet", entries[:3])
    keys = [entry.key for entry in entries]
    page = write_page(tmp_path / "tars", groups=[keys], members=tmp_path / "out.parquet.members.parquet")
    reference = write_page(tmp_path / "files", groups=[names], images_root=images)
    for key, name in zip(keys[:3], names):  # each member's thumbnail is its image's
        np.testing.assert_allclose(_colour(page.parent / _thumb(key)), _colour(reference.parent / _thumb(name)),
                                   atol=1.0)
    assert np.all(np.abs(_colour(page.parent / _thumb(keys[3])) - 197) < 12)  # not in the index: the placeholder
    # The same images as objects under an s3:// prefix (the root an s3:// --images job records).
    for name in names:
        s3.filesystem.pipe("%s/photos/%s" % (s3.bucket, name), (images / name).read_bytes())
    page = write_page(tmp_path / "objects", groups=[names], images_root="s3://%s/photos" % s3.bucket)
    for name in names:
        np.testing.assert_allclose(_colour(page.parent / _thumb(name)), _colour(reference.parent / _thumb(name)),
                                   atol=1.0)


def _thumb(image):
    from search.page import _thumb_name
    return "thumbs/" + _thumb_name(image)


def test_a_thumbnail_of_an_unreadable_image_is_a_placeholder(tmp_path):
    (tmp_path / "bad.jpg").write_bytes(b"nope")
    assert make_thumbnail(tmp_path / "bad.jpg", tmp_path / "t.jpg") is False
    with Image.open(tmp_path / "t.jpg") as image:
        assert image.size == (160, 160)


def test_the_server_serves_the_page_on_loopback_only(report):
    page, _ = report
    server = make_server(page.parent, port=0)
    host, port = server.server_address
    assert host == "127.0.0.1"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/" % port, timeout=HANG_SECONDS) as response:
            assert b"<svg" in response.read()
    finally:
        server.shutdown()
        server.server_close()
    with pytest.raises(ValueError, match="has no index.html"):
        make_server(page.parent / "thumbs")


def wait_for_images(page):
    """Returns once every image of `page` is complete. Polled from here: Playwright's wait_for_function
    evaluates its predicate again with eval, which the page's Content-Security-Policy (no 'unsafe-eval')
    refuses whenever the first check comes before the images."""
    deadline = time.monotonic() + HANG_SECONDS  # a guard against a hang only (tests/hangs.py)
    while not page.evaluate("Array.from(document.images).every(img => img.complete)"):
        assert time.monotonic() < deadline, "the page's images did not load in %d s" % HANG_SECONDS
        page.wait_for_timeout(50)


needs_a_browser = pytest.mark.skipif(not CHROMIUM.exists(), reason="no browser: /usr/bin/chromium is not "
                                                                   "installed (apt-get install chromium; .ci/run does)")


@pytest.fixture(scope="module")
def chromium():
    """Chromium, launched once for the module's tests (each opens a page of its own, closed after)."""
    pytest.importorskip("playwright", reason="playwright is in the test extra: pip install -e '.[test]'")
    from playwright.sync_api import sync_playwright
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=BROWSER_FLAGS,
                                             timeout=HANG_SECONDS * 1000)
        try:
            yield browser
        finally:
            browser.close()


@contextlib.contextmanager
def opened(chromium, errors, requests=None):
    """A new page of `chromium`, its console errors and page errors appended to `errors` (and the URLs it
    requests to `requests`), closed after."""
    page = chromium.new_page(viewport={"width": 1100, "height": 900})
    try:
        page.set_default_timeout(HANG_SECONDS * 1000)  # Playwright's 30 s: hang guards, not bounds on speed
        page.on("console", lambda message: message.type == "error" and errors.append(message.text))
        page.on("pageerror", lambda error: errors.append(str(error)))
        if requests is not None:
            page.on("request", lambda request: requests.append(request.url))
        yield page
    finally:
        page.close()


def _browse(chromium, url, screenshot):
    """Opens `url` in chromium; returns (console errors, requested URLs, [naturalWidth of each img], page text)."""
    errors, requests = [], []
    with opened(chromium, errors, requests) as page:
        page.goto(url)
        page.wait_for_load_state("load")
        # Lazy images load as they come into view: scroll through the page, then wait for each.
        height = page.evaluate("document.body.scrollHeight")
        for offset in range(0, height + 900, 600):
            page.evaluate("window.scrollTo(0, %d)" % offset)
            page.wait_for_timeout(30)
        wait_for_images(page)
        widths = page.evaluate("Array.from(document.images).map(img => img.naturalWidth)")
        first_page = page.inner_text("#groups")
        page.click("#next")
        second_page = page.inner_text("#groups")
        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=str(screenshot))
    return errors, requests, widths, first_page, second_page


@needs_a_browser
@pytest.mark.parametrize("served", [False, True], ids=["file", "loopback"])
def test_the_page_in_chromium(chromium, report, tmp_path, served):
    page, groups = report
    server = None
    if served:
        server = make_server(page.parent, port=0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = "http://127.0.0.1:%d/index.html" % server.server_address[1]
    else:
        url = page.as_uri()
    try:
        errors, requests, widths, first_page, second_page = _browse(chromium, url, tmp_path / "shot.png")
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
    assert errors == []
    assert all(request.startswith(("file://", "http://127.0.0.1:", "data:")) for request in requests), requests
    # Queries (1 + 5, then 2) and the first page of groups (7 + 49 groups of 2), every one loaded.
    assert len(widths) == 6 + 2 + 7 + 2 * (GROUPS_PER_PAGE - 1) and all(width > 0 for width in widths)
    assert "group 1: 7 images" in first_page and "group %d:" % (GROUPS_PER_PAGE + 1) not in first_page
    # Each group's first row is the one its rule keeps; the others are marked as those that would go.
    assert first_page.count("\nkept") == GROUPS_PER_PAGE and first_page.count("would go") == 6 + GROUPS_PER_PAGE - 1
    assert "group %d: 2 images" % (GROUPS_PER_PAGE + 1) in second_page and len(groups) == GROUPS_PER_PAGE + 8
    with Image.open(tmp_path / "shot.png") as shot:
        pixels = np.asarray(shot.convert("L"), dtype=np.float32)
    assert pixels.std() > 10  # not blank


@needs_a_browser
def test_a_text_query_in_chromium_is_its_sentence_then_its_images(chromium, tmp_path):
    images = tmp_path / "images"
    names = photos(images, 4)
    sentence = 'a <b>red</b> "square" & <img src=x onerror=alert(1)>'
    page = write_page(tmp_path / "page", images_root=images, queries=[
        {"label": sentence, "image": None, "text": True, "neighbours": [(name, 0.3 - 0.01 * rank)
                                                                         for rank, name in enumerate(names[:3])]},
        {"label": names[3], "image": str(images / names[3]), "neighbours": [(names[3], 1.0)]}])
    errors = []
    with opened(chromium, errors) as view:
        view.goto(page.as_uri())
        wait_for_images(view)
        titles = view.eval_on_selector_all("#queries h3", "nodes => nodes.map(n => [n.className, n.innerText])")
        rows = view.eval_on_selector_all("#queries .row", "rows => rows.map(row => Array.from(row.children)"
                                                          ".map(child => [child.className, child.innerText, "
                                                          "child.querySelector('img') ? child.querySelector('img')"
                                                          ".naturalWidth : 0]))")
        injected = view.evaluate("document.querySelectorAll('#queries b, #queries img:not([src^=\"thumbs/\"])')"
                                 ".length")
        view.screenshot(path=str(tmp_path / "shot.png"))
    assert errors == [] and injected == 0
    # The sentence is the first query's title and its first tile, as text; then its three images, loaded.
    assert titles == [["sentence", sentence], ["", names[3]]]  # its title says "text: " before it (CSS)
    assert rows[0][0] == ["query sentence", "\u201c%s\u201d" % sentence, 0]
    assert [tile[0] for tile in rows[0][1:]] == ["", "", ""] and all(tile[2] > 0 for tile in rows[0][1:])
    assert [tile[1] for tile in rows[0][1:]] == ["%.3f %s" % (0.3 - 0.01 * rank, name)
                                                 for rank, name in enumerate(names[:3])]
    assert rows[1][0][0] == "query" and rows[1][0][2] > 0  # an image query keeps its thumbnail
    with Image.open(tmp_path / "shot.png") as shot:
        assert np.asarray(shot.convert("L"), dtype=np.float32).std() > 10


@needs_a_browser
def test_the_values_kept_beside_each_row_show_under_its_path_as_text_in_chromium(chromium, kept_job, tmp_path):
    from services import HTML_CAPTION, run
    index, expected = kept_job
    query = sorted(expected)[3]
    assert run("--quiet", "page", index, "--query", query, "-k", "4", "--threshold", "-1", "--out",
               tmp_path / "page") == 0
    errors = []
    with opened(chromium, errors) as view:
        view.goto((tmp_path / "page" / "index.html").as_uri())
        shown = view.eval_on_selector_all("figure", "figures => figures.map(f => [f.querySelector('img').alt, "
                                                    "Array.from(f.querySelectorAll('.kept')).map(line => "
                                                    "[line.dataset.name, line.lastChild.textContent])])")
        injected = view.evaluate("document.querySelectorAll('b, img:not([src^=\"thumbs/\"])').length")
        title = view.title()
        captions = view.eval_on_selector_all("figcaption", "captions => captions.map(c => c.textContent)")
        scores = view.evaluate("document.querySelectorAll('.caption-score, .probability').length")
    assert errors == [] and injected == 0 and title == "Search: f.csv"
    # An output without caption scores (no --text-column) and no sentence: a tile's score and path, nothing more.
    assert scores == 0 and len(captions) == len(shown)
    assert all(text.split("  ")[-1] == path and len(text.split("  ")) == (2 if 1 <= place <= 4 else 1)
               for place, (text, (path, _)) in enumerate(zip(captions, shown))), captions
    # The query, its 4 neighbours, then the one group of every row: each with its own values, none for none.
    assert [path for path, _ in shown[:2]] == [query, query]  # the query's tile, then itself, first found
    assert sorted(path for path, _ in shown[5:]) == sorted(expected) and len(shown) == 5 + len(expected)
    assert all(lines == [[name, value] for name, value in expected[path].items() if value is not None]
               for path, lines in shown), shown
    assert [query, [["txt", HTML_CAPTION], ["json", expected[query]["json"]]]] in shown


def test_a_page_is_not_written_over_an_index_html_it_did_not_write(tmp_path):
    folder = tmp_path / "site"
    folder.mkdir()
    (folder / "index.html").write_text("<html>someone's own page</html>")
    with pytest.raises(ValueError, match=r"site/index.html exists and is not a page search-features wrote: pass "
                                         r"--overwrite"):
        write_page(folder, groups=[])
    assert (folder / "index.html").read_text() == "<html>someone's own page</html>"
    assert not (folder / THUMBS).exists()
    write_page(folder, groups=[], overwrite=True)
    write_page(folder, groups=[], title="again")  # its own page: replaced without asking
    assert "again" in (folder / "index.html").read_text()


def _get(port, path, host=None):
    """(status, body) of GET `path` from 127.0.0.1:`port`, with `host` as the Host header if given."""
    import http.client
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=HANG_SECONDS)
    try:
        connection.putrequest("GET", path, skip_host=host is not None)
        if host is not None:
            connection.putheader("Host", host)
        connection.endheaders()
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_the_server_serves_the_page_and_its_thumbnails_only(report, tmp_path):
    page, _ = report
    secret = tmp_path / "secret.txt"
    secret.write_text("not for the web")
    thumbs = page.parent / THUMBS
    (thumbs / "leak.jpg").symlink_to(secret)
    (thumbs / "inside.jpg").symlink_to(sorted(thumbs.glob("*.jpg"))[0])  # a link within the page: served
    (page.parent / "up").symlink_to(tmp_path, target_is_directory=True)
    server = make_server(page.parent, port=0)
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        assert _get(port, "/")[0] == 200 and _get(port, "/index.html", "localhost:%d" % port)[0] == 200
        assert _get(port, "/thumbs/inside.jpg")[0] == 200
        for path in ("/thumbs/leak.jpg", "/thumbs/", "/thumbs", "/up/secret.txt", "/up/", "/../secret.txt",
                     "/thumbs/nothing.jpg"):
            status, body = _get(port, path)
            assert status == 404 and b"not for the web" not in body and b"leak.jpg" not in body, (path, status)
        # DNS rebinding: a page of another site whose name now points at 127.0.0.1 sends its own name.
        for host in ("attacker.example:%d" % port, "attacker.example", "127.0.0.1:%d" % (port + 1), ""):
            assert _get(port, "/index.html", host)[0] == 421, host
    finally:
        server.shutdown()
        server.server_close()


def test_a_link_swapped_in_after_the_check_is_never_followed(report, tmp_path, monkeypatch):
    import os
    page, _ = report
    secret = tmp_path / "secret.txt"
    secret.write_text("not for the web")
    thumb = os.path.realpath(sorted((page.parent / THUMBS).glob("*.jpg"))[0])
    server = make_server(page.parent, port=0)
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        # A thumbnail swapped for a link at the worst moment: once its real path was found inside the page's folder,
        # on its second stat (the first is the check for a folder).
        real_stat, stats = os.stat, []

        def stat_then_swap(path, *args, **kwargs):
            status = real_stat(path, *args, **kwargs)
            stats.append(os.fspath(path))
            if stats.count(thumb) == 2:
                os.unlink(thumb)
                os.symlink(secret, thumb)
            return status

        monkeypatch.setattr(os, "stat", stat_then_swap)
        status, body = _get(port, "/thumbs/" + os.path.basename(thumb))
        monkeypatch.undo()
        assert os.path.islink(thumb)  # the swap was made
        assert status == 404 and b"not for the web" not in body
    finally:
        server.shutdown()
        server.server_close()


def test_the_server_s_refusals_carry_the_service_s_headers_and_one_line_of_json(report):
    """Its own refusals and the HTTP library's (a method other than GET and HEAD, a request line that cannot be
    read, HTTP/2), each sent by a raw socket client."""
    import http.client
    import json
    import socket
    from search.api import SECURITY_HEADERS  # the service's, which the page's server gives its refusals too
    page, _ = report
    server = make_server(page.parent, port=0)
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host = b"Host: 127.0.0.1:%d\r\n" % port
    try:
        for request, status in ((b"PUT / HTTP/1.1\r\n" + host + b"\r\n", 501), (b"GARBAGE\r\n", 400),
                                (b"GET /nothing.jpg HTTP/1.1\r\n" + host + b"\r\n", 404), (b"GET / HTTP/2.0\r\n", 505),
                                (b"GET / HTTP/1.1\r\nHost: attacker.example\r\n\r\n", 421),
                                (b"GET /\r\n\r\n", 421)):  # no version (HTTP/0.9's): answered as 1.0's, headers too
            with socket.create_connection(("127.0.0.1", port), timeout=HANG_SECONDS) as connection:
                connection.sendall(request)
                response = http.client.HTTPResponse(connection)
                response.begin()
                body = response.read()
            error = json.loads(body)
            assert response.status == status and error == {"status": status, "error": error["error"]}, request
            assert all(response.headers[name] == value for name, value in SECURITY_HEADERS.items()), request
    finally:
        server.shutdown()
        server.server_close()


# [[path, caption score's text, probability's text]] of each row's image tiles (a sentence's own tile has no image).
TILE_SCORES = ("rows => rows.map(row => Array.from(row.querySelectorAll('figure img')).map(img => {"
               "const text = name => img.parentElement.querySelector(name) && "
               "img.parentElement.querySelector(name).textContent;"
               "return [img.alt, text('.caption-score'), text('.probability')]; }))")


@needs_a_browser
def test_each_tile_shows_its_row_s_caption_score_and_a_siglip_sentence_s_its_probability_in_chromium(
        chromium, siglip_job, tmp_path, capsys):
    """A small SigLIP's output with caption scores (services.captioned_copy: rows 3 and 7 without one): every tile
    of the queries and of the duplicate group shows its row's caption score as the live page does; the tiles of a
    sentence (--text) show SigLIP's probability, as `neighbours --text` prints it; those of a key and of a sentence
    against the captions, none."""
    index, expected = captioned_copy(siglip_job, tmp_path)
    weights, sentence = siglip_job[1], "ein Hund am Strand"
    capsys.readouterr()
    assert run("neighbours", index.folder, "--text", sentence, "-k", "5", "--weights", weights) == 0
    printed = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert run("--quiet", "page", index.folder, "--query", "colour03.png", "--text", sentence, "--caption", sentence,
               "-k", "5", "--threshold", "-1", "--weights", weights, "--out", tmp_path / "page") == 0
    errors = []
    with opened(chromium, errors) as view:
        view.goto((tmp_path / "page" / "index.html").as_uri())
        by_key, by_text, by_caption = view.eval_on_selector_all("#queries .row", TILE_SCORES)
        group, = view.eval_on_selector_all("#groups .row", TILE_SCORES)
    assert errors == []

    def caption(path):  # the live page's words for a row's caption score
        return "caption " + ("\u2013" if expected[path] is None else "%.3f" % expected[path])
    assert by_key[0][0] == by_key[1][0] == "colour03.png" and len(by_key) == 6  # its tile, then itself, first found
    assert sorted(path for path, _, _ in group) == sorted(expected) and len(by_caption) == 5
    for path, score, probability in by_key + by_caption + group:
        assert score == caption(path) and probability is None, (path, score, probability)
    assert {score for _, score, _ in group} >= {"caption \u2013", caption("colour05.png")}  # with and without
    assert by_text == [[row["path"], caption(row["path"]), probability_text(float(row["probability"]))]
                       for row in printed]
    # The small model's probabilities are all near 0 (each shown in two significant digits, where three decimals
    # said "p 0.000"): the page's data holds each whole, as printed.
    assert all("e-" in probability for _, _, probability in by_text)
    data = (tmp_path / "page" / "index.html").read_text().split('id="data">')[1].split("</script>")[0]
    np.testing.assert_allclose([row["probability"] for row in json.loads(data)["queries"][1]["neighbours"]],
                               [float(row["probability"]) for row in printed], rtol=1e-5)


@needs_a_browser
def test_a_probability_shows_three_decimals_or_under_0_001_two_significant_digits(chromium, report):
    errors = []
    with opened(chromium, errors) as view:
        view.goto(report[0].as_uri())
        values = [0.731, 0.0015, 0.001, 0.0004, 1.234e-5, 0.0]
        shown = view.evaluate("values => values.map(probabilityText)", values)
    assert errors == [] and shown == ["p 0.731", "p 0.002", "p 0.001", "p 4.0e-4", "p 1.2e-5", "p 0.000"]
    assert shown == [probability_text(value) for value in values]

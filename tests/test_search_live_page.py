"""The search service's page (search/live_page/, served at / by search/api.py): its files under the CSP and the
Host check, nothing else served; in Debian's chromium (Playwright, one browser for the module), against the
service `serve INDEX --weights` builds, of a small CLIP output, in a thread of this process: a sentence, an
uploaded and a dropped image (shown above its results), a click on a result, k changed, the duplicates'
threshold; a sentence against the captions, the caption score bound and each row's caption score; tiles that lead with the kept caption and a short key, links only for URLs, a group's members on
demand; a service that takes no sentence or image says why; SigLIP's probability beside the score."""

import http.client
import json
import math
import os
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from hangs import HANG_SECONDS
from parallel.messages import counted
from search.api import PAGE_FILES, PAGE_SECURITY_HEADERS, SECURITY_HEADERS
from search.index import Index
from search.service import NO_EMBEDDER, Service
from search_data import clustered
from services import (HTML_CAPTION, Running, captioned_copy, clip_job, kept_job,  # noqa: F401 -- the jobs: fixtures
                      png, probability_text, siglip_job)
from test_search_page import BROWSER_FLAGS, CHROMIUM, wait_for_images
from test_search_service import no_text_tower

TESTS = Path(__file__).resolve().parent
PAGE = TESTS.parent / "search" / "live_page"
PAGE_CSP = PAGE_SECURITY_HEADERS["Content-Security-Policy"]
HTML_KEY = 'a <b>bold</b> "key" & <img src=x onerror=alert(1)>.png'
# Elements the API's text would make if it went in as HTML (images other than the tiles' and the query's).
NO_MARKUP = "document.querySelectorAll('b, img:not(#query-image):not([src^=\"/api/image?row=\"])').length"


@pytest.fixture(scope="module")
def html_index(tmp_path_factory):
    """An index of 40 rows of vectors (no model), row 1 a near-copy of row 0, whose key holds HTML."""
    from parallel.output import open_writer
    from search_data import SETTINGS
    folder = tmp_path_factory.mktemp("html-keys")
    vectors = clustered(40)
    vectors[1] = vectors[0] * 1.001
    writer = open_writer(folder / "f.npy", format="npy", feature_size=vectors.shape[1], settings=SETTINGS)
    writer.write(["img/00000.jpg", HTML_KEY] + ["img/%05d.jpg" % row for row in range(2, 40)], vectors)
    writer.close()
    return Index.build(folder / "f.npy", folder / "f.index")


def _get(port, path, host=None):
    """(status, headers, body) of GET `path` sent as it is (not normalised), with `host` as Host if given."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=HANG_SECONDS)
    try:
        connection.putrequest("GET", path, skip_host=True)
        connection.putheader("Host", host or "127.0.0.1:%d" % port)
        connection.endheaders()
        response = connection.getresponse()
        return response.status, response.headers, response.read()
    finally:
        connection.close()


def test_the_page_s_files_only_under_the_csp_and_the_host_check(html_index):
    with Running(Service(html_index)) as service:
        port = service.port
        for path, (name, content_type) in PAGE_FILES.items():
            status, headers, body = _get(port, path)
            assert status == 200 and headers["Content-Type"] == content_type and body == (PAGE / name).read_bytes()
            assert headers["Content-Security-Policy"] == PAGE_CSP and headers["X-Content-Type-Options"] == "nosniff"
            assert _get(port, path, "localhost:%d" % port)[0] == 200
            for host in ("attacker.example:%d" % port, "attacker.example", "127.0.0.1:%d" % (port + 1)):
                status, headers, body = _get(port, path, host)
                assert status == 421 and b"answers only to" in body, (path, host)
        # Strict: this origin only, no inline script or style, no eval, nothing from another site; images may also
        # be the page's own object URLs (blob:, the uploaded query shown above its results), nothing else.
        assert "'unsafe" not in PAGE_CSP and "default-src 'none'" in PAGE_CSP and "http" not in PAGE_CSP
        assert "img-src 'self' blob:;" in PAGE_CSP and PAGE_CSP.count("blob:") == 1 and "data:" not in PAGE_CSP
        page = (PAGE / "index.html").read_text()
        assert page.count("<script") == 2 and '<script src="/scores.js" defer></script>' in page
        assert page.index('<script src="/scores.js"') < page.index('<script src="/live.js" defer></script>')
        assert "style=" not in page and "<style" not in page and "http" not in page
        script = (PAGE / "live.js").read_text() + (PAGE / "scores.js").read_text()
        for writer in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "Function("):
            assert writer not in script, writer  # text from the API goes in by textContent only
        # Nothing but the table's files: no path of a request reaches the package's folder or the disk.
        for path in ("/index.html", "/live_page/live.js", "/search/api.py", "/api.py", "/../api.py", "/live.js/",
                     "/live.js/../api.py", "/%2e%2e/api.py", "/live_page/../api.py", "//etc/passwd",
                     "/../../../../etc/passwd", "/LIVE.JS", "/live.css%00.py", "/favicon.ico", "/api/",
                     "/favicon.svg/..", "/live.js%2f..%2fapi.py"):
            status, headers, body = _get(port, path)
            assert status == 404 and json.loads(body)["status"] == 404, (path, status, body[:100])
            assert headers["Content-Security-Policy"] == SECURITY_HEADERS["Content-Security-Policy"]
        status, _, body = _get(port, "/?file=../api.py")
        assert status == 400 and json.loads(body)["error"] == "/ takes no parameter; not 'file'"
        status, answer, headers = service.request("/api/index")  # the API keeps its own policy: it loads nothing
        assert status == 200 and headers["Content-Security-Policy"] == SECURITY_HEADERS["Content-Security-Policy"]


needs_a_browser = pytest.mark.skipif(not CHROMIUM.exists(), reason="no browser: /usr/bin/chromium is not "
                                                                   "installed (apt-get install chromium; .ci/run does)")


@pytest.fixture(scope="module")
def chromium():
    """Chromium, launched once for the module's tests (each opens a page of its own: `Browser`)."""
    pytest.importorskip("playwright", reason="playwright is in the test extra: pip install -e '.[test]'")
    from playwright.sync_api import sync_playwright
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=BROWSER_FLAGS,
                                             timeout=HANG_SECONDS * 1000)
        try:
            yield browser
        finally:
            browser.close()


class Browser:
    """A page of `url` in `chromium` (the fixture), its console errors, page errors and requests recorded."""

    def __init__(self, chromium, url):
        from playwright.sync_api import expect
        self.errors, self.requests = [], []
        self.page = chromium.new_page(viewport={"width": 1100, "height": 900})
        self.page.set_default_timeout(HANG_SECONDS * 1000)  # hang guards, not bounds on speed (tests/hangs.py)
        self.page.on("console", lambda message: message.type == "error" and self.errors.append(message.text))
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        self.page.on("request", lambda request: self.requests.append(request.url))
        expect.set_options(timeout=HANG_SECONDS * 1000)  # expect's own 5 s too: a hang guard only
        self.page.goto(url)
        self.page.wait_for_selector("body[data-ready=true]", state="attached")

    def results_titled(self, title):
        """[(score text, key, row, href of its "open" link, its image's width)] of the results (the key: the whole
        one, its tile's title), once their title is `title`."""
        from playwright.sync_api import expect
        expect(self.page.locator("#results-title")).to_have_text(title)
        wait_for_images(self.page)
        return self.page.eval_on_selector_all("#results figure", "figures => figures.map(f => ["
                                              "f.querySelector('.score').textContent, f.querySelector('.key')"
                                              ".title, Number(f.dataset.row), f.querySelector('a.open')"
                                              ".getAttribute('href'), f.querySelector('img').naturalWidth])")

    def threshold(self, value):
        """Types `value` in the threshold's number field and lets it go (Enter): the groups are asked again."""
        self.page.fill("#threshold", value)
        self.page.press("#threshold", "Enter")

    def close(self):
        self.page.close()


def _expected(answer):
    return [["%.3f" % found["score"], found["key"], found["row"], "/api/image?row=%d" % found["row"]]
            for found in answer["neighbours"]]


def _shown(results):
    assert all(width > 0 for *_, width in results), results  # every thumbnail loaded
    return [result[:4] for result in results]


def _groups_line(answer):
    return "%s (%s) at %.3f" % (counted(answer["groups"], "group"), counted(answer["pairs"], "pair"),
                                answer["threshold"])


GROUP_KEYS = "rows => rows.map(row => Array.from(row.querySelectorAll('.key')).map(key => key.title))"


@needs_a_browser
def test_the_page_searches_a_sentence_an_image_a_result_and_regroups(chromium, clip_job, tmp_path):
    from playwright.sync_api import expect
    from models.query_embedder import QueryEmbedder
    from parallel.queries import ImageEmbedder
    folder, weights, index_folder, images = clip_job
    upload = tmp_path / "new.png"
    upload.write_bytes(png((120, 90), 99))  # not an indexed image: computed by the model
    index = Index.load(index_folder)
    # The Service `serve INDEX --weights W` builds (tests/test_search_service.py), here in a thread of this process.
    embedder = QueryEmbedder(index.settings, index.meta["source"]["output"], weights=str(weights),
                             image_embedder=ImageEmbedder)
    with embedder, Running(Service(index, embedder)) as service:
        url = "http://127.0.0.1:%d/" % service.port

        def api(path, body=None):
            with urllib.request.urlopen(url.rstrip("/") + path, body, timeout=HANG_SECONDS) as response:
                return json.loads(response.read())

        browser = Browser(chromium, url)
        page = browser.page
        try:
            expect(page.locator("#text-form")).to_be_visible()  # /api/index: this output takes sentences
            expect(page.locator("#image-label")).to_be_visible()
            expect(page.locator("#unavailable")).to_be_hidden()  # nothing to explain
            expect(page.locator("#captions-label")).to_be_hidden()  # a job without captions: no caption controls
            expect(page.locator("#min-caption-label")).to_be_hidden()
            page.fill("#k", "5")
            sentence = "a red square on a beach"
            page.fill("#text", sentence)
            page.press("#text", "Enter")
            shown = _shown(browser.results_titled("\u201c%s\u201d: 5 results" % sentence))
            assert shown == _expected(api("/api/search?" + urllib.parse.urlencode({"text": sentence, "k": 5})))
            expect(page.locator("#query")).to_be_hidden()  # a sentence: no image above the results

            page.set_input_files("#image", str(upload))  # the file input
            shown = _shown(browser.results_titled("the image new.png: 5 results"))
            assert shown == _expected(api("/api/search/image?k=5", upload.read_bytes()))
            # The query above its results: the uploaded file itself (an object URL, which the CSP lets in).
            expect(page.locator("#query-caption")).to_have_text("new.png")
            assert page.eval_on_selector("#query-image", "image => [image.src.slice(0, 5), image.naturalWidth, "
                                                         "image.naturalHeight]") == ["blob:", 120, 90]
            page.fill("#k", "3")  # k changed: the query shown is asked again
            page.press("#k", "Enter")
            shown = _shown(browser.results_titled("the image new.png: 3 results"))
            assert shown == _expected(api("/api/search/image?k=3", upload.read_bytes()))
            page.fill("#k", "5")
            page.press("#k", "Enter")
            browser.results_titled("the image new.png: 5 results")

            dropped = (images / "colour07.png").read_bytes()  # dropped onto the page
            transfer = page.evaluate_handle("bytes => { const transfer = new DataTransfer(); transfer.items.add("
                                            "new File([new Uint8Array(bytes)], 'colour07.png', {type: "
                                            "'image/png'})); return transfer; }", list(dropped))
            page.dispatch_event("body", "drop", {"dataTransfer": transfer})
            shown = _shown(browser.results_titled("the image colour07.png: 5 results"))
            assert shown == _expected(api("/api/search/image?k=5", dropped))
            assert shown[0][1] == "colour07.png" and shown[0][0] == "1.000"  # its own row, by the model
            assert page.eval_on_selector("#query-image", "image => image.naturalWidth") == 96

            clicked = shown[2]  # the third result: searched by its row, it comes first with score 1
            page.click("#results figure:nth-child(3) button")
            shown = _shown(browser.results_titled("neighbours of %s: 5 results" % clicked[1]))
            assert shown == _expected(api("/api/neighbours?row=%d&k=5" % clicked[2]))
            assert shown[0][1:3] == clicked[1:3] and shown[0][0] == "1.000"
            assert page.get_attribute("#query-image", "src") == clicked[3]  # its image above the results
            # Its "open" link is the full image, served by row, and the browser shows it.
            with urllib.request.urlopen(url.rstrip("/") + clicked[3], timeout=HANG_SECONDS) as response:
                assert response.read() == (images / clicked[1]).read_bytes()
            with page.expect_popup() as popup:
                page.click("#results figure:first-child a.open")
            opened = popup.value
            opened.wait_for_load_state("load")
            assert opened.url == url.rstrip("/") + clicked[3]
            assert opened.evaluate("document.images[0].naturalWidth") == 96
            opened.close()

            # The threshold regroups: thresholds whose group counts differ, found from the API.
            counts = {"%.3f" % (step * 0.005): api("/api/duplicates?threshold=%.3f" % (step * 0.005))
                      for step in range(0, 201, 5)}
            expect(page.locator("#groups-count")).to_have_text(_groups_line(counts["0.900"]))
            chosen = [threshold for threshold, answer in sorted(counts.items())
                      if answer["groups"] != counts["0.900"]["groups"]]
            assert chosen, "every threshold gives %d groups: the test could not fail" % counts["0.900"]["groups"]
            other = [threshold for threshold, answer in sorted(counts.items())
                     if answer["groups"] != counts[chosen[0]]["groups"]]
            for threshold in (chosen[0], other[0]):
                browser.threshold(threshold)
                expect(page.locator("#groups-count")).to_have_text(_groups_line(counts[threshold]))
                assert page.eval_on_selector("#threshold-slider", "slider => Number(slider.value)") == round(
                    1000 * (1 - math.sqrt(1 - float(threshold))))  # the slider follows the number
                groups = page.eval_on_selector_all("#groups .row", GROUP_KEYS)
                assert groups == [[member["key"] for member in group] for group in counts[threshold]["shown"]]

            assert browser.errors == []
            # An error of the API is one line on the page (and the browser's own line on its console): k, once
            # let go, asks the query shown again, and so does the sentence.
            page.fill("#k", "0")
            page.press("#text", "Enter")
            expect(page.locator("#error")).to_have_text("error 400: k must be a whole number from 1 to 1000; "
                                                        "got '0'")
            expect(page.locator("#results-title")).to_have_text("Results")
            assert page.locator("#results figure").count() == 0
            assert set(browser.errors) == {"Failed to load resource: the server responded with a status of 400 "
                                           "(Bad Request)"}
            assert all(request.startswith(url) or request.startswith("blob:" + url.rstrip("/"))
                       for request in browser.requests), browser.requests
        finally:
            browser.close()


@needs_a_browser
def test_a_key_with_html_shows_as_text_and_an_index_without_a_model_says_why_it_offers_no_sentence(chromium,
                                                                                                  html_index):
    from playwright.sync_api import expect
    with Running(Service(html_index)) as service:
        browser = Browser(chromium, "http://127.0.0.1:%d/" % service.port)
        page = browser.page
        try:
            expect(page.locator("#text-form")).to_be_hidden()  # no model: no sentence, no image, and why
            expect(page.locator("#image-label")).to_be_hidden()
            expect(page.locator("#unavailable")).to_have_text(
                "No search by sentence: %s. No search by image: %s." % (no_text_tower("vgg16"), NO_EMBEDDER))
            answer = service.request("/api/duplicates?threshold=0.9")[1]
            expect(page.locator("#groups-count")).to_have_text(_groups_line(answer))
            keys = page.eval_on_selector_all("#groups .key", "keys => keys.map(key => key.textContent)")
            assert keys == [member["key"] for group in answer["shown"] for member in group] and HTML_KEY in keys
            assert page.evaluate(NO_MARKUP) == 0
            page.locator("#groups figure").nth(keys.index(HTML_KEY)).locator("button").click()
            shown = browser.results_titled("neighbours of %s: 10 results" % HTML_KEY)
            assert [result[1] for result in shown[:2]] == [HTML_KEY, "img/00000.jpg"]
            # An image dropped on an index that takes none: one line, and nothing sent.
            transfer = page.evaluate_handle("() => { const transfer = new DataTransfer(); transfer.items.add(new "
                                            "File(['x'], 'x.png', {type: 'image/png'})); return transfer; }")
            page.dispatch_event("body", "drop", {"dataTransfer": transfer})
            expect(page.locator("#error")).to_have_text("No search by image: " + NO_EMBEDDER)
            assert not any("/api/search/image" in request for request in browser.requests)
            # Its rows have no image files: each thumbnail is a 404 of /api/image, and nothing else failed.
            assert set(browser.errors) == {"Failed to load resource: the server responded with a status of 404 "
                                           "(Not Found)"}
        finally:
            browser.close()


@needs_a_browser
def test_a_clip_index_served_without_its_weights_offers_no_sentence_or_image_and_says_why_whole(chromium, clip_job):
    from playwright.sync_api import expect
    from models.query_embedder import QueryEmbedder
    folder, weights, index_folder, images = clip_job
    index = Index.load(index_folder)
    why = QueryEmbedder(index.settings, index.meta["source"]["output"]).unusable()  # what `serve` gives Service
    assert why.startswith("the output was computed with the weights file ") and why.endswith(
        "pass --weights %s (found there: that size and content)" % (folder / "clip" / "model.safetensors"))
    with Running(Service(index, None, no_embedder=why)) as service:
        browser = Browser(chromium, "http://127.0.0.1:%d/" % service.port)
        page = browser.page
        try:
            expect(page.locator("#text-form")).to_be_hidden()
            expect(page.locator("#image-label")).to_be_hidden()
            expect(page.locator("#unavailable")).to_have_text("No search by sentence or image: %s." % why)
            transfer = page.evaluate_handle("() => { const transfer = new DataTransfer(); transfer.items.add(new "
                                            "File(['x'], 'x.png', {type: 'image/png'})); return transfer; }")
            page.dispatch_event("body", "drop", {"dataTransfer": transfer})
            expect(page.locator("#error")).to_have_text("No search by image: " + why)
            # Whole: wrapped on lines of the page's width, its end (the fix) in view, nothing cut or hidden.
            shape = page.eval_on_selector("#error", "line => [line.scrollWidth, line.clientWidth, line.clientHeight, "
                                                    "parseFloat(getComputedStyle(line).lineHeight) || 17, "
                                                    "getComputedStyle(line).textOverflow]")
            scroll_width, width, height, line_height, overflow = shape
            assert scroll_width <= width and height >= 2 * line_height and overflow != "ellipsis", shape
            assert not any("/api/search" in request for request in browser.requests)
        finally:
            browser.close()


PROBABILITIES = ("figures => figures.map(f => [f.querySelector('.key').title, f.querySelector('.probability') "
                 "&& f.querySelector('.probability').textContent])")


@needs_a_browser
def test_a_siglip_sentence_s_results_show_siglip_s_probability_beside_the_score(chromium, siglip_job):
    from models.query_embedder import QueryEmbedder
    folder, weights, index_folder, images = siglip_job
    index = Index.load(index_folder)
    embedder = QueryEmbedder(index.settings, index.meta["source"]["output"], weights=str(weights))
    with Running(Service(index, embedder)) as service:
        browser = Browser(chromium, "http://127.0.0.1:%d/" % service.port)
        page = browser.page
        try:
            sentence = "ein Hund am Strand"
            answer = service.request("/api/search?" + urllib.parse.urlencode({"text": sentence, "k": 5}))[1]
            page.fill("#k", "5")
            page.fill("#text", sentence)
            page.press("#text", "Enter")
            browser.results_titled("\u201c%s\u201d: 5 results" % sentence)
            shown = page.eval_on_selector_all("#results figure", PROBABILITIES)
            assert shown == [[found["key"], probability_text(found["probability"])] for found in answer["neighbours"]]
            short = page.locator("#results figure .key").nth(0).text_content()
            page.locator("#results figure").nth(0).locator("button").click()  # an image's neighbours: no probability
            browser.results_titled("neighbours of %s: 5 results" % short)
            assert all(probability is None for _, probability in page.eval_on_selector_all("#results figure",
                                                                                             PROBABILITIES))
            assert browser.errors == []
        finally:
            browser.close()
            embedder.close()


KEPT_LINES = ("figures => figures.map(f => [f.querySelector('.key').title, Array.from(f.querySelectorAll("
              "'.kept')).map(line => [line.dataset.name, line.lastChild.textContent])])")


@needs_a_browser
def test_the_values_kept_beside_each_row_show_above_its_key_as_text(chromium, kept_job):
    from playwright.sync_api import expect
    folder, expected = kept_job

    def lines(key):
        return [[name, value] for name, value in expected[key].items() if value is not None]

    with Running(Service(Index.load(folder))) as service:
        browser = Browser(chromium, "http://127.0.0.1:%d/" % service.port)
        page = browser.page
        try:
            answer = service.request("/api/duplicates?threshold=0.000")[1]
            assert answer["groups"] >= 1, answer  # colours' features: some rows alike at a cosine of 0
            browser.threshold("0")
            expect(page.locator("#groups-count")).to_have_text(_groups_line(answer))
            groups = page.eval_on_selector_all("#groups figure", KEPT_LINES)
            assert [key for key, _ in groups] == [member["key"] for group in answer["shown"] for member in group]
            assert all(shown == lines(key) for key, shown in groups), groups
            query = sorted(expected)[3]  # its caption holds HTML
            page.locator("#groups figure").nth([key for key, _ in groups].index(query)).locator("button").click()
            # Titled by its caption (the first value kept), its whole key the title's hover.
            browser.results_titled("neighbours of \u201c%s\u201d: %d results" % (HTML_CAPTION, len(expected)))
            assert page.get_attribute("#results-title", "title") == query
            results = page.eval_on_selector_all("#results figure", KEPT_LINES)
            assert sorted(key for key, _ in results) == sorted(expected) and results[0][0] == query
            assert all(shown == lines(key) for key, shown in results), results
            assert results[0][1][0] == ["txt", HTML_CAPTION]
            assert page.evaluate(NO_MARKUP) == 0
            # Each tile: the values kept, then the key, shortened to what differs: the member, and its tar
            # when the rows shown come from more than one.
            order = page.eval_on_selector("#results figure", "f => Array.from(f.querySelector('figcaption')"
                                                             ".children).map(child => child.className)")
            assert order == ["score", "kept", "kept", "key-line"]
            shorts = page.eval_on_selector_all("#results .key", "keys => keys.map(key => key.textContent)")
            assert shorts[0] == "\u2026/%s in \u2026/%s" % (query.split("::")[0].rsplit("/", 1)[1],
                                                           Path(query.split("::")[1]).name)
            assert page.title() == "Search" and browser.errors == []
        finally:
            browser.close()


@pytest.fixture(scope="module")
def captioned_index(tmp_path_factory):
    """An index of 40 image files under photos/{cats,dogs}/, keyed by their absolute paths, rows 0-29 near-copies
    of row 0 (one group), with a caption and a url kept beside each row (a members index, as --keep writes):
    row 1's url is javascript:, row 2's a sentence holding a URL, row 3 has none. Yields (index, {key: kept})."""
    from parallel.inputs.manifest import Manifest, manifest_path
    from parallel.inputs.members import Entry
    from parallel.inputs.tars import MEMBERS_SUFFIX, write_index
    from parallel.output import open_writer
    from search_data import SETTINGS
    folder = tmp_path_factory.mktemp("captioned")
    vectors = clustered(40)
    vectors[1:30] = vectors[0] * (1 + 0.001 * np.arange(1, 30, dtype=np.float32))[:, None]
    keys, kept = [], {}
    for row in range(40):
        path = folder / "photos" / ("cats" if row < 30 else "dogs") / ("%03d.png" % row)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(png((40, 30), row))
        keys.append(str(path))
        url = {1: "javascript:alert(1)", 2: "see https://example.com/2.jpg", 3: None}.get(
            row, "https://example.com/photos/%d.jpg?size=large&by=<b>" % row)
        kept[str(path)] = {"caption": "a cat, photo %d" % row if row < 30 else "a dog, photo %d" % row, "url": url}
    writer = open_writer(folder / "f.npy", format="npy", feature_size=vectors.shape[1],
                         settings=dict(SETTINGS, images=str(folder)))
    writer.write(keys, vectors)
    writer.close()
    # The manifest a job of an --images-from list of these absolute paths writes: the service serves what it records.
    Manifest(sorted(keys), [os.stat(key).st_size for key in sorted(keys)],
             [os.stat(key).st_mtime_ns for key in sorted(keys)]).save(manifest_path(folder / "f.npy"))
    write_index(str(folder / "f.npy") + MEMBERS_SUFFIX, [Entry(key, 0, 0, (values["caption"], values["url"]))
                                                          for key, values in kept.items()], keep=("caption", "url"))
    return Index.build(folder / "f.npy", folder / "f.index"), kept


@needs_a_browser
def test_tiles_lead_with_the_caption_and_a_short_key_and_a_group_shows_all_its_members(chromium, captioned_index):
    from playwright.sync_api import expect
    index, kept = captioned_index
    with Running(Service(index)) as service:
        browser = Browser(chromium, "http://127.0.0.1:%d/" % service.port)
        page = browser.page
        try:
            answer = service.request("/api/duplicates?threshold=0.99")[1]
            assert answer["groups"] == 1 and len(answer["shown"][0]) == 30, answer  # the near-copies alone
            browser.threshold("0.99")
            expect(page.locator("#groups-count")).to_have_text("1 group (435 pairs) at 0.990")
            expect(page.locator("#groups h3")).to_have_text("group 1: 30 images")
            # Its first 24 tiles, and the rest on demand.
            assert page.locator("#groups figure").count() == 24
            expect(page.locator("#groups button.more")).to_have_text("show 6 more")
            page.click("#groups button.more")
            expect(page.locator("#groups figure")).to_have_count(30)
            expect(page.locator("#groups button.more")).to_be_hidden()
            tiles = page.eval_on_selector_all("#groups figure", "figures => figures.map(f => [Array.from("
                                              "f.querySelector('figcaption').children).map(c => c.dataset.name || "
                                              "c.className), f.querySelector('.key').textContent, f.querySelector("
                                              "'.key').title, f.querySelector('a.open').title])")
            members = [member["key"] for member in answer["shown"][0]]
            assert [tile[2] for tile in tiles] == members and [tile[3] for tile in tiles] == members
            # The caption first; the key shortened to what differs (the group's are all in cats/), whole on hover.
            assert all(tile[1] == "\u2026/%s" % Path(tile[2]).name for tile in tiles), tiles[:3]
            assert all(tile[0] == ["mark", "caption", "url", "key-line"] for tile in tiles if kept[tile[2]]["url"])
            # The row the rule keeps first, the others marked as those that would go.
            marks = page.eval_on_selector_all("#groups figure", "figures => figures.map(f => [f.className, "
                                              "f.querySelector('.mark').textContent])")
            assert marks == [["result keep", "kept"]] + [["result remove", "would go"]] * 29
            # A kept value that is one http(s) URL is a link, opened apart; nothing else is.
            links = page.eval_on_selector_all("#groups .kept a", "links => links.map(a => [a.getAttribute('href'), "
                                                                 "a.rel, a.target, a.textContent])")
            urls = sorted(values["url"] for key, values in kept.items() if key in members and values["url"]
                          and values["url"].startswith("https://"))
            assert sorted(link[3] for link in links) == urls and len(urls) == 27
            assert all(link[0] == link[3].replace("<", "%3C").replace(">", "%3E") and link[1:3] == [
                "noopener noreferrer", "_blank"] for link in links), links[:2]
            assert page.evaluate("document.querySelectorAll('a:not(.open):not([href^=\"https://\"]), b').length") == 0

            # A click: titled by the caption, not the key; k changed asks it again, "1 result".
            page.locator("#groups figure").nth(5).locator("button").click()
            shown = browser.results_titled("neighbours of \u201ca cat, photo %d\u201d: 10 results"
                                           % index.row(members[5]))
            assert page.get_attribute("#results-title", "title") == members[5] and shown[0][1] == members[5]
            page.fill("#k", "40")
            page.press("#k", "Enter")
            browser.results_titled("neighbours of \u201ca cat, photo %d\u201d: 40 results" % index.row(members[5]))
            shorts = page.eval_on_selector_all("#results .key", "keys => keys.map(key => [key.textContent, key.title])")
            assert sorted(short for short, _ in shorts) == sorted(  # what differs: cats/ or dogs/, and the name
                "\u2026/%s/%s" % (Path(key).parent.name, Path(key).name) for key in kept)
            assert all(short.endswith(key[-len(short) + 1:]) for short, key in shorts)
            page.fill("#k", "1")
            page.press("#k", "Enter")
            assert [result[1] for result in browser.results_titled(
                "neighbours of \u201ca cat, photo %d\u201d: 1 result" % index.row(members[5]))] == [members[5]]
            assert page.eval_on_selector("#query-image", "image => image.naturalWidth") == 40

            # The threshold: any value in its number field, and a slider that spends its pixels near 1.
            positions = page.evaluate("() => { const slider = document.getElementById('threshold-slider'); "
                                      "const shown = []; for (let at = 0; at <= Number(slider.max); at++) { "
                                      "slider.value = at; slider.dispatchEvent(new Event('input')); shown.push("
                                      "document.getElementById('threshold').value); } return [shown, "
                                      "slider.getBoundingClientRect().width]; }")
            shown, width = positions
            assert "0.950" in shown and "0.990" in shown and shown[0] == "0.000" and shown[-1] == "1.000"
            near = [value for value in shown if 0.945 <= float(value) < 0.955]
            assert width * len(near) / (len(shown) - 1) >= 5, (width, len(near))  # at least 5 px for 0.01 at 0.95
            browser.threshold("0.95")
            expect(page.locator("#groups-count")).to_have_text(_groups_line(service.request(
                "/api/duplicates?threshold=0.95")[1]))
            assert browser.errors == []
        finally:
            browser.close()


CAPTION_SCORES = ("figures => figures.map(f => [f.querySelector('.key').title, f.querySelector('.caption-score') "
                  "&& f.querySelector('.caption-score').textContent])")


@pytest.fixture
def captioned_clip_index(clip_job, tmp_path):
    """clip_job's output copied with caption scores (services.captioned_copy: rows 3 and 7 without one), and its
    index. Returns (index, weights, {key: caption score or None})."""
    index, scores = captioned_copy(clip_job, tmp_path)
    return index, clip_job[1], scores


@needs_a_browser
def test_a_sentence_against_the_captions_and_a_caption_score_bound_show_each_row_s_caption_score(
        chromium, captioned_clip_index):
    from playwright.sync_api import expect
    from models.query_embedder import QueryEmbedder
    index, weights, scores = captioned_clip_index
    embedder = QueryEmbedder(index.settings, index.meta["source"]["output"], weights=str(weights))
    with embedder, Running(Service(index, embedder)) as service:
        browser = Browser(chromium, "http://127.0.0.1:%d/" % service.port)
        page = browser.page
        try:
            def api(**query):
                return service.request("/api/search?" + urllib.parse.urlencode(query))[1]["neighbours"]

            def shown_scores(found):  # each tile's caption score as the API gives it
                return [[row["key"], "caption " + ("\u2013" if scores[row["key"]] is None else "%.3f" %
                                                   scores[row["key"]])] for row in found]

            expect(page.locator("#captions-label")).to_be_visible()
            expect(page.locator("#min-caption-label")).to_be_visible()
            sentence = "a red square"
            page.fill("#k", "6")
            page.fill("#text", sentence)
            page.check("#captions")
            page.press("#text", "Enter")
            results = browser.results_titled("\u201c%s\u201d against the captions: 6 results" % sentence)
            found = api(caption=sentence, k=6)
            assert [key for _, key, *_ in results] == [row["key"] for row in found]
            assert page.eval_on_selector_all("#results figure", CAPTION_SCORES) == shown_scores(found)
            assert all(scores[row["key"]] is not None for row in found)  # a row without a caption has no embedding

            bound = sorted(score for score in scores.values() if score is not None)[4]  # all but the 4 lowest pass
            page.fill("#min-caption-score", "%.4f" % bound)
            page.press("#min-caption-score", "Enter")  # the query shown, asked again with the bound
            results = browser.results_titled("\u201c%s\u201d against the captions, caption score at least %.4f: "
                                             "6 results" % (sentence, bound))
            assert [key for _, key, *_ in results] == [row["key"] for row in api(
                caption=sentence, k=6, min_caption_score="%.4f" % bound)]
            page.uncheck("#captions")  # the images nearest the sentence, bounded the same
            page.press("#text", "Enter")
            found = api(text=sentence, k=12, min_caption_score="%.4f" % bound)
            results = browser.results_titled("\u201c%s\u201d, caption score at least %.4f: 6 results" % (
                sentence, bound))
            assert [key for _, key, *_ in results] == [row["key"] for row in found[:6]]
            assert len(found) == sum(score is not None and score >= bound for score in scores.values())
            page.fill("#min-caption-score", "")
            page.press("#min-caption-score", "Enter")
            results = browser.results_titled("\u201c%s\u201d: 6 results" % sentence)
            found = api(text=sentence, k=6)
            assert page.eval_on_selector_all("#results figure", CAPTION_SCORES) == shown_scores(found)
            browser.threshold("0.5")  # the duplicate groups' members show theirs too
            groups = service.request("/api/duplicates?threshold=0.5")[1]
            expect(page.locator("#groups-count")).to_have_text(_groups_line(groups))
            members = [member for group in groups["shown"] for member in group]
            assert [member["caption_score"] for member in members] == [scores[member["key"]] for member in members]
            assert page.eval_on_selector_all("#groups figure", CAPTION_SCORES) == shown_scores(members)
            assert len(members) > 2
            page.fill("#min-caption-score", "2")  # the API's one line, shown whole
            page.press("#min-caption-score", "Enter")
            expect(page.locator("#error")).to_have_text(
                "error 400: min_caption_score must be a cosine from -1 to 1; got '2'")
            assert browser.errors == [e for e in browser.errors if "400" in e]  # the refused request's console line
        finally:
            browser.close()

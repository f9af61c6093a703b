"""The search service's page (search/live_page/, served at / by search/api.py): its files under the CSP and the
Host check, nothing else served; in Debian's chromium (Playwright), against a real `serve INDEX` of a small CLIP
output: a sentence, an uploaded and a dropped image, a click on a result, the duplicates' slider; SigLIP's
probability beside the score."""

import http.client
import json
import signal
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from hangs import HANG_SECONDS
from search.api import PAGE_FILES, PAGE_SECURITY_HEADERS, SECURITY_HEADERS
from search.index import Index
from search.service import Service
from search_data import clustered
from serving import serving, stopped
from services import (HTML_CAPTION, Running, clip_job, kept_job, png,  # noqa: F401 -- the jobs: fixtures
                      siglip_job)
from test_search_page import BROWSER_FLAGS, CHROMIUM, wait_for_images

TESTS = Path(__file__).resolve().parent
PAGE = TESTS.parent / "search" / "live_page"
PAGE_CSP = PAGE_SECURITY_HEADERS["Content-Security-Policy"]
HTML_KEY = 'a <b>bold</b> "key" & <img src=x onerror=alert(1)>.png'


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
        # Strict: this origin only, no inline script or style, no eval, nothing from another site.
        assert "'unsafe" not in PAGE_CSP and "default-src 'none'" in PAGE_CSP and "http" not in PAGE_CSP
        page = (PAGE / "index.html").read_text()
        assert page.count("<script") == 1 and '<script src="/live.js" defer></script>' in page
        assert "style=" not in page and "<style" not in page and "http" not in page
        script = (PAGE / "live.js").read_text()
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


class Browser:
    """Chromium on one page of `url`, its console errors, page errors and requests recorded."""

    def __init__(self, playwright, url):
        from playwright.sync_api import expect
        self.browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=BROWSER_FLAGS,
                                                  timeout=HANG_SECONDS * 1000)
        self.errors, self.requests = [], []
        self.page = self.browser.new_page(viewport={"width": 1100, "height": 900})
        self.page.set_default_timeout(HANG_SECONDS * 1000)  # hang guards, not bounds on speed (tests/hangs.py)
        self.page.on("console", lambda message: message.type == "error" and self.errors.append(message.text))
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        self.page.on("request", lambda request: self.requests.append(request.url))
        expect.set_options(timeout=HANG_SECONDS * 1000)  # expect's own 5 s too: a hang guard only
        self.page.goto(url)
        self.page.wait_for_selector("body[data-ready=true]", state="attached")

    def results_titled(self, title):
        """[(score text, key, row, href of its "open" link)] of the results, once their title is `title`."""
        from playwright.sync_api import expect
        expect(self.page.locator("#results-title")).to_have_text(title)
        wait_for_images(self.page)
        return self.page.eval_on_selector_all("#results figure", "figures => figures.map(f => ["
                                              "f.querySelector('.score').textContent, f.querySelector('.key')"
                                              ".textContent, Number(f.dataset.row), f.querySelector('a')"
                                              ".getAttribute('href'), f.querySelector('img').naturalWidth])")

    def close(self):
        self.browser.close()


def _expected(answer):
    return [["%.3f" % found["score"], found["key"], found["row"], "/api/image?row=%d" % found["row"]]
            for found in answer["neighbours"]]


def _shown(results):
    assert all(width > 0 for *_, width in results), results  # every thumbnail loaded
    return [result[:4] for result in results]


@needs_a_browser
def test_the_page_searches_a_sentence_an_image_a_result_and_regroups(clip_job, tmp_path):
    pytest.importorskip("playwright", reason="playwright is in the test extra: pip install -e '.[test]'")
    from playwright.sync_api import expect, sync_playwright
    folder, weights, index_folder, images = clip_job
    upload = tmp_path / "new.png"
    upload.write_bytes(png((120, 90), 99))  # not an indexed image: computed by the model
    with serving(index_folder, program=TESTS / "search_child.py", arguments=["--weights", weights]) as (child, url):
        def api(path, body=None):
            with urllib.request.urlopen(url.rstrip("/") + path, body, timeout=HANG_SECONDS) as response:
                return json.loads(response.read())

        with sync_playwright() as playwright:
            browser = Browser(playwright, url)
            page = browser.page
            try:
                expect(page.locator("#text-form")).to_be_visible()  # /api/index: this output takes sentences
                expect(page.locator("#image-label")).to_be_visible()
                page.fill("#k", "5")
                sentence = "a red square on a beach"
                page.fill("#text", sentence)
                page.press("#text", "Enter")
                shown = _shown(browser.results_titled("\u201c%s\u201d: 5 results" % sentence))
                assert shown == _expected(api("/api/search?" + urllib.parse.urlencode({"text": sentence, "k": 5})))

                page.set_input_files("#image", str(upload))  # the file input
                shown = _shown(browser.results_titled("the image new.png: 5 results"))
                assert shown == _expected(api("/api/search/image?k=5", upload.read_bytes()))

                dropped = (images / "colour07.png").read_bytes()  # dropped onto the page
                transfer = page.evaluate_handle("bytes => { const transfer = new DataTransfer(); transfer.items.add("
                                                "new File([new Uint8Array(bytes)], 'colour07.png', {type: "
                                                "'image/png'})); return transfer; }", list(dropped))
                page.dispatch_event("body", "drop", {"dataTransfer": transfer})
                shown = _shown(browser.results_titled("the image colour07.png: 5 results"))
                assert shown == _expected(api("/api/search/image?k=5", dropped))
                assert shown[0][1] == "colour07.png" and shown[0][0] == "1.000"  # its own row, by the model

                clicked = shown[2]  # the third result: searched by its row, it comes first with score 1
                page.click("#results figure:nth-child(3) button")
                shown = _shown(browser.results_titled("neighbours of %s: 5 results" % clicked[1]))
                assert shown == _expected(api("/api/neighbours?row=%d&k=5" % clicked[2]))
                assert shown[0][1:3] == clicked[1:3] and shown[0][0] == "1.000"
                # Its "open" link is the full image, served by row, and the browser shows it.
                with urllib.request.urlopen(url.rstrip("/") + clicked[3], timeout=HANG_SECONDS) as response:
                    assert response.read() == (images / clicked[1]).read_bytes()
                with page.expect_popup() as popup:
                    page.click("#results figure:first-child a")
                opened = popup.value
                opened.wait_for_load_state("load")
                assert opened.url == url.rstrip("/") + clicked[3]
                assert opened.evaluate("document.images[0].naturalWidth") == 96
                opened.close()

                # The slider regroups: thresholds whose group counts differ, found from the API.
                counts = {"%.3f" % (step * 0.005): api("/api/duplicates?threshold=%.3f" % (step * 0.005))
                          for step in range(0, 201, 5)}
                expect(page.locator("#groups-count")).to_have_text(_groups_line(counts["0.900"]))
                chosen = [threshold for threshold, answer in sorted(counts.items())
                          if answer["groups"] != counts["0.900"]["groups"]]
                assert chosen, "every threshold gives %d groups: the test could not fail" % counts["0.900"]["groups"]
                other = [threshold for threshold, answer in sorted(counts.items())
                         if answer["groups"] != counts[chosen[0]]["groups"]]
                for threshold in (chosen[0], other[0]):
                    page.fill("#threshold", threshold)
                    expect(page.locator("#groups-count")).to_have_text(_groups_line(counts[threshold]))
                    expect(page.locator("#threshold-value")).to_have_text(threshold)
                    groups = page.eval_on_selector_all("#groups .row", "rows => rows.map(row => Array.from("
                                                       "row.querySelectorAll('.key')).map(key => key.textContent))")
                    assert groups == [[member["key"] for member in group] for group in counts[threshold]["shown"]]

                assert browser.errors == []
                # An error of the API is one line on the page (and the browser's own line on its console).
                page.fill("#k", "0")
                page.press("#text", "Enter")
                expect(page.locator("#error")).to_have_text("error 400: k must be a whole number from 1 to 1000; "
                                                            "got '0'")
                expect(page.locator("#results-title")).to_have_text("Results")
                assert page.locator("#results figure").count() == 0
                assert browser.errors == ["Failed to load resource: the server responded with a status of 400 "
                                          "(Bad Request)"]
                assert all(request.startswith(url) for request in browser.requests), browser.requests
            finally:
                browser.close()
        assert stopped(child, signal.SIGTERM)


def _groups_line(answer):
    return "%d groups (%d pairs) at %.3f" % (answer["groups"], answer["pairs"], answer["threshold"])


@needs_a_browser
def test_a_key_with_html_shows_as_text_and_an_index_without_a_model_offers_no_sentence(html_index):
    pytest.importorskip("playwright", reason="playwright is in the test extra: pip install -e '.[test]'")
    from playwright.sync_api import expect, sync_playwright
    with Running(Service(html_index)) as service, sync_playwright() as playwright:
        browser = Browser(playwright, "http://127.0.0.1:%d/" % service.port)
        page = browser.page
        try:
            expect(page.locator("#text-form")).to_be_hidden()  # no model: no sentence, no image
            expect(page.locator("#image-label")).to_be_hidden()
            answer = service.request("/api/duplicates?threshold=0.9")[1]
            expect(page.locator("#groups-count")).to_have_text(_groups_line(answer))
            keys = page.eval_on_selector_all("#groups .key", "keys => keys.map(key => key.textContent)")
            assert keys == [member["key"] for group in answer["shown"] for member in group] and HTML_KEY in keys
            assert page.evaluate("document.querySelectorAll('b, img:not([src^=\"/api/image?row=\"])').length") == 0
            page.locator("#groups figure").nth(keys.index(HTML_KEY)).locator("button").click()
            shown = browser.results_titled("neighbours of %s: 10 results" % HTML_KEY)
            assert [result[1] for result in shown[:2]] == [HTML_KEY, "img/00000.jpg"]
            # An image dropped on an index that takes none: one line, and nothing sent.
            transfer = page.evaluate_handle("() => { const transfer = new DataTransfer(); transfer.items.add(new "
                                            "File(['x'], 'x.png', {type: 'image/png'})); return transfer; }")
            page.dispatch_event("body", "drop", {"dataTransfer": transfer})
            expect(page.locator("#error")).to_have_text("this service computes no image queries (no model given "
                                                        "to serve)")
            assert not any("/api/search/image" in request for request in browser.requests)
            # Its rows have no image files: each thumbnail is a 404 of /api/image, and nothing else failed.
            assert set(browser.errors) == {"Failed to load resource: the server responded with a status of 404 "
                                           "(Not Found)"}
        finally:
            browser.close()


PROBABILITIES = ("figures => figures.map(f => [f.querySelector('.key').textContent, f.querySelector('.probability') "
                 "&& f.querySelector('.probability').textContent])")


@needs_a_browser
def test_a_siglip_sentence_s_results_show_siglip_s_probability_beside_the_score(siglip_job):
    pytest.importorskip("playwright", reason="playwright is in the test extra: pip install -e '.[test]'")
    from playwright.sync_api import sync_playwright
    from models.query_embedder import QueryEmbedder
    folder, weights, index_folder, images = siglip_job
    index = Index.load(index_folder)
    embedder = QueryEmbedder(index.settings, index.meta["source"]["output"], weights=str(weights))
    with Running(Service(index, embedder)) as service, sync_playwright() as playwright:
        browser = Browser(playwright, "http://127.0.0.1:%d/" % service.port)
        page = browser.page
        try:
            sentence = "ein Hund am Strand"
            answer = service.request("/api/search?" + urllib.parse.urlencode({"text": sentence, "k": 5}))[1]
            page.fill("#k", "5")
            page.fill("#text", sentence)
            page.press("#text", "Enter")
            browser.results_titled("\u201c%s\u201d: 5 results" % sentence)
            shown = page.eval_on_selector_all("#results figure", PROBABILITIES)
            assert shown == [[found["key"], "p %.3f" % found["probability"]] for found in answer["neighbours"]]
            page.locator("#results figure").nth(0).locator("button").click()  # an image's neighbours: no probability
            browser.results_titled("neighbours of %s: 5 results" % answer["neighbours"][0]["key"])
            assert all(probability is None for _, probability in page.eval_on_selector_all("#results figure",
                                                                                             PROBABILITIES))
            assert browser.errors == []
        finally:
            browser.close()
            embedder.close()


KEPT_LINES = ("figures => figures.map(f => [f.querySelector('.key').textContent, Array.from(f.querySelectorAll("
              "'.kept')).map(line => [line.dataset.name, line.lastChild.textContent])])")


@needs_a_browser
def test_the_values_kept_beside_each_row_show_under_its_key_as_text(kept_job):
    pytest.importorskip("playwright", reason="playwright is in the test extra: pip install -e '.[test]'")
    from playwright.sync_api import expect, sync_playwright
    folder, expected = kept_job

    def lines(key):
        return [[name, value] for name, value in expected[key].items() if value is not None]

    with Running(Service(Index.load(folder))) as service, sync_playwright() as playwright:
        browser = Browser(playwright, "http://127.0.0.1:%d/" % service.port)
        page = browser.page
        try:
            answer = service.request("/api/duplicates?threshold=0.000")[1]
            assert answer["groups"] >= 1, answer  # colours' features: some rows alike at a cosine of 0
            page.fill("#threshold", "0")
            expect(page.locator("#groups-count")).to_have_text(_groups_line(answer))
            groups = page.eval_on_selector_all("#groups figure", KEPT_LINES)
            assert [key for key, _ in groups] == [member["key"] for group in answer["shown"] for member in group]
            assert all(shown == lines(key) for key, shown in groups), groups
            query = sorted(expected)[3]  # its caption holds HTML
            page.locator("#groups figure").nth([key for key, _ in groups].index(query)).locator("button").click()
            browser.results_titled("neighbours of %s: %d results" % (query, len(expected)))
            results = page.eval_on_selector_all("#results figure", KEPT_LINES)
            assert sorted(key for key, _ in results) == sorted(expected) and results[0][0] == query
            assert all(shown == lines(key) for key, shown in results), results
            assert results[0][1][0] == ["txt", HTML_CAPTION]
            assert page.evaluate("document.querySelectorAll('b, img:not([src^=\"/api/image?row=\"])').length") == 0
            assert page.title() == "Search" and browser.errors == []
        finally:
            browser.close()

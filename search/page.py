"""The page: a static HTML report of queries and their neighbours, duplicate groups and the histogram,
with thumbnails beside it (search/server.py shows it on 127.0.0.1).

    write_page("page/", queries=[...], groups=[...], histogram=(counts, edges), images_root="photos/")

The folder holds index.html (styles, script and data inline) and thumbs/ (JPEGs made with Pillow,
named by a hash of the image's path). A thumbnail is made from whatever the engine read: a file under
the images folder, an object of a store (the images were an s3:// prefix, or the keys are URLs:
fetched through fsspec with the engine's retries), or a tar member (`tar://<member>::<tar>`: one byte
range, found in the output's members index). The page itself fetches nothing from elsewhere: no CDN, font or script,
and a Content-Security-Policy that lets the page load only its own files. Groups are shown
GROUPS_PER_PAGE at a time (buttons page through them) and thumbnails load lazily, so a report
of thousands of groups opens at once. Image paths and a text query's sentence are shown as text
(textContent), never as HTML: a sentence is the title of its query, and stands in a tile where an image
query's thumbnail would. The values kept beside a row (`run_inference.py --keep`: a caption, a .json member)
are shown under its path, as text too, one line a name. Beside each tile's score, as the service's page shows them:
its row's caption score, "caption 0.312" ("caption \u2013" for a row without one), on an output with caption
scores (`run_inference.py --text-column`), and for a sentence on a SigLIP output, SigLIP's probability, "p 0.731".
"""

import concurrent.futures
import hashlib
import html
import io
import json
import os
from pathlib import Path

from PIL import Image, ImageDraw

from parallel.output.durable import replace_atomically

THUMB_SIZE = 160
GROUPS_PER_PAGE = 50
MEMBERS_SHOWN = 60
THUMBS = "thumbs"
THUMB_THREADS = 8  # thumbnails made at once: objects and tar members are fetched over the network
GENERATOR = '<meta name="generator" content="search-features page">'  # how a page we wrote is told from others


def _thumb_name(image_path):
    return hashlib.sha256(os.fsencode(str(image_path))).hexdigest()[:24] + ".jpg"


def make_thumbnail(source, destination, size=THUMB_SIZE):
    """Writes a JPEG of at most size x size of the image `source` to `destination`; an image that cannot
    be read (or `source` None) gets a grey square saying so (every thumbnail on the page loads).
    Returns True if read."""
    try:
        if source is None:
            raise ValueError("no image")
        with Image.open(source) as image:
            image.draft("RGB", (size, size))  # JPEG: decoded at a reduced scale, fast on camera-sized photos
            image = image.convert("RGB")
            image.thumbnail((size, size))
            image.save(destination, "JPEG", quality=85)
        return True
    except (OSError, ValueError, Image.DecompressionBombError):
        image = Image.new("RGB", (size, size), (200, 200, 200))
        ImageDraw.Draw(image).text((8, size // 2 - 6), "not readable", fill=(90, 90, 90))
        image.save(destination, "JPEG", quality=85)
        return False


def _thumbnails(folder, images, images_root, members, progress, image_column=None):
    """{image path as given: "thumbs/<hash>.jpg"} for every image; made once (kept between reports)."""
    thumbs = folder / THUMBS
    thumbs.mkdir(parents=True, exist_ok=True)
    names = {image: "%s/%s" % (THUMBS, _thumb_name(image)) for image in images}
    missing = sorted(image for image, name in names.items() if not (folder / name).is_file())
    from parallel.inputs.members import is_member
    members = _member_entries(members, [image for image in missing if is_member(image)])
    done = len(names) - len(missing)
    with concurrent.futures.ThreadPoolExecutor(THUMB_THREADS) as pool:
        made = [pool.submit(_make, image, folder / names[image], images_root, members, image_column)
                for image in missing]
        for future in concurrent.futures.as_completed(made):
            future.result()
            done += 1
            if progress:
                progress(done, len(names))
    return names


def _member_entries(members, keys):
    """{key: where in its tar} of the tar members `keys`, from the members index `members` (a path or None)."""
    if not keys or members is None or not Path(members).is_file():
        return {}
    from parallel.inputs.tars import read_index
    return {entry.key: entry for entry in read_index(members, keys)}


def _make(image, target, images_root, members, image_column=None):
    """The thumbnail of `image` (a key as the output holds it) at `target`; a placeholder when it cannot be read."""
    try:
        source = image_source(image, images_root, members, image_column)
    except Exception:  # noqa: BLE001 -- a missing member, a store that fails: this image's tile says so
        source = None
    make_thumbnail(source, target)


def image_source(image, images_root, members, image_column=None):
    """A local path, or the bytes (BytesIO) of a tar member, a row of a Parquet or TFRecord file (read back
    by its entry in the members index `members`; `image_column`: the job's), or an object, of the key `image`."""
    from parallel.inputs.members import is_member
    if is_member(image):
        from parallel.inputs.tars import read_member
        return io.BytesIO(read_member(image, members, image_column))  # ValueError when the index lacks it
    from parallel.locations import is_url
    if is_url(image) or (images_root is not None and is_url(str(images_root))):
        from parallel.inputs.locations import locate
        from parallel.inputs.remote import fetch
        return io.BytesIO(fetch(locate(str(images_root or ""), image)))
    return Path(image) if Path(image).is_absolute() or images_root is None else Path(images_root) / image


def histogram_svg(counts, edges, threshold=None, width=640, height=180):
    """The histogram as an inline SVG (bars, axis labels every 0.1, the threshold as a red line)."""
    bins = len(counts)
    top = max(1, max(counts))
    bar_width = width / bins
    parts = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" role="img" '
             'aria-label="histogram of nearest-neighbour scores">' % (width, height + 20, width, height + 20)]
    for position, count in enumerate(counts):
        bar = (height - 4) * count / top
        parts.append('<rect x="%.2f" y="%.2f" width="%.2f" height="%.2f" fill="#4a78c0"><title>%.2f to %.2f: %d'
                     '</title></rect>' % (position * bar_width, height - bar, max(bar_width - 1, 1), bar,
                                          edges[position], edges[position + 1], count))
    for tick in range(0, 21, 2):
        value = -1 + tick / 10
        x = (value - edges[0]) / (edges[-1] - edges[0]) * width
        parts.append('<text x="%.1f" y="%d" font-size="10" text-anchor="middle" fill="#333">%.1f</text>'
                     % (min(max(x, 10), width - 10), height + 14, value))
    if threshold is not None:
        x = (threshold - edges[0]) / (edges[-1] - edges[0]) * width
        parts.append('<line x1="%.1f" x2="%.1f" y1="0" y2="%d" stroke="#c03030" stroke-width="2"/>' % (x, x, height))
    parts.append("</svg>")
    return "".join(parts)


_STYLE = """
body{font:14px system-ui,sans-serif;margin:1.5em;color:#222;background:#fafafa}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em}
.row{display:flex;flex-wrap:wrap;gap:8px;margin:.4em 0 1.2em}
figure{margin:0;width:164px;background:#fff;border:1px solid #ddd;padding:2px}
figure.query{border:2px solid #c03030}
figure img{display:block;width:160px;height:160px;object-fit:contain;background:#eee}
figcaption{font-size:11px;overflow-wrap:anywhere}
figcaption .caption-score{color:#5a3d8a}figcaption .probability{color:#2a5d2a}
.kept{font-size:11px;color:#555;overflow-wrap:anywhere;max-height:5.5em;overflow:hidden}
.kept .name{font-weight:600;margin-right:.3em}
figure.sentence{display:flex;align-items:center;justify-content:center;height:160px;font-size:15px;
text-align:center;overflow-wrap:anywhere;overflow:hidden;background:#fff8e6}
h3.sentence::before{content:"text: "}
.pager button{margin-right:.5em}.meta{color:#555}
figure.remove{border:2px dashed #c03030;opacity:.8}figure.keep{border:2px solid #2a8a3a}
.mark{font-size:11px;font-weight:600}.remove .mark{color:#c03030}.keep .mark{color:#2a8a3a}
"""

# The page's own script, after the live page's scores.js (the tiles' score spans; "use strict" first).
_SCORES_JS = Path(__file__).resolve().parent / "live_page" / "scores.js"
_SCRIPT = """
const data = JSON.parse(document.getElementById("data").textContent);
function figure(item) {
  const fig = document.createElement("figure");
  if (item.query) fig.className = "query";
  const img = document.createElement("img");
  img.loading = "lazy"; img.src = item.thumb; img.alt = item.path; img.width = 160; img.height = 160;
  const cap = document.createElement("figcaption");
  if (item.score !== undefined) cap.append(item.score.toFixed(3) + "  ");
  for (const span of scoreSpans(item)) cap.append(span, "  ");  // search/live_page/scores.js
  cap.append(item.path);
  fig.append(img, cap);
  if (item.remove !== undefined) {  // a duplicate group's member, by the keep rule: the one kept, or one to remove
    fig.classList.add(item.remove ? "remove" : "keep");
    const mark = document.createElement("div"); mark.className = "mark";
    mark.textContent = item.remove ? "would go" : "kept"; fig.append(mark);
  }
  for (const [name, value] of Object.entries(item.kept || {})) {
    if (value === null) continue;  // this row has none of it
    const line = document.createElement("div"), label = document.createElement("span");
    const text = document.createElement("span");
    line.className = "kept"; line.dataset.name = name; line.title = value;
    label.className = "name"; label.textContent = name; text.textContent = value;
    line.append(label, text);
    fig.append(line);
  }
  return fig;
}
function showQueries() {
  const box = document.getElementById("queries");
  for (const query of data.queries) {
    const title = document.createElement("h3"); title.textContent = query.label; box.append(title);
    const row = document.createElement("div"); row.className = "row";
    if (query.text) {
      title.className = "sentence";
      const tile = document.createElement("figure"); tile.className = "query sentence";
      tile.textContent = "\u201c" + query.label + "\u201d";
      row.append(tile);
    }
    if (query.thumb) row.append(figure({path: query.label, thumb: query.thumb, query: true, kept: query.kept,
                                        caption_score: query.caption_score}));
    for (const item of query.neighbours) row.append(figure(item));
    box.append(row);
  }
}
let page = 0;
function showGroups() {
  const box = document.getElementById("groups"); box.replaceChildren();
  const per = data.groupsPerPage, pages = Math.max(1, Math.ceil(data.groups.length / per));
  page = Math.min(Math.max(page, 0), pages - 1);
  document.getElementById("page-number").textContent = "page " + (page + 1) + " of " + pages;
  data.groups.slice(page * per, (page + 1) * per).forEach((group, offset) => {
    const title = document.createElement("h3");
    title.textContent = "group " + (page * per + offset + 1) + ": " + group.size + " images" +
      (group.size > group.members.length ? " (first " + group.members.length + " shown)" : "");
    const row = document.createElement("div"); row.className = "row";
    for (const item of group.members) row.append(figure(item));
    box.append(title, row);
  });
}
document.getElementById("previous").addEventListener("click", () => { page -= 1; showGroups(); });
document.getElementById("next").addEventListener("click", () => { page += 1; showGroups(); });
showQueries(); showGroups();
"""


def check_page_folder(folder, overwrite=False):
    """Refuses a `folder` whose index.html this module did not write (it lacks GENERATOR), unless `overwrite`.

    Raises:
      ValueError: naming the file.
    """
    page = Path(folder) / "index.html"
    if overwrite or not page.exists():
        return
    try:
        with open(page, "rb") as file:
            ours = GENERATOR.encode("utf-8") in file.read(4096)
    except OSError:
        ours = False
    if not ours:
        raise ValueError("%s exists and is not a page search-features wrote: pass --overwrite to replace it, or "
                         "choose another --out" % page)


def write_page(folder, queries=(), groups=(), histogram=None, threshold=None, images_root=None, title="Search",
               details="", progress=None, members=None, kept=None, overwrite=False, image_column=None,
               keep_rule=None, caption_scores=None):
    """Writes folder/index.html and folder/thumbs/ (created; an earlier report there is replaced, another
    index.html only if `overwrite`).

    Args:
      folder: the report's folder (str or Path).
      queries: list of {"label": str, "image": path of the query image or None,
        "neighbours": [(path, score), ...], "text": True for a sentence (its label; optional),
        "probabilities": [float] beside the neighbours' scores, or None (optional: the model's own probability
        of a sentence and each image, SigLIP's: `search.queries.probabilities`)}.
      groups: list of lists of paths, largest first.
      keep_rule: the rule that chose the row each group keeps (search/removals.py), its first path, marked
        "kept" and the others "would go"; None: no marks.
      histogram: (counts [B], edges [B + 1]) of nearest-neighbour scores, or None.
      threshold: the duplicates threshold, drawn on the histogram; None: not drawn.
      images_root: the folder or s3:// prefix the paths are relative to (the indexed output's images).
      members: the output's members index (`<output>.members.parquet`), for keys of tar members and of
        rows of Parquet and TFRecord files; image_column: the job's --image-column, for those rows.
      kept: callable(keys) -> {key: {name: str or None}}: the values kept beside the rows shown
        (`search.queries.Kept.of`), shown under their paths; None: none shown.
      caption_scores: callable(keys) -> {key: float or None} of the keys that are rows (None: the row has none;
        `search.captions.caption_scores_of`), shown beside each row's score; None: the output has none, none shown.
      title: the page's heading. details: a line under it (what was indexed).
      progress: callable(done, total) while thumbnails are made, or None.
      overwrite: replace an index.html in `folder` that is not a page written here.

    Returns:
      Path of index.html.

    Raises:
      ValueError: `folder` holds an index.html written by something else, and not `overwrite`.
    """
    check_page_folder(folder, overwrite)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    images = {path for query in queries for path, _ in query["neighbours"]}
    images |= {query["image"] for query in queries if query.get("image")}
    images |= {path for group in groups for path in group[:MEMBERS_SHOWN]}
    thumbs = _thumbnails(folder, images, images_root, members, progress, image_column)
    values = kept(images) if kept is not None else {}
    scores = caption_scores(images) if caption_scores is not None else None

    def item(path, **more):
        if scores is not None:  # null: no caption score, or not a row (a caption whose image failed)
            more["caption_score"] = scores.get(path)
        return dict(more, path=path, thumb=thumbs[path], **({"kept": values[path]} if path in values else {}))

    def neighbours(query):
        chances = query.get("probabilities") or [None] * len(query["neighbours"])
        return [item(path, score=float(score), **({} if chance is None else {"probability": float(chance)}))
                for (path, score), chance in zip(query["neighbours"], chances)]
    data = {
        "queries": [dict({"label": query["label"], "thumb": thumbs.get(query.get("image")),
                          "text": bool(query.get("text")), "neighbours": neighbours(query)},
                         **({"kept": values[query["image"]]} if query.get("image") in values else {}),
                         **({"caption_score": scores[query["image"]]} if query.get("image") in (scores or {}) else {}))
                    for query in queries],
        "groups": [{"size": len(group), "members": [item(path, **({} if keep_rule is None else {"remove": at > 0}))
                                                    for at, path in enumerate(group[:MEMBERS_SHOWN])]}
                   for group in groups],
        "groupsPerPage": GROUPS_PER_PAGE,
    }
    # "</" inside a script element would end it: escaped, the JSON reads the same.
    payload = json.dumps(data, ensure_ascii=True).replace("</", "<\\/")
    svg = histogram_svg(*histogram, threshold=threshold) if histogram is not None else "<p>not computed</p>"
    text = "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">', GENERATOR,
        '<link rel="icon" href="data:,">',
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; img-src \'self\' file: data:; '
        'style-src \'unsafe-inline\'; script-src \'unsafe-inline\'">',
        "<title>%s</title><style>%s</style></head><body>" % (html.escape(title), _STYLE),
        "<h1>%s</h1><p class=\"meta\">%s</p>" % (html.escape(title), html.escape(details)),
        "<h2>Nearest-neighbour scores</h2>", svg,
        '<p class="meta">Each bar counts images whose nearest other image has that cosine similarity%s.</p>'
        % (html.escape("; the red line is the threshold %.3f" % threshold) if threshold is not None else ""),
        "<h2>Queries (%d)</h2><div id=\"queries\"></div>" % len(queries),
        "<h2>Duplicate groups (%d), largest first</h2>" % len(groups),
        "" if keep_rule is None else '<p class="meta">%s</p>' % html.escape(
            "Each group keeps one image (rule %s); the others would go." % keep_rule),
        '<p class="pager"><button id="previous">previous</button><button id="next">next</button>'
        '<span id="page-number"></span></p><div id="groups"></div>',
        '<script type="application/json" id="data">%s</script>' % payload,
        "<script>%s%s</script>" % (_SCORES_JS.read_text(encoding="utf-8"), _SCRIPT), "</body></html>", ""])
    page = folder / "index.html"
    replace_atomically(page, text.encode("utf-8"))
    return page

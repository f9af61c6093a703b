// The page of the search service (search/api.py serves it at /): it asks the JSON API of the same origin and
// shows the answers. Every text from the API goes in by textContent, never as HTML: a key is shown as it is;
// the only links made of the API's text are kept values that are one http(s) URL each.
"use strict";

const GROUPS_SHOWN = 50;     // groups drawn at once (the API gives the first 1,000 and the count of all)
const MEMBERS_SHOWN = 24;    // tiles of one group drawn at first; the rest on demand
const MORE_AT_ONCE = 96;     // tiles a group's "show more" button adds
const SLIDER_STEPS = 1000;   // the threshold slider's positions (index.html: its max)
let takes = {};              // /api/index's "queries": which searches this index answers
let unavailable = {};        // /api/index's "unavailable": why not the others, a line each
let searchNumber = 0, groupsNumber = 0;  // only the latest answer is shown, whatever order answers come in
let shownQuery = null;       // asks the query shown again (with the k of the moment): k's change calls it
let queryObjectUrl = null;   // the uploaded image shown above its results (an object URL of the file)

function element(id) { return document.getElementById(id); }

// "1 group", "2 groups", "1,000 images".
function counted(count, noun) {
  return count.toLocaleString("en-US") + " " + noun + (count === 1 ? "" : "s");
}

function showError(message) {
  const line = element("error");
  line.textContent = message || "";  // whole: it wraps (live.css), the fix at its end stays in view
  line.hidden = !message;
}

async function ask(path, body) {
  let response;
  try {
    response = await fetch(path, body === undefined ? {} : {method: "POST", body: body});
  } catch (error) {
    throw new Error("the service cannot be reached (" + error.message + ")");
  }
  const json = (response.headers.get("Content-Type") || "").startsWith("application/json");
  const answer = json ? await response.json() : null;
  if (!response.ok) {
    throw new Error("error " + response.status + ": " + (answer && answer.error ? answer.error : response.statusText));
  }
  return answer;
}

function imageUrl(row) { return "/api/image?row=" + encodeURIComponent(row); }

function k() { return encodeURIComponent(element("k").value.trim()); }  // checked by the API (400, one line)

// The caption score bound of every search ("" when none is given, or the output has no caption scores): the
// API checks it (400, one line).
function bound() {
  const value = element("min-caption-score").value.trim();
  return value === "" || element("min-caption-label").hidden ? "" : "&min_caption_score=" + encodeURIComponent(value);
}

// What a search's title adds for the bound: ", caption score at least 0.28".
function boundTitle() {
  return bound() ? ", caption score at least " + element("min-caption-score").value.trim() : "";
}

// Paths shortened to what differs between them: the leading parts (each from a "/" or "\" on) that all share
// become "…", the last part (a file's name) always kept: "/d/cats/001.jpg", "/d/dogs/002.jpg" ->
// "…/cats/001.jpg", "…/dogs/002.jpg"; a path alone keeps its last part.
function trimmed(paths) {
  const split = paths.map((path) => path.split(/(?=[/\\])/));
  const shortest = split.reduce((least, parts) => Math.min(least, parts.length), Infinity);
  let shared = 0;
  while (shared < shortest - 1 && split.every((parts) => parts[shared] === split[0][shared])) shared++;
  return split.map((parts) => (shared ? "\u2026" : "") + parts.slice(shared).join(""));
}

// The keys of the rows shown, shortened to what differs between them (the whole key is each tile's title).
// A member's key (tar://<member>::<file>, parquet:// and tfrecord:// alike) is shown "<member> in <file>",
// each shortened apart, and without its file when every key shown is of the same one.
function shortKeys(keys) {
  if (!keys.length) return [];
  const halves = keys.map((key) => {
    const at = key.lastIndexOf("::");
    return at < 0 ? [key, null] : [key.slice(0, at), key.slice(at + 2)];
  });
  const members = trimmed(halves.map(([member]) => member));
  const oneFile = halves.every(([, file]) => file === halves[0][1]);
  const files = trimmed(halves.map(([, file]) => file || ""));
  return halves.map(([, file], place) => members[place] + (file === null || oneFile ? "" : " in " + files[place]));
}

// A kept value that is one http(s) URL, as the link's address; null for any other value: nothing else of the
// API's text becomes a link.
function linkOf(value) {
  if (!/^https?:\/\/\S+$/i.test(value)) return null;
  try {
    const url = new URL(value);
    return url.protocol === "http:" || url.protocol === "https:" ? url.href : null;
  } catch (error) {
    return null;
  }
}

// The value kept beside a row that reads as its caption: the first that is text, neither a link nor JSON.
function captionOf(kept) {
  return Object.values(kept || {}).find((value) => value !== null && value.trim() !== "" && !linkOf(value) &&
                                                   !/^\s*[[{]/.test(value)) || null;
}

function quoted(text) { return "\u201c" + (text.length > 80 ? text.slice(0, 79) + "\u2026" : text) + "\u201d"; }

// The values the output kept beside the row (run_inference.py --keep), one line a name, as text; a value that
// is an http(s) URL as a link, opened apart (no opener, no referrer).
function keptLines(kept) {
  return Object.entries(kept || {}).filter(([, value]) => value !== null).map(([name, value]) => {
    const line = document.createElement("div");
    line.className = "kept";
    line.dataset.name = name;
    line.title = value;
    const label = document.createElement("span");
    label.className = "name";
    label.textContent = name;
    const href = linkOf(value);
    const text = document.createElement(href ? "a" : "span");
    if (href) {
      text.href = href;
      text.target = "_blank";
      text.rel = "noopener noreferrer";
    }
    text.textContent = value;
    line.append(label, text);
    return line;
  });
}

// A row's tile: its thumbnail (a click searches by it), its score, what was kept beside it (its caption first),
// then its key, shortened (`short`), the whole key its title, and the link to the full image.
function tile(item, short) {
  const figure = document.createElement("figure");
  figure.className = "result";
  figure.dataset.row = item.row;
  const caption = captionOf(item.kept);
  const button = document.createElement("button");
  button.type = "button";
  button.title = "search by this image";
  const image = document.createElement("img");
  image.src = imageUrl(item.row);
  image.alt = caption || short;
  image.loading = "lazy";
  button.append(image);
  button.addEventListener("click", () => byRow(item.row, item.key, caption ? quoted(caption) : short));
  const text = document.createElement("figcaption");
  if (item.score !== undefined) {
    const score = document.createElement("span");
    score.className = "score";
    score.textContent = item.score.toFixed(3);
    text.append(score);
  }
  text.append(...scoreSpans(item));  // scores.js
  const keyLine = document.createElement("div");
  keyLine.className = "key-line";
  const open = document.createElement("a");
  open.className = "open";
  open.href = imageUrl(item.row);
  open.target = "_blank";
  open.rel = "noopener noreferrer";
  open.title = item.key;
  open.textContent = "open";
  const key = document.createElement("span");
  key.className = "key";
  key.title = item.key;
  key.textContent = short;
  keyLine.append(open, key);
  text.append(...keptLines(item.kept), keyLine);
  figure.append(button, text);
  if (item.remove !== undefined) {  // a duplicate group's member: the row its rule keeps, or one that would go
    figure.classList.add(item.remove ? "remove" : "keep");
    const mark = document.createElement("div");
    mark.className = "mark";
    mark.textContent = item.remove ? "would go" : "kept";
    text.prepend(mark);
  }
  return figure;
}

// The query's image above its results (`query`: {src, caption}), or none (null: a sentence). An uploaded
// image's object URL is let go once another query replaces it.
function showQuery(query) {
  if (queryObjectUrl && (!query || query.src !== queryObjectUrl)) {
    URL.revokeObjectURL(queryObjectUrl);
    queryObjectUrl = null;
  }
  element("query").hidden = !query;
  if (query) {
    element("query-image").src = query.src;
    element("query-caption").textContent = query.caption;
  } else {
    element("query-image").removeAttribute("src");
  }
}

// Asks `path` and shows its neighbours under `title` ({text, key}: the whole key as its hover).
async function search(path, title, body, query) {
  const number = ++searchNumber;
  showError("");
  showQuery(query || null);
  const heading = element("results-title");
  heading.textContent = "Searching: " + title.text;
  heading.title = title.key || "";
  try {
    const answer = await ask(path, body);
    if (number !== searchNumber) return;
    const shorts = shortKeys(answer.neighbours.map((found) => found.key));
    element("results").replaceChildren(...answer.neighbours.map((found, place) => tile(found, shorts[place])));
    heading.textContent = title.text + ": " + counted(answer.neighbours.length, "result");
  } catch (error) {
    if (number !== searchNumber) return;
    heading.textContent = "Results";
    element("results").replaceChildren();  // the last answer's results are not this query's
    showError(error.message);
  }
}

function byRow(row, key, label) {
  const query = {src: imageUrl(row), caption: label};
  shownQuery = () => search("/api/neighbours?row=" + encodeURIComponent(row) + "&k=" + k() + bound(),
                            {text: "neighbours of " + label + boundTitle(), key: key}, undefined, query);
  shownQuery();
}

function byImage(file) {
  if (!takes.image) {
    showError("No search by image: " + unavailable.image);
    return;
  }
  showQuery(null);
  queryObjectUrl = URL.createObjectURL(file);
  const query = {src: queryObjectUrl, caption: file.name};
  shownQuery = () => search("/api/search/image?k=" + k() + bound(), {text: "the image " + file.name + boundTitle()},
                            file, query);
  shownQuery();
}

function bySentence(event) {
  event.preventDefault();
  const sentence = element("text").value;
  const captions = !element("captions-label").hidden && element("captions").checked;  // text to text
  shownQuery = () => search("/api/search?" + (captions ? "caption=" : "text=") + encodeURIComponent(sentence) +
                            "&k=" + k() + bound(), {text: "\u201c" + sentence + "\u201d" +
                                                          (captions ? " against the captions" : "") + boundTitle()});
  shownQuery();
}

// The slider spends its pixels where thresholds are chosen: its position p (0 to 1) is the threshold
// 1 - (1 - p)^2, from 0 to 1, a step 2.2 times finer at 0.95 than a straight scale's and 5 times at 0.99. The
// number beside it takes any threshold, -1 to 1; each follows the other.
function sliderThreshold(position) {
  const rest = 1 - position / SLIDER_STEPS;
  return 1 - rest * rest;
}

function sliderPosition(threshold) {
  return Math.round(SLIDER_STEPS * (1 - Math.sqrt(1 - Math.min(1, Math.max(0, threshold)))));
}

// A group: its title, its first tiles, and a button that draws more of them.
function groupSection(group, shorts, place) {
  const title = document.createElement("h3");
  title.textContent = "group " + (place + 1) + ": " + counted(group.length, "image");
  const row = document.createElement("div");
  row.className = "row";
  const more = document.createElement("button");
  more.type = "button";
  more.className = "more";
  let drawn = 0;
  function draw(count) {
    const end = Math.min(group.length, drawn + count);
    row.append(...group.slice(drawn, end).map((member, offset) => tile(member, shorts[drawn + offset])));
    drawn = end;
    const left = group.length - drawn;
    more.hidden = left === 0;
    more.textContent = "show " + Math.min(left, MORE_AT_ONCE) + " more" +
      (left > MORE_AT_ONCE ? " (" + left.toLocaleString("en-US") + " not shown)" : "");
  }
  more.addEventListener("click", () => draw(MORE_AT_ONCE));
  draw(MEMBERS_SHOWN);
  return [title, row, more];
}

async function regroup() {
  const number = ++groupsNumber;
  element("groups-count").textContent = "grouping\u2026";
  try {
    const answer = await ask("/api/duplicates?threshold=" + encodeURIComponent(element("threshold").value.trim()));
    if (number !== groupsNumber) return;
    const shown = answer.shown.slice(0, GROUPS_SHOWN);
    const shorts = shortKeys(shown.flat().map((member) => member.key));
    let first = 0;
    element("groups").replaceChildren(...shown.flatMap((group, place) => {
      first += group.length;
      return groupSection(group, shorts.slice(first - group.length, first), place);
    }));
    element("groups-count").textContent = counted(answer.groups, "group") + " (" + counted(answer.pairs, "pair") +
      ") at " + answer.threshold.toFixed(3) +
      (answer.groups > shown.length ? ", the first " + shown.length + " shown" : "");
  } catch (error) {
    if (number !== groupsNumber) return;
    element("groups-count").textContent = "";
    showError(error.message);
  }
}

function dropping(event) {
  if (!event.dataTransfer || !Array.from(event.dataTransfer.types).includes("Files")) return;
  event.preventDefault();  // lets the drop come to the page, instead of the browser opening the file
  document.body.classList.toggle("dropping", event.type !== "dragleave");
}

// Why the sentence box or the image upload is not offered, in a line ("" when both are).
function unavailableLine(why) {
  if (why.text && why.text === why.image) return "No search by sentence or image: " + why.text + ".";
  return [["text", "sentence"], ["image", "image"]].filter(([kind]) => why[kind])
    .map(([kind, name]) => "No search by " + name + ": " + why[kind] + ".").join(" ");
}

async function start() {
  element("text-form").addEventListener("submit", bySentence);
  element("image").addEventListener("change", () => {
    const file = element("image").files[0];
    if (file) byImage(file);
    element("image").value = "";  // the same file chosen again searches again
  });
  for (const name of ["dragenter", "dragover", "dragleave"]) document.addEventListener(name, dropping);
  document.addEventListener("drop", (event) => {
    event.preventDefault();
    document.body.classList.remove("dropping");
    const file = event.dataTransfer && event.dataTransfer.files[0];
    if (file) byImage(file);
  });
  element("k").addEventListener("change", () => { if (shownQuery) shownQuery(); });
  element("min-caption-score").addEventListener("change", () => { if (shownQuery) shownQuery(); });
  const slider = element("threshold-slider"), threshold = element("threshold");
  slider.max = SLIDER_STEPS;
  slider.addEventListener("input", () => { threshold.value = sliderThreshold(Number(slider.value)).toFixed(3); });
  slider.addEventListener("change", regroup);
  threshold.addEventListener("input", () => {
    if (threshold.value.trim() !== "" && Number.isFinite(Number(threshold.value))) {
      slider.value = sliderPosition(Number(threshold.value));
    }
  });
  threshold.addEventListener("change", regroup);
  slider.value = sliderPosition(Number(threshold.value));
  try {
    const index = await ask("/api/index");
    takes = index.queries;
    unavailable = index.unavailable || {};
    element("description").textContent = index.rows + " rows of " + (index.model || "vectors") +
      (index.layer ? " " + index.layer : "") + ", " + index.kind + " index";
    element("text-form").hidden = !takes.text;
    element("image-label").hidden = !takes.image;
    element("captions-label").hidden = !takes.caption;
    element("min-caption-label").hidden = !index.caption_scores;
    element("unavailable").textContent = unavailableLine(unavailable);
    element("unavailable").hidden = !element("unavailable").textContent;
    element("k").max = index.limits.max_k;
    element("text").maxLength = index.limits.max_sentence;
  } catch (error) {
    showError(error.message);
    return;
  }
  document.body.dataset.ready = "true";
  regroup();
}

start();

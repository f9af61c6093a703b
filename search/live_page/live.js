// The page of the search service (search/api.py serves it at /): it asks the JSON API of the same origin and
// shows the answers. Every text from the API goes in by textContent, never as HTML: a key is shown as it is.
"use strict";

const GROUPS_SHOWN = 50;     // groups drawn at once (the API gives the first 1,000 and the count of all)
const MEMBERS_SHOWN = 24;    // tiles of one group
let takes = {};              // /api/index's "queries": which searches this index answers
let searchNumber = 0, groupsNumber = 0;  // only the latest answer is shown, whatever order answers come in

function element(id) { return document.getElementById(id); }

function showError(message) {
  const line = element("error");
  line.textContent = message ? message.split("\n")[0] : "";
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

function tile(item) {
  const figure = document.createElement("figure");
  figure.className = "result";
  figure.dataset.row = item.row;
  const button = document.createElement("button");
  button.type = "button";
  button.title = "search by this image";
  const image = document.createElement("img");
  image.src = imageUrl(item.row);
  image.alt = item.key;
  image.loading = "lazy";
  button.append(image);
  button.addEventListener("click", () => byRow(item.row, item.key));
  const caption = document.createElement("figcaption");
  if (item.score !== undefined) {
    const score = document.createElement("span");
    score.className = "score";
    score.textContent = item.score.toFixed(3);
    caption.append(score);
  }
  if (item.probability !== undefined) {  // the model's own score of a sentence and an image (SigLIP's)
    const probability = document.createElement("span");
    probability.className = "probability";
    probability.title = "the model's probability that the image and the sentence go together";
    probability.textContent = "p " + item.probability.toFixed(3);
    caption.append(probability);
  }
  const open = document.createElement("a");
  open.href = imageUrl(item.row);
  open.target = "_blank";
  open.rel = "noopener";
  open.textContent = "open";
  const key = document.createElement("span");
  key.className = "key";
  key.textContent = item.key;
  caption.append(open, key);
  figure.append(button, caption, ...keptLines(item.kept));
  return figure;
}

// The values the output kept beside the row (run_inference.py --keep), one line a name, as text.
function keptLines(kept) {
  return Object.entries(kept || {}).filter(([, value]) => value !== null).map(([name, value]) => {
    const line = document.createElement("div");
    line.className = "kept";
    line.dataset.name = name;
    line.title = value;
    const label = document.createElement("span");
    label.className = "name";
    label.textContent = name;
    const text = document.createElement("span");
    text.textContent = value;
    line.append(label, text);
    return line;
  });
}

async function search(path, title, body) {
  const number = ++searchNumber;
  showError("");
  element("results-title").textContent = "Searching: " + title;
  try {
    const answer = await ask(path, body);
    if (number !== searchNumber) return;
    element("results").replaceChildren(...answer.neighbours.map(tile));
    element("results-title").textContent = title + ": " + answer.neighbours.length + " results";
  } catch (error) {
    if (number !== searchNumber) return;
    element("results-title").textContent = "Results";
    element("results").replaceChildren();  // the last answer's results are not this query's
    showError(error.message);
  }
}

function byRow(row, key) {
  search("/api/neighbours?row=" + encodeURIComponent(row) + "&k=" + k(), "neighbours of " + key);
}

function byImage(file) {
  if (!takes.image) {
    showError("this service computes no image queries (no model given to serve)");
    return;
  }
  search("/api/search/image?k=" + k(), "the image " + file.name, file);
}

function bySentence(event) {
  event.preventDefault();
  const sentence = element("text").value;
  search("/api/search?text=" + encodeURIComponent(sentence) + "&k=" + k(), "\u201c" + sentence + "\u201d");
}

async function regroup() {
  const number = ++groupsNumber;
  const threshold = Number(element("threshold").value);
  element("threshold-value").textContent = threshold.toFixed(3);
  element("groups-count").textContent = "grouping\u2026";
  try {
    const answer = await ask("/api/duplicates?threshold=" + encodeURIComponent(element("threshold").value));
    if (number !== groupsNumber) return;
    const shown = answer.shown.slice(0, GROUPS_SHOWN);
    element("groups").replaceChildren(...shown.flatMap((group, place) => {
      const title = document.createElement("h3");
      title.textContent = "group " + (place + 1) + ": " + group.length + " images" +
        (group.length > MEMBERS_SHOWN ? " (first " + MEMBERS_SHOWN + " shown)" : "");
      const row = document.createElement("div");
      row.className = "row";
      row.append(...group.slice(0, MEMBERS_SHOWN).map(tile));
      return [title, row];
    }));
    element("groups-count").textContent = answer.groups + " groups (" + answer.pairs + " pairs) at " +
      answer.threshold.toFixed(3) + (answer.groups > shown.length ? ", the first " + shown.length + " shown" : "");
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
  element("threshold").addEventListener("input", () => {
    element("threshold-value").textContent = Number(element("threshold").value).toFixed(3);
  });
  element("threshold").addEventListener("change", regroup);
  try {
    const index = await ask("/api/index");
    takes = index.queries;
    element("description").textContent = index.rows + " rows of " + (index.model || "vectors") +
      (index.layer ? " " + index.layer : "") + ", " + index.kind + " index";
    element("text-form").hidden = !takes.text;
    element("image-label").hidden = !takes.image;
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

"use strict";
// A tile's scores besides its similarity, alike on the live page (served as /scores.js) and on the static
// one (search/page.py writes this file into its script): its row's caption score, and SigLIP's probability
// that the image and the sentence go together. Text goes in by textContent only.

// "p 0.731"; one under 0.001 in two significant digits ("p 1.2e-5": unrelated pairs are about 1e-5, and
// three decimals showed them all as "p 0.000").
function probabilityText(probability) {
  return "p " + (probability === 0 || probability >= 0.001 ? probability.toFixed(3) : probability.toExponential(1));
}

// [span]: "caption 0.312" (or "caption –": no caption, or one that failed) on an output with caption scores,
// then the probability where the item has one.
function scoreSpans(item) {
  const spans = [];
  if (item.caption_score !== undefined) {
    const captionScore = document.createElement("span");
    captionScore.className = "caption-score";
    captionScore.title = item.caption_score === null ? "no caption score: no caption, or one that failed" :
      "its caption score: the cosine of its caption and its image";
    captionScore.textContent = "caption " + (item.caption_score === null ? "\u2013" : item.caption_score.toFixed(3));
    spans.push(captionScore);
  }
  if (item.probability !== undefined) {
    const probability = document.createElement("span");
    probability.className = "probability";
    probability.title = "the model's probability that the image and the sentence go together";
    probability.textContent = probabilityText(item.probability);
    spans.push(probability);
  }
  return spans;
}

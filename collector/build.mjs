// Builds the served collector: node collector/build.mjs [--check]
// The output, fastapi/collector/collector.min.js, is committed and embedded in
// the binary, so neither the build nor the service needs npm packages.
// The "minifier" only drops comment lines, indentation and blank lines: the
// source keeps comments on lines of their own, so this never changes code.
// --check exits 1 when the committed output is stale.
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { dirname, join } from 'node:path';

const here = dirname(fileURLToPath(import.meta.url));
export const srcPath = join(here, 'src', 'collector.js');
export const outPath = join(here, '..', 'fastapi', 'collector', 'collector.min.js');
export const maxBytes = 20 * 1024;

export function build(src) {
  const lines = src.split('\n').map((l) => l.trim()).filter((l) => l !== '' && !l.startsWith('//'));
  return '/*! fraudd collector.js (schema 1) */\n' + lines.join('\n') + '\n';
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const out = build(readFileSync(srcPath, 'utf8'));
  if (Buffer.byteLength(out) > maxBytes) {
    console.error(`collector.min.js is ${Buffer.byteLength(out)} bytes, over ${maxBytes}`);
    process.exit(1);
  }
  if (process.argv.includes('--check')) {
    if (readFileSync(outPath, 'utf8') !== out) {
      console.error('fastapi/collector/collector.min.js is stale: run node collector/build.mjs');
      process.exit(1);
    }
  } else {
    writeFileSync(outPath, out);
  }
  console.log(`collector.min.js: ${Buffer.byteLength(out)} bytes`);
}

// Builds the operator console: node console/build.mjs [--check]
// Plain modern JavaScript, no npm packages: the sources in src/ are joined in
// a fixed order into one strict-mode function scope, and comment lines,
// indentation and blank lines are dropped (sources keep comments on lines of
// their own, so this never changes code). The output in fastapi/console/ is
// committed and embedded in the binary; --check exits 1 when it is stale,
// and both modes fail when the gzipped total is over budget.
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { dirname, join } from 'node:path';
import { gzipSync } from 'node:zlib';

const here = dirname(fileURLToPath(import.meta.url));
const src = join(here, 'src');
export const outDir = join(here, '..', 'fastapi', 'console');

// The order matters only for top-level constants used at load time.
export const scripts = ['dom.js', 'api.js', 'accounts.js', 'account.js', 'service.js', 'app.js'];

// maxGzip is the budget of all assets together, gzipped (issue 16).
export const maxGzip = 150 * 1024;

const strip = (text, isComment) => text.split('\n').map((l) => l.trim()).filter((l) => l !== '' && !isComment(l));

export function buildJS(read) {
  const body = scripts.flatMap((f) => strip(read(f), (l) => l.startsWith('//')));
  return '/*! fraudd console */\n(() => {\n\'use strict\';\n' + body.join('\n') + '\n})();\n';
}

export function buildCSS(text) {
  return strip(text.replace(/\/\*[\s\S]*?\*\//g, ''), () => false).join('\n') + '\n';
}

export function buildHTML(text) {
  return strip(text, () => false).join('\n') + '\n';
}

export function build(read = (f) => readFileSync(join(src, f), 'utf8')) {
  return {
    'index.html': buildHTML(read('index.html')),
    'console.js': buildJS(read),
    'console.css': buildCSS(read('console.css')),
  };
}

export function gzipTotal(out) {
  return Object.values(out).reduce((n, text) => n + gzipSync(Buffer.from(text), { level: 9 }).length, 0);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const out = build();
  const gz = gzipTotal(out);
  if (gz > maxGzip) {
    console.error(`console assets are ${gz} bytes gzipped, over the ${maxGzip}-byte budget`);
    process.exit(1);
  }
  if (process.argv.includes('--check')) {
    for (const [name, text] of Object.entries(out)) {
      let cur = '';
      try {
        cur = readFileSync(join(outDir, name), 'utf8');
      } catch (_) {
        // missing counts as stale
      }
      if (cur !== text) {
        console.error(`fastapi/console/${name} is stale: run node console/build.mjs`);
        process.exit(1);
      }
    }
  } else {
    for (const [name, text] of Object.entries(out)) writeFileSync(join(outDir, name), text);
  }
  const raw = Object.values(out).reduce((n, t) => n + Buffer.byteLength(t), 0);
  console.log(`console: ${raw} bytes, ${gz} bytes gzipped (budget ${maxGzip})`);
}

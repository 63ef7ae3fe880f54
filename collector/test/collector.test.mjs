// Unit tests of collector.js on a small DOM shim: node --test collector/
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import vm from 'node:vm';
import { build, srcPath, outPath, maxBytes } from '../build.mjs';

const code = readFileSync(outPath, 'utf8');

class El {
  constructor(tag) {
    this.tagName = tag.toUpperCase();
    this.attrs = {};
    this.children = [];
    this.nodeType = 1;
  }
  getAttribute(n) { return n in this.attrs ? this.attrs[n] : null; }
  setAttribute(n, v) { this.attrs[n] = String(v); }
  appendChild(c) { this.children.push(c); return c; }
}

class Form extends El {
  constructor(method = 'post') { super('form'); this.method = method; }
  get elements() { return this.children.filter((c) => c.tagName === 'INPUT'); }
}

function canvas() {
  const c = new El('canvas');
  c.getContext = (kind) => (kind === '2d' ? new Proxy({}, {
    get: (_, p) => (p === 'canvas' ? c : () => {}),
    set: () => true,
  }) : null);
  c.toDataURL = () => 'data:image/png;base64,AAAA';
  return c;
}

// env builds a window whose fetch answers like the service.
function env({ key = 'pk_live_test', forms = 2, fetchImpl, nav = {}, src = 'http://127.0.0.1:8080/collector.js', globals = {} } = {}) {
  const calls = [];
  const script = new El('script');
  script.src = src;
  if (key) script.setAttribute('data-key', key);
  const formEls = [];
  for (let i = 0; i < forms; i++) formEls.push(new Form());
  const document = {
    readyState: 'complete',
    currentScript: script,
    forms: formEls,
    documentElement: new El('html'),
    createElement: (t) => (t === 'canvas' ? canvas() : new El(t)),
    querySelector: () => script,
    getElementsByTagName: () => formEls,
    addEventListener() {},
  };
  const fetch = fetchImpl || (async (url, init) => {
    calls.push({ url, init, body: JSON.parse(init.body) });
    const out = url.endsWith('/v1/collect/network') ? { token: 'nt1.TOKEN', expires_in: 900 } : { event_id: 'ev_0123' };
    return { ok: true, json: async () => out };
  });
  const w = {
    document,
    navigator: { userAgent: 'Mozilla/5.0 (Windows NT 10.0; Win64; x64) Chrome/131.0.0.0 Safari/537.36', platform: 'Win32', languages: ['en-GB', 'en'], plugins: { length: 5 }, hardwareConcurrency: 8, webdriver: false, maxTouchPoints: 0 },
    screen: { width: 1920, height: 1080, colorDepth: 24 },
    location: { href: 'https://shop.example/checkout' },
    performance: { now: () => performance.now() },
    fetch,
    setTimeout,
    clearTimeout,
    URL,
    ...globals,
  };
  Object.defineProperties(w.navigator, Object.getOwnPropertyDescriptors(nav));
  w.window = w;
  const ctx = vm.createContext(w);
  vm.runInContext(code, ctx);
  return { w, calls, forms: formEls };
}

function inputs(form) {
  return Object.fromEntries(form.elements.map((e) => [e.name, e.value]));
}

test('a form sent with GET gets no inputs: the token would land in its URL', async () => {
  const { w, forms } = env({ forms: 1 });
  const get = new Form('get');
  const bare = new Form('');
  w.document.forms.push(get, bare);
  await w.FraudCollector.ready;
  assert.deepEqual(inputs(forms[0]).netcheck, 'nt1.TOKEN');
  assert.deepEqual(inputs(get), {});
  assert.deepEqual(inputs(bare), {}, 'a form without a method is sent with GET');
});

test('a later collect({key}) posts to the collector\'s own origin, whatever script is current', async () => {
  const { w, calls } = env();
  await w.FraudCollector.ready;
  const other = new El('script');
  other.src = 'https://cdn.thirdparty.example/bundle.js';
  w.document.currentScript = other;
  calls.length = 0;
  await w.FraudCollector.collect({ key: 'pk_live_test' });
  assert.ok(calls.length > 0 && calls.every((c) => c.url.startsWith('http://127.0.0.1:8080/')), JSON.stringify(calls.map((c) => c.url)));
});

test('collects, then puts the three hidden inputs into every form that posts', async () => {
  const { w, calls, forms } = env();
  forms[1].appendChild(Object.assign(new El('input'), { name: 'netcheck', value: 'stale' }));
  const r = await w.FraudCollector.ready;
  assert.equal(r.token, 'nt1.TOKEN');
  assert.equal(r.fingerprintEventId, 'ev_0123');
  assert.equal(typeof r.tz, 'string');
  for (const f of forms) {
    assert.deepEqual(inputs(f), { netcheck: 'nt1.TOKEN', service_fp: 'ev_0123', service_tz: r.tz });
    assert.ok(f.elements.every((e) => e.name !== 'netcheck' || e.type === 'hidden' || e.value === 'nt1.TOKEN'));
  }
  assert.equal(forms[1].elements.filter((e) => e.name === 'netcheck').length, 1, 'existing input reused');
  const net = calls.find((c) => c.url === 'http://127.0.0.1:8080/v1/collect/network');
  const dev = calls.find((c) => c.url === 'http://127.0.0.1:8080/v1/collect/device');
  assert.ok(net && dev);
  assert.equal(net.body.key, 'pk_live_test');
  assert.equal(net.body.webrtc.status, 'unsupported');
  assert.equal(net.init.headers['Content-Type'], 'text/plain', 'a simple request: no preflight');
  assert.equal(net.init.credentials, 'omit');
  assert.equal(dev.body.v, 1);
  assert.match(dev.body.ua, /Chrome\/131/);
  assert.deepEqual(dev.body.langs, ['en-GB', 'en']);
  assert.equal(dev.body.wd, false);
  assert.equal(dev.body.canvas.length, 2);
  assert.ok(Array.isArray(dev.body.lies));
  assert.ok(Array.isArray(dev.body.err));
});

test('never throws: hostile navigator, failing fetch', async () => {
  const nav = {};
  for (const p of ['userAgent', 'platform', 'languages', 'plugins', 'webdriver', 'hardwareConcurrency']) {
    Object.defineProperty(nav, p, { get() { throw new Error('blocked'); }, enumerable: true });
  }
  const { w, forms } = env({ nav, fetchImpl: async () => { throw new TypeError('network'); } });
  const r = await w.FraudCollector.ready;
  assert.deepEqual({ ...r, tz: null }, { token: null, fingerprintEventId: null, tz: null });
  assert.equal(inputs(forms[0]).netcheck, '');
  assert.equal(inputs(forms[0]).service_fp, '');
});

test('a service error answer resolves with nulls', async () => {
  const { w } = env({ fetchImpl: async () => ({ ok: false, json: async () => ({ error: 'x' }) }) });
  const r = await w.FraudCollector.ready;
  assert.equal(r.token, null);
  assert.equal(r.fingerprintEventId, null);
});

test('a hanging service resolves after the step timeout', async () => {
  const { w } = env({ fetchImpl: () => new Promise(() => {}) });
  const t0 = Date.now();
  const r = await w.FraudCollector.ready;
  assert.equal(r.token, null);
  assert.ok(Date.now() - t0 < 5000);
});

test('without data-key nothing is sent, the forms still get empty inputs', async () => {
  const { w, calls, forms } = env({ key: '' });
  const r = await w.FraudCollector.ready;
  assert.equal(r.token, null);
  assert.equal(calls.length, 0);
  assert.equal(inputs(forms[0]).netcheck, '');
});

test('collect() runs a fresh collection with another key and endpoint', async () => {
  const { w, calls, forms } = env();
  await w.FraudCollector.ready;
  const n = calls.length;
  const r = await w.FraudCollector.collect({ key: 'pk_live_other', endpoint: 'http://127.0.0.1:9999/' });
  assert.equal(r.token, 'nt1.TOKEN');
  const fresh = calls.slice(n);
  assert.equal(fresh.length, 2);
  assert.ok(fresh.every((c) => c.url.startsWith('http://127.0.0.1:9999/v1/') && c.body.key === 'pk_live_other'));
  assert.equal(inputs(forms[0]).service_fp, 'ev_0123');
});

test('a patched built-in is reported as a lie, a native one is not', async () => {
  const { w, calls } = env();
  await w.FraudCollector.ready;
  const first = calls.find((c) => c.url.endsWith('/device')).body;
  assert.ok(!first.lies.includes('Date.prototype.getTimezoneOffset'), JSON.stringify(first.lies));
  vm.runInContext('Date.prototype.getTimezoneOffset = function () { return 0; }', vm.createContext(w));
  await w.FraudCollector.collect({});
  const second = calls.filter((c) => c.url.endsWith('/device')).pop().body;
  assert.ok(second.lies.includes('Date.prototype.getTimezoneOffset'), JSON.stringify(second.lies));
});

// zone.js (Angular's change detection, loaded by every zone-based Angular
// app) replaces Function.prototype.toString with a plain function that keeps
// the browser's own as __zone_symbol__OriginalDelegate, so that patched
// functions still print as native. That page-level patch is no antidetect
// lie; an unmarked replacement, or a mark pointing at a non-native
// function, still is.
test('zone.js\'s Function.prototype.toString is not a lie, other replacements are', async () => {
  const zone = `(function () {
    var orig = Function.prototype.toString;
    var mark = '__zone_symbol__OriginalDelegate';
    var patched = function toString() {
      if (typeof this === 'function' && this[mark]) { return orig.apply(this[mark], arguments); }
      return orig.apply(this, arguments);
    };
    patched[mark] = orig;
    Function.prototype.toString = patched;
    window.Zone = function Zone() {};
  })();`;
  const lies = async (setup) => {
    const { w, calls } = env();
    await w.FraudCollector.ready;
    vm.runInContext(setup, vm.createContext(w));
    await w.FraudCollector.collect({});
    return calls.filter((c) => c.url.endsWith('/device')).pop().body.lies;
  };
  const withZone = await lies(zone);
  assert.ok(!withZone.includes('Function.prototype.toString'), JSON.stringify(withZone));
  const naive = await lies('Function.prototype.toString = function toString() { return "function () { [native code] }"; };');
  assert.ok(naive.includes('Function.prototype.toString'), JSON.stringify(naive));
  const forged = await lies(zone.replace('patched[mark] = orig;', 'patched[mark] = function () {};'));
  assert.ok(forged.includes('Function.prototype.toString'), JSON.stringify(forged));
});

// Driver globals are automation artefacts; a page's own global that only
// starts like one (a PWA helper's __pwaPrompt) is not.
test('automation artefacts: driver globals, not look-alikes', async () => {
  const { w, calls } = env({ globals: { __pwaPrompt: {}, __pwInitScripts: {}, __playwright__binding__: {} } });
  await w.FraudCollector.ready;
  const auto = calls.find((c) => c.url.endsWith('/device')).body.auto;
  assert.ok(auto.includes('__pwInitScripts') && auto.includes('__playwright__binding__'), JSON.stringify(auto));
  assert.ok(!auto.includes('__pwaPrompt'), JSON.stringify(auto));
});

// On an http page (not a secure context) a browser has no service workers
// in any mode: their absence is not reported as a private-browsing sign.
test('no service-worker reading outside a secure context', async () => {
  const secure = env({ globals: { isSecureContext: true } });
  await secure.w.FraudCollector.ready;
  assert.equal(secure.calls.find((c) => c.url.endsWith('/device')).body.sw, false);
  const plain = env({ globals: { isSecureContext: false } });
  await plain.w.FraudCollector.ready;
  assert.equal(plain.calls.find((c) => c.url.endsWith('/device')).body.sw, null);
});

// An offline audio context whose read-back throws (an extension blocking
// getChannelData): the collector still reports, and nothing escapes into the
// page as an unhandled rejection (COLLECTOR.md: it never throws into the page).
test('a failing audio read-back never escapes into the page', async () => {
  class BlockedAudio {
    constructor() { this.destination = {}; }
    createOscillator() { return { frequency: {}, connect() {}, start() {} }; }
    createDynamicsCompressor() { return { threshold: {}, knee: {}, ratio: {}, attack: {}, release: {}, connect() {} }; }
    startRendering() { return Promise.resolve({ getChannelData() { throw new Error('blocked'); } }); }
  }
  const escaped = [];
  const onRejection = (e) => escaped.push(e);
  process.on('unhandledRejection', onRejection);
  try {
    const { w, calls } = env({ globals: { OfflineAudioContext: BlockedAudio } });
    const r = await w.FraudCollector.ready;
    await new Promise((res) => setTimeout(res, 50));
    assert.equal(r.fingerprintEventId, 'ev_0123');
    assert.deepEqual(calls.find((c) => c.url.endsWith('/device')).body.audio, []);
  } finally {
    process.off('unhandledRejection', onRejection);
  }
  assert.deepEqual(escaped.map(String), []);
});

test('the committed build is current and under 20 KB', () => {
  const out = build(readFileSync(srcPath, 'utf8'));
  assert.equal(code, out, 'run node collector/build.mjs');
  assert.ok(Buffer.byteLength(out) < maxBytes, `${Buffer.byteLength(out)} bytes`);
});

// A timer that steps by `quantum` ms while each read takes 40 ns of its own
// virtual time: its first step comes after some 25,000 reads.
function steppedTimer(quantum) {
  let t = 0.01;
  return { now: () => { t += 0.00004; return Math.floor(t / quantum) * quantum; } };
}

// A Date whose now() stands still, so that the probe's 25 ms budget does not
// depend on how fast this machine runs the mock.
class StillDate extends Date {
  static now() { return 1764547200000; }
}

test('Firefox\'s ordinary 1 ms timer reads as 1 ms, not as a clamp, though 20,000 reads fit in one step', async () => {
  const { w, calls } = env({ globals: { performance: steppedTimer(1), Date: StillDate } });
  await w.FraudCollector.ready;
  const dev = calls.find((c) => c.url.endsWith('/v1/collect/device'));
  assert.equal(dev.body.timer, 1);
});

test('a timer clamped to 100 ms reads as clamped', async () => {
  const { w, calls } = env({ globals: { performance: steppedTimer(100) } });
  await w.FraudCollector.ready;
  const dev = calls.find((c) => c.url.endsWith('/v1/collect/device'));
  assert.equal(dev.body.timer, 100);
});

// fraudd browser collector (COLLECTOR.md). Plain ES2017, no dependencies.
// Include: <script src="{base_url}/collector.js" data-key="pk_live_..." async></script>
// It measures and reports; every verdict is decided by the service.
// It never throws into the page: each step is guarded, and on failure the
// promise resolves with what it has (a missing token means a degraded check).
// Build: node collector/build.mjs (strips comment lines and indentation).
// Source rule for that build: comments only on lines of their own.
(function (w) {
  'use strict';
  var d = w.document;
  var SCHEMA = 1;
  var NAMES = ['netcheck', 'service_fp', 'service_tz'];
  var STEP_MS = 1500;
  var nav = w.navigator || {};

  function safe(fn, dflt) {
    try {
      var v = fn();
      return v === undefined ? dflt : v;
    } catch (e) {
      return dflt;
    }
  }

  // within resolves with p's value, or dflt when p fails or takes longer than ms.
  function within(p, ms, dflt) {
    return new Promise(function (res) {
      var t = setTimeout(function () { res(dflt); }, ms);
      Promise.resolve(p).then(function (v) {
        clearTimeout(t);
        res(v === undefined ? dflt : v);
      }, function () {
        clearTimeout(t);
        res(dflt);
      });
    }).catch(function () { return dflt; });
  }

  // try a promise-returning step; a synchronous throw reads as dflt too.
  function step(fn, dflt) {
    var p;
    try {
      p = fn();
    } catch (e) {
      return Promise.resolve(dflt);
    }
    return within(p, STEP_MS, dflt);
  }

  function fnv(s) {
    var h = 0x811c9dc5;
    for (var i = 0; i < s.length; i++) {
      h ^= s.charCodeAt(i);
      h = Math.imul(h, 0x01000193) >>> 0;
    }
    return ('0000000' + h.toString(16)).slice(-8);
  }

  function scriptConfig() {
    var s = safe(function () {
      return d.currentScript || d.querySelector('script[data-key][src*="collector"]');
    }, null);
    var c = {key: '', endpoint: '', stun: ''};
    if (s) {
      c.key = safe(function () { return s.getAttribute('data-key') || ''; }, '');
      c.stun = safe(function () { return s.getAttribute('data-stun') || ''; }, '');
      c.endpoint = safe(function () { return new URL(s.src, w.location.href).origin; }, '');
    }
    return c;
  }

  function post(cfg, path, body) {
    return step(function () {
      body.key = cfg.key;
      // text/plain keeps this a simple CORS request: no preflight round trip.
      return w.fetch(cfg.endpoint + path, {
        method: 'POST', mode: 'cors', credentials: 'omit', cache: 'no-store',
        headers: {'Content-Type': 'text/plain'}, body: JSON.stringify(body)
      }).then(function (r) { return r.ok ? r.json() : null; });
    }, null);
  }

  // webrtc gathers ICE candidates and reports their IP literals (mDNS names
  // are skipped). With data-stun set, server-reflexive candidates show the
  // public address the browser's UDP traffic leaves from.
  function webrtc(stun) {
    var PC = w.RTCPeerConnection || w.webkitRTCPeerConnection;
    if (!PC) {
      return Promise.resolve({status: 'unsupported', addrs: []});
    }
    return new Promise(function (res) {
      var seen = {};
      var pc = null;
      var done = false;
      function fin(status) {
        if (done) {
          return;
        }
        done = true;
        safe(function () { pc.close(); });
        res({status: status, addrs: Object.keys(seen).slice(0, 8)});
      }
      function scan(line) {
        var parts = String(line || '').split(' ');
        var a = parts.length > 4 ? parts[4] : '';
        if (a && a.indexOf('.local') < 0 && /^[0-9a-fA-F:.]+$/.test(a)) {
          seen[a] = 1;
        }
      }
      try {
        pc = new PC({iceServers: stun ? [{urls: stun}] : []});
        pc.onicecandidate = function (e) {
          if (!e || !e.candidate) {
            fin('ok');
          } else {
            scan(e.candidate.candidate);
          }
        };
        pc.createDataChannel('fc');
        pc.createOffer().then(function (o) {
          return pc.setLocalDescription(o);
        }).catch(function () { fin('error'); });
        setTimeout(function () { fin('timeout'); }, STEP_MS);
      } catch (e) {
        fin('error');
      }
    });
  }

  function network(cfg) {
    return webrtc(cfg.stun).catch(function () {
      return {status: 'error', addrs: []};
    }).then(function (rtc) {
      return post(cfg, '/v1/collect/network', {v: SCHEMA, webrtc: rtc});
    }).then(function (r) {
      return r && typeof r.token === 'string' ? r.token : null;
    });
  }

  function drawCanvas() {
    var c = d.createElement('canvas');
    c.width = 240;
    c.height = 60;
    var x = c.getContext('2d');
    x.textBaseline = 'top';
    x.font = '14px Arial';
    x.fillStyle = '#f60';
    x.fillRect(100, 1, 62, 20);
    x.fillStyle = '#069';
    x.fillText('Cwm fjordbank glyphs vext quiz \u263a', 2, 15);
    x.fillStyle = 'rgba(102, 204, 0, 0.7)';
    x.fillText('Cwm fjordbank glyphs vext quiz \u263a', 4, 17);
    x.globalCompositeOperation = 'multiply';
    x.beginPath();
    x.arc(50, 30, 20, 0, Math.PI * 2, true);
    x.closePath();
    x.fillStyle = 'rgb(255,0,255)';
    x.fill();
    return fnv(c.toDataURL());
  }

  function renderAudio() {
    var AC = w.OfflineAudioContext || w.webkitOfflineAudioContext;
    if (!AC) {
      return Promise.resolve('');
    }
    return new Promise(function (res, rej) {
      var ctx = new AC(1, 5000, 44100);
      var osc = ctx.createOscillator();
      osc.type = 'triangle';
      osc.frequency.value = 10000;
      var comp = ctx.createDynamicsCompressor();
      comp.threshold.value = -50;
      comp.knee.value = 40;
      comp.ratio.value = 12;
      comp.attack.value = 0;
      comp.release.value = 0.25;
      osc.connect(comp);
      comp.connect(ctx.destination);
      osc.start(0);
      // read runs in an event handler or a then callback: a throw there
      // would escape into the page, so it rejects instead.
      function read(buf) {
        try {
          var data = buf.getChannelData(0);
          var sum = 0;
          for (var i = 4500; i < 5000; i++) {
            sum += Math.abs(data[i]);
          }
          res(String(sum));
        } catch (e) {
          rej(e);
        }
      }
      ctx.oncomplete = function (e) { read(e.renderedBuffer); };
      var p = ctx.startRendering();
      if (p && p.then) {
        p.then(read, rej);
      }
    });
  }

  var NATIVE = /\{\s*\[native code\]\s*\}\s*$/;

  // lies lists built-ins that are not what the browser shipped.
  function lies() {
    var out = [];
    var ts = Function.prototype.toString;
    function check(name, f, method) {
      if (typeof f !== 'function') {
        return;
      }
      var bad = safe(function () {
        return !NATIVE.test(ts.call(f)) || (method && Object.prototype.hasOwnProperty.call(f, 'prototype'));
      }, true);
      if (bad) {
        out.push(name);
      }
    }
    var methods = [
      ['Function.prototype', w.Function && Function.prototype, 'toString'],
      ['HTMLCanvasElement.prototype', w.HTMLCanvasElement && HTMLCanvasElement.prototype, 'toDataURL'],
      ['HTMLCanvasElement.prototype', w.HTMLCanvasElement && HTMLCanvasElement.prototype, 'getContext'],
      ['CanvasRenderingContext2D.prototype', w.CanvasRenderingContext2D && CanvasRenderingContext2D.prototype, 'getImageData'],
      ['CanvasRenderingContext2D.prototype', w.CanvasRenderingContext2D && CanvasRenderingContext2D.prototype, 'measureText'],
      ['WebGLRenderingContext.prototype', w.WebGLRenderingContext && WebGLRenderingContext.prototype, 'getParameter'],
      ['Date.prototype', Date.prototype, 'getTimezoneOffset'],
      ['Intl.DateTimeFormat.prototype', w.Intl && Intl.DateTimeFormat.prototype, 'resolvedOptions'],
      ['AudioBuffer.prototype', w.AudioBuffer && AudioBuffer.prototype, 'getChannelData'],
      ['Permissions.prototype', w.Permissions && Permissions.prototype, 'query'],
      ['Element.prototype', w.Element && Element.prototype, 'getClientRects']
    ];
    methods.forEach(function (m) {
      if (m[1]) {
        var f = safe(function () { return m[1][m[2]]; }, null);
        // zone.js (Angular) replaces Function.prototype.toString with a plain
        // function (it has a prototype) that keeps the browser's own as
        // __zone_symbol__OriginalDelegate: with zone.js loaded, the kept one
        // is checked. Any other replacement is still a lie.
        var zoned = m[2] === 'toString' && safe(function () { return typeof w.Zone === 'function' && f.__zone_symbol__OriginalDelegate; }, null);
        check(m[0] + '.' + m[2], typeof zoned === 'function' ? zoned : f, true);
      }
    });
    var NP = w.Navigator && Navigator.prototype;
    ['webdriver', 'userAgent', 'platform', 'languages', 'hardwareConcurrency', 'deviceMemory', 'plugins', 'vendor', 'maxTouchPoints'].forEach(function (p) {
      if (safe(function () { return Object.prototype.hasOwnProperty.call(nav, p); }, false)) {
        out.push('navigator.' + p);
        return;
      }
      var desc = NP && safe(function () { return Object.getOwnPropertyDescriptor(NP, p); }, null);
      if (desc && desc.get) {
        check('Navigator.prototype.' + p, desc.get, false);
      }
    });
    return out;
  }

  var AUTO = /^(\$?cdc_|\$wdc_|__webdriver|__selenium|__driver|__fxdriver|_Selenium_IDE|callPhantom|_phantom|__nightmare|domAutomation|__playwright|__pw[A-Z_]|__puppeteer|_WEBDRIVER_ELEM_CACHE|webdriver$)/;

  function artefacts() {
    var out = [];
    function scan(o) {
      safe(function () {
        Object.getOwnPropertyNames(o).forEach(function (k) {
          if (AUTO.test(k) && out.length < 8) {
            out.push(k);
          }
        });
      });
    }
    scan(w);
    scan(d);
    ['webdriver', 'selenium', 'driver'].forEach(function (a) {
      if (safe(function () { return d.documentElement.getAttribute(a) !== null; }, false)) {
        out.push('@' + a);
      }
    });
    return out;
  }

  function webgl() {
    var c = d.createElement('canvas');
    var g = c.getContext('webgl') || c.getContext('experimental-webgl');
    if (!g) {
      return null;
    }
    var ext = safe(function () { return g.getExtension('WEBGL_debug_renderer_info'); }, null);
    if (ext) {
      return {vendor: String(g.getParameter(ext.UNMASKED_VENDOR_WEBGL)), renderer: String(g.getParameter(ext.UNMASKED_RENDERER_WEBGL))};
    }
    return {vendor: String(g.getParameter(g.VENDOR)), renderer: String(g.getParameter(g.RENDERER)), masked: true};
  }

  // timerRes is the smallest step performance.now() is seen to take. 20,000
  // reads find Chromium's and Safari's fine steps; Firefox's ordinary 1 ms
  // one may not tick within them on a fast machine, which read as a clamp
  // (privacy mode), so the reads go on until two steps are seen, for up to
  // 25 ms of Date.now() or a million reads (resistFingerprinting clamps
  // Date.now() too). A timer that never ticks reads as clamped (100).
  function timerRes() {
    var p = w.performance;
    var best = 0;
    var ticks = 0;
    var last = p.now();
    var start = Date.now();
    for (var i = 0; i < 1000000; i++) {
      var now = p.now();
      if (now !== last) {
        var step = now - last;
        best = best === 0 ? step : Math.min(best, step);
        last = now;
        ticks++;
      }
      if (i >= 20000 && (ticks >= 2 || ((i & 1023) === 0 && Date.now() - start >= 25))) {
        break;
      }
    }
    return best === 0 ? 100 : Math.round(best * 1000) / 1000;
  }

  function idbProbe() {
    return new Promise(function (res) {
      var name = 'fc_probe';
      var r = w.indexedDB.open(name);
      r.onsuccess = function () {
        safe(function () { r.result.close(); w.indexedDB.deleteDatabase(name); });
        res('ok');
      };
      r.onerror = function (e) {
        safe(function () { e.preventDefault(); });
        res((r.error && r.error.name) || 'Error');
      };
    });
  }

  function signals() {
    var t0 = Date.now();
    var err = [];
    function get(name, fn, dflt) {
      try {
        var v = fn();
        return v === undefined ? dflt : v;
      } catch (e) {
        err.push(name);
        return dflt;
      }
    }
    var scr = w.screen || {};
    var s = {
      v: SCHEMA,
      ua: get('ua', function () { return String(nav.userAgent || ''); }, ''),
      platform: get('platform', function () { return String(nav.platform || ''); }, ''),
      vendor: get('vendor', function () { return String(nav.vendor || ''); }, ''),
      uad: get('uad', function () {
        var u = nav.userAgentData;
        return u ? {brands: (u.brands || []).map(function (b) { return {brand: b.brand, version: b.version}; }), mobile: !!u.mobile, platform: String(u.platform || '')} : null;
      }, null),
      langs: get('langs', function () { return nav.languages ? Array.prototype.slice.call(nav.languages, 0, 10).map(String) : null; }, null),
      wd: get('wd', function () { return typeof nav.webdriver === 'boolean' ? nav.webdriver : null; }, null),
      plugins: get('plugins', function () { return nav.plugins ? nav.plugins.length : -1; }, -1),
      hc: get('hc', function () { return nav.hardwareConcurrency || 0; }, 0),
      mem: get('mem', function () { return nav.deviceMemory || 0; }, 0),
      touch: get('touch', function () { return typeof nav.maxTouchPoints === 'number' ? nav.maxTouchPoints : -1; }, -1),
      screen: get('screen', function () { return [scr.width || 0, scr.height || 0, scr.colorDepth || 0, w.devicePixelRatio || 1]; }, []),
      win: get('win', function () { return [w.outerWidth | 0, w.outerHeight | 0, w.innerWidth | 0, w.innerHeight | 0]; }, []),
      tz: get('tz', function () { return Intl.DateTimeFormat().resolvedOptions().timeZone || ''; }, ''),
      tzo: get('tzo', function () { return new Date(2024, 0, 1).getTimezoneOffset(); }, 0),
      gl: get('gl', webgl, null),
      canvas: get('canvas', function () { return [drawCanvas(), drawCanvas()]; }, []),
      lies: get('lies', lies, null),
      auto: get('auto', artefacts, []),
      chrome: get('chrome', function () { return typeof w.chrome === 'object' && w.chrome !== null; }, null),
      np: get('np', function () { return w.Notification ? String(w.Notification.permission) : ''; }, ''),
      heap: get('heap', function () { return (w.performance.memory && w.performance.memory.jsHeapSizeLimit) || 0; }, 0),
      // Service workers exist only in secure contexts: on an http page
      // their absence says nothing of private browsing, so it is not sent.
      sw: get('sw', function () { return w.isSecureContext === false ? null : 'serviceWorker' in nav; }, null),
      brave: get('brave', function () { return !!(nav.brave && typeof nav.brave.isBrave === 'function'); }, false),
      timer: get('timer', timerRes, 0),
      pointer: get('pointer', function () {
        return w.matchMedia('(pointer: coarse)').matches ? 'coarse' : w.matchMedia('(pointer: fine)').matches ? 'fine' : 'none';
      }, ''),
      motion: get('motion', function () { return typeof w.DeviceMotionEvent === 'function'; }, null),
      err: err
    };
    var st = nav.storage;
    return Promise.all([
      step(function () { return nav.permissions.query({name: 'notifications'}).then(function (r) { return r.state; }); }, ''),
      step(function () { return st.estimate().then(function (e) { return e.quota || 0; }); }, 0),
      step(function () { return st.getDirectory().then(function () { return 'ok'; }, function (e) { return (e && e.name) || 'Error'; }); }, ''),
      step(idbProbe, ''),
      step(function () { return renderAudio().then(function (a) { return renderAudio().then(function (b) { return [a, b]; }); }); }, [])
    ]).then(function (r) {
      s.pq = r[0];
      s.quota = r[1];
      s.opfs = r[2];
      s.idb = r[3];
      s.audio = r[4];
      s.ms = Date.now() - t0;
      return s;
    });
  }

  function device(cfg) {
    return step(signals, null).then(function (s) {
      return s ? post(cfg, '/v1/collect/device', s) : null;
    }).then(function (r) {
      return r && typeof r.event_id === 'string' ? r.event_id : null;
    });
  }

  var last = {token: null, fingerprintEventId: null, tz: null};

  function fillForm(f) {
    var vals = [last.token, last.fingerprintEventId, last.tz];
    NAMES.forEach(function (n, i) {
      safe(function () {
        var el = null;
        for (var j = 0; j < f.elements.length; j++) {
          if (f.elements[j].name === n) {
            el = f.elements[j];
            break;
          }
        }
        if (!el) {
          el = d.createElement('input');
          el.type = 'hidden';
          el.name = n;
          f.appendChild(el);
        }
        el.value = vals[i] == null ? '' : String(vals[i]);
      });
    });
  }

  // posts: the form is sent with POST, the plain form post the inputs are
  // for. A GET form would put the token, which carries the visitor's
  // addresses, into its URL: the history, the logs, the Referer sent on.
  function posts(f) {
    return String(f.method || (f.getAttribute && f.getAttribute('method')) || 'get').toLowerCase() === 'post';
  }

  function fillAll() {
    safe(function () {
      var fs = d.forms || d.getElementsByTagName('form');
      for (var i = 0; i < fs.length; i++) {
        if (posts(fs[i])) {
          fillForm(fs[i]);
        }
      }
    });
  }

  function collect(opts) {
    // The collector's own script tag, read while it ran (cfg0): a later
    // call runs while some other script may be current, whose origin is not
    // the service's.
    var base = cfg0 || scriptConfig();
    opts = opts || {};
    var cfg = {key: opts.key || base.key, endpoint: String(opts.endpoint || base.endpoint).replace(/\/+$/, ''), stun: opts.stun || base.stun};
    var tz = safe(function () { return Intl.DateTimeFormat().resolvedOptions().timeZone || null; }, null);
    if (!cfg.key || !cfg.endpoint || typeof w.fetch !== 'function') {
      last = {token: null, fingerprintEventId: null, tz: tz};
      fillAll();
      return Promise.resolve({token: null, fingerprintEventId: null, tz: tz});
    }
    return Promise.all([
      network(cfg).catch(function () { return null; }),
      device(cfg).catch(function () { return null; })
    ]).then(function (r) {
      last = {token: r[0], fingerprintEventId: r[1], tz: tz};
      fillAll();
      return {token: r[0], fingerprintEventId: r[1], tz: tz};
    }).catch(function () {
      return {token: null, fingerprintEventId: null, tz: tz};
    });
  }

  // Forms added later (single-page apps) get the inputs of the last collection.
  function watch() {
    safe(function () {
      if (d.readyState === 'loading') {
        d.addEventListener('DOMContentLoaded', fillAll);
      }
      if (w.MutationObserver) {
        new w.MutationObserver(function (ms) {
          for (var i = 0; i < ms.length; i++) {
            for (var j = 0; j < ms[i].addedNodes.length; j++) {
              var n = ms[i].addedNodes[j];
              if (n.nodeType === 1 && (n.tagName === 'FORM' || (n.querySelector && n.querySelector('form')))) {
                return fillAll();
              }
            }
          }
        }).observe(d.documentElement, {childList: true, subtree: true});
      }
    });
  }

  var cfg0 = scriptConfig();
  var api = {
    version: SCHEMA,
    ready: null,
    collect: function (opts) {
      try {
        return collect(opts);
      } catch (e) {
        return Promise.resolve({token: null, fingerprintEventId: null, tz: null});
      }
    }
  };
  api.ready = api.collect({key: cfg0.key, endpoint: cfg0.endpoint, stun: cfg0.stun});
  watch();
  try {
    w.FraudCollector = api;
  } catch (e) {
    api = null;
  }
})(typeof window !== 'undefined' ? window : this);

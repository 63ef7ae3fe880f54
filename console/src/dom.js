// DOM helpers. Every value from the API reaches the page as text
// (textContent, attribute values), never as HTML: nothing is parsed.

// h builds an element: h('tag#id.class', {attr: v, onclick: fn}, ...children).
// Children are nodes, strings (text), arrays, or null/false (skipped).
function h(spec, attrs, ...children) {
  const m = /^([a-z0-9]+)(#[\w-]+)?((?:\.[\w-]+)*)$/.exec(spec);
  const el = document.createElement(m[1]);
  if (m[2]) el.id = m[2].slice(1);
  if (m[3]) el.className = m[3].slice(1).replace(/\./g, ' ');
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

const SVGNS = 'http://www.w3.org/2000/svg';

// s builds an SVG element.
function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVGNS, tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

function setAttrs(el, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.setAttribute('class', v);
    else if (k === 'value' && 'value' in el) el.value = v;
    else if (k === 'checked') el.checked = !!v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

// replace empties el and fills it with children.
function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

// announce shows a short message in the live status line.
function announce(msg) {
  const st = document.getElementById('status');
  st.textContent = msg;
}

// errorText renders an API error the way the API wrote it: error, then hint.
function errorText(err) {
  if (err && err.body && typeof err.body.error === 'string') {
    return err.body.hint ? err.body.error + ' ' + err.body.hint : err.body.error;
  }
  return String((err && err.message) || err);
}

// fmtTime shows an RFC 3339 time in UTC, to the second.
function fmtTime(iso) {
  if (!iso) return '—';
  return iso.replace('T', ' ').replace(/(\.\d+)?Z$/, ' UTC');
}

function fmtNum(n) {
  return n === null || n === undefined ? '—' : Number(n).toLocaleString('en-US');
}

// confirmAction asks before a destructive action; resolves true on Confirm.
// The native modal dialog traps focus and closes on Escape (a cancel).
function confirmAction(text, okLabel) {
  const dlg = document.getElementById('confirm');
  document.getElementById('confirm-text').textContent = text;
  const ok = document.getElementById('confirm-ok');
  const cancel = document.getElementById('confirm-cancel');
  ok.textContent = okLabel || 'Confirm';
  return new Promise((resolve) => {
    const done = (v) => {
      ok.removeEventListener('click', onOK);
      cancel.removeEventListener('click', onCancel);
      dlg.removeEventListener('close', onClose);
      if (dlg.open) dlg.close();
      resolve(v);
    };
    const onOK = () => done(true);
    const onCancel = () => done(false);
    // The close event comes a task after the dialog closed: one left over
    // from the question before (answered, then this one asked at once) finds
    // this one open, and is not an answer to it.
    const onClose = () => {
      if (!dlg.open) done(false);
    };
    ok.addEventListener('click', onOK);
    cancel.addEventListener('click', onCancel);
    dlg.addEventListener('close', onClose);
    dlg.showModal();
    cancel.focus();
  });
}

// copyButton copies value to the clipboard (with a selection fallback where
// the Clipboard API is unavailable).
function copyButton(value, label) {
  return h('button', {
    type: 'button',
    'aria-label': 'Copy ' + label,
    onclick: async (ev) => {
      const b = ev.currentTarget;
      try {
        await navigator.clipboard.writeText(value);
      } catch (_) {
        const code = b.parentElement.querySelector('code');
        const r = document.createRange();
        r.selectNodeContents(code);
        const sel = window.getSelection();
        sel.removeAllRanges();
        sel.addRange(r);
        document.execCommand('copy');
      }
      b.textContent = 'Copied';
      announce(label + ' copied.');
    },
  }, 'Copy');
}

// secretBox shows secrets once, each with a copy button.
function secretBox(title, items) {
  return h('div.secret', { role: 'region', 'aria-label': title },
    h('p', null, title + ' — shown once; copy it now.'),
    items.map(([label, value, id]) => h('div.row', null,
      h('span', null, label),
      h('code', { id: id, 'data-secret': label }, value),
      copyButton(value, label))));
}

// card is one section of a page.
function card(title, opts, ...children) {
  return h('section.card' + (opts && opts.wide ? '.wide' : ''), { 'aria-labelledby': opts.id + '-h', id: opts.id },
    h('h2#' + opts.id + '-h', null, title), children);
}

// errLine is a form's error line; set its textContent to show an error.
function errLine(id) {
  return h('p.error', { id: id, role: 'alert' });
}

// busy disables a button while fn runs. Disabling the focused button drops
// the keyboard focus on the body: it comes back to the button afterwards, or
// to the control with its id when fn redrew the card.
async function busy(btn, fn) {
  const had = document.activeElement === btn;
  btn.disabled = true;
  try {
    return await fn();
  } finally {
    btn.disabled = false;
    if (had && (!document.activeElement || document.activeElement === document.body)) {
      const now = btn.isConnected ? btn : btn.id && document.getElementById(btn.id);
      if (now) now.focus();
    }
  }
}

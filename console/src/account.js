// One account: plan and limits, usage, keys, access (suspension, allowlist,
// origins), rules, exception pins, webhook, the device-evidence beta, recent
// evaluations, its devices and the mail outbox. Every destructive action
// asks first.

const SIGNALS = ['vpn', 'proxy', 'tor', 'datacenter', 'anonymous', 'automation', 'antidetect', 'emulator',
  'virtual_machine', 'incognito', 'privacy_mode', 'ip_blocklisted', 'high_activity', 'multi_account',
  'disposable_email', 'timezone_mismatch'];
const ACTIONS = ['allow', 'review', 'block'];

function options(values, current) {
  return values.map((v) => h('option', { value: v, selected: v === current }, v));
}

function decisionBadge(d) {
  return h('span.badge.' + d, null, d);
}

function lines(text) {
  return text.split('\n').map((l) => l.trim()).filter((l) => l !== '');
}

// parseIPv4 reads a dotted quad into 4 bytes; null when it is not one.
function parseIPv4(s) {
  const parts = s.split('.');
  if (parts.length !== 4 || !parts.every((p) => /^(0|[1-9][0-9]{0,2})$/.test(p) && Number(p) <= 255)) return null;
  return parts.map(Number);
}

// parseIPv6 reads an IPv6 address (:: and a trailing dotted quad allowed,
// no zone) into 16 bytes; null when it is not one.
function parseIPv6(s) {
  const last = s.lastIndexOf(':');
  if (last < 0 || s.includes('%')) return null;
  if (s.slice(last + 1).includes('.')) {
    const v4 = parseIPv4(s.slice(last + 1));
    if (!v4) return null;
    s = s.slice(0, last + 1) + ((v4[0] << 8) | v4[1]).toString(16) + ':' + ((v4[2] << 8) | v4[3]).toString(16);
  }
  const halves = s.split('::');
  if (halves.length > 2) return null;
  const groups = (x) => (x === '' ? [] : x.split(':'));
  const head = groups(halves[0]);
  const tail = halves.length === 2 ? groups(halves[1]) : [];
  const fill = 8 - head.length - tail.length;
  if (halves.length === 1 ? fill !== 0 : fill < 1) return null;
  const all = [...head, ...Array(halves.length === 2 ? fill : 0).fill('0'), ...tail];
  if (!all.every((g) => /^[0-9a-fA-F]{1,4}$/.test(g))) return null;
  return all.flatMap((g) => [parseInt(g, 16) >> 8, parseInt(g, 16) & 255]);
}

// prefixKey is an allowlist entry as the API stores it, for comparing: an
// address is its /32 or /128, a mapped IPv4 address (or CIDR of /96 and
// more) its IPv4 form, host bits are masked, IPv6 is read whatever its
// spelling. What does not parse is compared as typed (the API refuses it).
function prefixKey(entry) {
  const text = entry.trim();
  const slash = text.indexOf('/');
  const addr = slash < 0 ? text : text.slice(0, slash);
  let bytes = addr.includes(':') ? parseIPv6(addr) : parseIPv4(addr);
  if (!bytes) return text;
  let bits = bytes.length * 8;
  if (slash >= 0) {
    const b = text.slice(slash + 1);
    if (!/^[0-9]{1,3}$/.test(b) || Number(b) > bits) return text;
    bits = Number(b);
  }
  const mapped = bytes.length === 16 && bytes.slice(0, 10).every((x) => x === 0) && bytes[10] === 255 && bytes[11] === 255;
  if (mapped && (slash < 0 || bits >= 96)) {
    bytes = bytes.slice(12);
    bits = slash < 0 ? 32 : bits - 96;
  }
  const masked = bytes.map((x, i) => (i * 8 >= bits ? 0 : i * 8 + 8 <= bits ? x : x & (0xff << (8 - (bits - i * 8))) & 0xff));
  return bytes.length + ':' + masked.join('.') + '/' + bits;
}

// originKey is an origin as a browser names it (lower case, punycode, no
// default port), as the API stores it; what does not parse, as typed.
function originKey(entry) {
  const text = entry.trim();
  try {
    const o = new URL(text).origin;
    return o === 'null' ? text : o;
  } catch (e) {
    return text;
  }
}

// kept counts the entries of stored that next still holds, both read by key.
function kept(stored, next, key) {
  const have = new Set(next.map(key));
  return stored.filter((x) => have.has(key(x))).length;
}

async function renderAccount(nav, id) {
  const [a, rules, pins] = await Promise.all([api('GET', acct(id)), api('GET', acct(id, '/rules')), api('GET', acct(id, '/exceptions'))]);
  const st = { id, a, rules, pins };
  const slots = {};
  // put draws a part; the focused control of the part it replaces keeps the
  // focus (the new part's control with the same id).
  const put = (name, el) => {
    if (slots[name]) {
      const f = document.activeElement;
      const id = f && slots[name].contains(f) ? f.id : '';
      slots[name].replaceWith(el);
      const again = id && document.getElementById(id);
      if (again) again.focus();
    }
    slots[name] = el;
    return el;
  };
  // show redraws the head and the named parts from the account a (a PATCH
  // answers the account: nothing needs re-reading after one).
  st.show = (a, ...names) => {
    st.a = a;
    put('head', accountHead(st));
    for (const n of names) put(n, SECTIONS[n](st, put));
  };
  // refresh re-reads the account and redraws the parts that show it.
  st.refresh = async (...names) => st.show(await api('GET', acct(id)), ...names);
  const grid = h('div.grid', null,
    put('plan', planCard(st, put)),
    put('keys', keysCard(st, put)),
    put('usage', usageCard(st)),
    put('access', accessCard(st, put)),
    put('beta', betaCard(st, put)),
    put('rules', rulesCard(st, put)),
    put('pins', pinsCard(st, put)),
    put('webhook', webhookCard(st, put)),
    put('evaluations', evaluationsCard(st)),
    put('devices', devicesCard(st)),
    put('mail', mailCard(st)));
  page(nav, a.email, put('head', accountHead(st)), grid);
}

function accountHead(st) {
  const a = st.a;
  return h('div.head', { id: 'account-head' },
    h('p.sub', null, h('span.mono', { id: 'account-id' }, a.id), ' · plan ', h('span.badge', { id: 'account-plan' }, a.plan),
      a.suspended ? h('span.badge.bad', { id: 'account-suspended' }, 'suspended') : null,
      ' · created ', fmtTime(a.created_at)),
    h('a', { href: '#/accounts' }, '← All accounts'));
}

function planCard(st, put) {
  const a = st.a;
  const plan = planSelect('plan', a.plan);
  const hourly = limitInput('hourly-limit', a.hourly_limit);
  const monthly = limitInput('monthly-limit', a.monthly_limit);
  const custom = h('div.row', { hidden: a.plan !== 'custom' }, h('label', null, 'Hourly limit', hourly), h('label', null, 'Monthly limit', monthly));
  plan.addEventListener('change', () => { custom.hidden = plan.value !== 'custom'; });
  const err = errLine('plan-error');
  const form = h('form', {
    onsubmit: async (ev) => {
      ev.preventDefault();
      err.textContent = '';
      // Only what the operator changed is sent: a plan or limit sent as
      // the page loaded it would silently put back what the CLI or
      // another tab changed since. A switch to custom sends both limits
      // (the boxes are what it starts from).
      const body = {};
      if (plan.value !== a.plan) body.plan = plan.value;
      if (plan.value === 'custom') {
        const hv = limitValue(hourly);
        const mv = limitValue(monthly);
        if (body.plan || hv !== (a.hourly_limit ?? null)) body.hourly_limit = hv;
        if (body.plan || mv !== (a.monthly_limit ?? null)) body.monthly_limit = mv;
      }
      try {
        const saved = await busy(form.querySelector('button'), () => api('PATCH', acct(st.id), body));
        announce('Plan saved.');
        st.show(saved, 'plan', 'usage');
      } catch (e) {
        err.textContent = errorText(e);
      }
    },
  },
  h('dl.kv', null,
    // The limits in force (the plan's, the custom ones or the grandfathered),
    // not only the custom figures a PATCH sets.
    h('dt', null, 'Hourly limit'), h('dd#limit-hourly', null, limitText(a.limits.hourly)),
    h('dt', null, 'Monthly limit'), h('dd#limit-monthly', null, limitText(a.limits.monthly)),
    a.limits.grandfathered_until ? h('dt', null, 'Grandfathered until') : null,
    a.limits.grandfathered_until ? h('dd', null, fmtTime(a.limits.grandfathered_until)) : null),
  h('div.row', null, h('label', null, 'Plan', plan), custom, h('button#save-plan', { type: 'submit' }, 'Save plan')),
  err);
  // The card is #plan-card: #plan is its select (ids are the page's, once each).
  return card('Plan and limits', { id: 'plan-card' }, form);
}

function limitText(n) {
  return n === null ? 'none' : fmtNum(n);
}

function keyLine(k) {
  return h('code', null, k.prefix + '…' + k.last4);
}

// keysCard shows the keys; secret is a new key to show once, note an error
// line's text.
function keysCard(st, put, secret, note) {
  const a = st.a;
  const err = errLine('keys-error');
  if (note) err.textContent = note;
  // act runs fn (the change); once it has answered, the new key it returns
  // is shown whatever happens next: a failed re-read of the account says so
  // and keeps the key on screen (retrying would rotate again).
  const act = (label, btnID, confirmText, done, fn) => h('button#' + btnID, {
    type: 'button',
    class: confirmText ? 'danger' : null,
    onclick: async (ev) => {
      const btn = ev.currentTarget;
      err.textContent = '';
      if (confirmText && !(await confirmAction(confirmText, label))) return;
      let shown;
      try {
        shown = await busy(btn, fn);
      } catch (e) {
        err.textContent = errorText(e);
        return;
      }
      announce(done + '.');
      let failed = '';
      try {
        await st.refresh();
      } catch (e) {
        failed = done + '; could not reload the account: ' + errorText(e);
      }
      put('keys', keysCard(st, put, shown, failed));
    },
  }, label);
  const prev = a.previous_live_key;
  return card('Keys', { id: 'keys' },
    h('dl.kv', null,
      h('dt', null, 'Live key'), h('dd#live-key', null, keyLine(a.live_key), ' created ', fmtTime(a.live_key.created_at)),
      prev ? [h('dt', null, 'Previous live key'), h('dd#previous-key', null, keyLine(prev), ' works until ', fmtTime(prev.valid_until))] : null,
      h('dt', null, 'Test key'), h('dd#test-key', null, keyLine(a.test_key), ' created ', fmtTime(a.test_key.created_at)),
      h('dt', null, 'Publishable key'), h('dd', null, h('code', null, a.publishable_key))),
    h('div.actions', null,
      act('Rotate live key', 'rotate-live', 'Issue a new live key? The current one keeps working for 24 hours (a second rotation ends that grace for the one before).', 'Live key rotated', async () => {
        const r = await api('POST', acct(st.id, '/keys/live/rotate'));
        return secretBox('New live key', [['Live key', r.live_key, 'secret-live']]);
      }),
      prev ? act('Revoke previous key', 'revoke-previous', 'Stop the previous live key now? Calls still using it get 401 at once.', 'Previous live key revoked', async () => {
        await api('POST', acct(st.id, '/keys/live/revoke-previous'));
        return null;
      }) : null,
      act('Rotate test key', 'rotate-test', 'Replace the test key? The current one stops working at once.', 'Test key rotated', async () => {
        const r = await api('POST', acct(st.id, '/keys/test/rotate'));
        return secretBox('New test key', [['Test key', r.test_key, 'secret-test']]);
      })),
    err, secret || null);
}

function usageFigure(label, used, limit, id) {
  const over = limit !== null && limit !== undefined && used >= limit;
  return h('div.fig', { id: id },
    h('div.note', null, label),
    h('div.n', null, fmtNum(used), limit === null || limit === undefined ? ' (no limit)' : ' / ' + fmtNum(limit)),
    limit ? h('progress', { max: String(limit), value: String(Math.min(used, limit)), class: over ? 'over' : null, 'aria-label': label }) : null);
}

function usageCard(st) {
  const body = h('div', null, h('p.note', null, 'Loading…'));
  const c = card('Usage', { id: 'usage', wide: true }, body);
  api('GET', acct(st.id, '/usage')).then((u) => {
    const figures = h('div.figs', null,
      usageFigure('Live key, this hour', u.live.used_this_hour, u.live.hourly_limit, 'usage-live-hour'),
      usageFigure('Test key, this hour', u.test.used_this_hour, u.test.hourly_limit, 'usage-test-hour'),
      usageFigure('Visitor checks this month', u.live.month_used, u.live.monthly_limit, 'usage-month'),
      usageFigure('Lookups this month', u.live.month_lookups_used, u.live.monthly_lookup_limit, 'usage-lookups'),
      h('div.fig', null, h('div.note', null, 'Lifetime evaluations'), h('div.n', null, fmtNum(u.live.total_evaluations))),
      h('div.fig', null, h('div.note', null, 'Refused (limit hits)'), h('div.n', null, fmtNum(u.live.limit_hits))));
    const rows = u.daily.slice().reverse().map((d) => h('tr', null,
      h('td', null, d.day), h('td.num', null, fmtNum(d.used)), h('td.num', null, fmtNum(d.lookups))));
    const table = h('table', null,
      h('thead', null, h('tr', null, h('th', { scope: 'col' }, 'Day'), h('th.num', { scope: 'col' }, 'Checks'), h('th.num', { scope: 'col' }, 'Lookups'))),
      h('tbody', null, rows));
    replace(body, figures,
      h('h3', null, 'Counted calls per day, last 30 days (UTC)'),
      dailyChart(u.daily),
      h('div.legend', null, h('span.l-used', null, 'visitor checks'), h('span.l-lookups', null, 'lookups')),
      h('details', null, h('summary', null, 'Daily figures'), h('div.scroll', null, table)),
      u.live.month_resets_at ? h('p.note', null, 'The month resets at ', fmtTime(u.live.month_resets_at), '.') : null);
  }).catch((e) => replace(body, h('p.error', null, errorText(e))));
  return c;
}

// dailyChart draws stacked bars (checks, lookups) per day.
function dailyChart(days) {
  const W = 10;
  const top = Math.max(1, ...days.map((d) => d.used + d.lookups));
  const bar = (x, y, hgt, cls, tip) => s('rect', { x, y, width: W - 2, height: Math.max(hgt, 0), class: cls }, s('title', null, tip));
  return s('svg', { class: 'chart', id: 'usage-chart', viewBox: '0 0 ' + days.length * W + ' 100', preserveAspectRatio: 'none', role: 'img', 'aria-label': 'Counted calls per day over the last 30 days; the daily figures are in the table below.' },
    s('line', { x1: 0, y1: 99.5, x2: days.length * W, y2: 99.5, class: 'axis' }),
    days.map((d, i) => {
      const hu = (d.used / top) * 96;
      const hl = (d.lookups / top) * 96;
      const tip = d.day + ': ' + d.used + ' checks, ' + d.lookups + ' lookups';
      return [bar(i * W + 1, 99 - hu, hu, 'used', tip), bar(i * W + 1, 99 - hu - hl, hl, 'lookups', tip)];
    }));
}

function accessCard(st, put) {
  const a = st.a;
  const allow = h('textarea#allowlist', { rows: 4, spellcheck: 'false', 'aria-describedby': 'allowlist-help' }, a.allowlist.join('\n'));
  const origins = h('textarea#origins', { rows: 3, spellcheck: 'false', 'aria-describedby': 'origins-help' }, a.origins.join('\n'));
  const err = errLine('access-error');
  const save = h('form', {
    onsubmit: async (ev) => {
      ev.preventDefault();
      err.textContent = '';
      const next = { allowlist: lines(allow.value), origins: lines(origins.value) };
      // Only a list the operator edited is sent: the other one, sent as
      // the page loaded it, would silently put back what the CLI or
      // another tab changed since (origins removed by an allowlist save
      // leave the publishable key usable on every website).
      const body = {};
      if (next.allowlist.join('\n') !== a.allowlist.join('\n')) body.allowlist = next.allowlist;
      if (next.origins.join('\n') !== a.origins.join('\n')) body.origins = next.origins;
      // Removing entries refuses their calls; a first entry refuses every
      // other address or origin, which were all allowed until then. An
      // entry typed in another form of a stored one (203.0.113.7 for
      // 203.0.113.7/32) is kept, as the API reads it.
      const asks = [];
      const removed = a.allowlist.length + a.origins.length - kept(a.allowlist, next.allowlist, prefixKey) - kept(a.origins, next.origins, originKey);
      if (removed > 0) asks.push('Remove ' + removed + ' allowlist or origin entr' + (removed === 1 ? 'y' : 'ies') + '? Calls from them may be refused at once.');
      if (a.allowlist.length === 0 && next.allowlist.length > 0) asks.push('Only these addresses may use the live key: its calls from every other address are refused at once.');
      if (a.origins.length === 0 && next.origins.length > 0) asks.push('Only these origins may use the publishable key: the collector on every other website is refused at once.');
      if (asks.length > 0 && !(await confirmAction(asks.join(' '), 'Save'))) return;
      try {
        const saved = await busy(save.querySelector('button[type=submit]'), () => api('PATCH', acct(st.id), body));
        announce('Allowlist and origins saved.');
        st.show(saved, 'access');
      } catch (e) {
        err.textContent = errorText(e);
      }
    },
  },
  h('label', null, 'IP allowlist (live key), one IP or CIDR a line; empty: any address', allow),
  h('p#allowlist-help.note', null, 'Applies to evaluate, lookup, MCP and token minting; the test key is exempt.'),
  h('label', null, 'Website origins (collector and device-evidence beta), one a line', origins),
  h('p#origins-help.note', null, 'Like https://shop.example. Empty: any origin may use the publishable key.'),
  h('div.actions', null, h('button#save-access', { type: 'submit' }, 'Save allowlist and origins')),
  err);
  const suspendErr = errLine('suspend-error');
  const suspend = h('button#suspend', {
    type: 'button',
    class: a.suspended ? null : 'danger',
    onclick: async (ev) => {
      const btn = ev.currentTarget;
      suspendErr.textContent = '';
      const to = !a.suspended;
      const q = to ? 'Suspend ' + a.email + '? Every call with its keys gets 403 until it is resumed.' : 'Resume ' + a.email + '? Its keys work again at once.';
      if (!(await confirmAction(q, to ? 'Suspend' : 'Resume'))) return;
      try {
        const saved = await busy(btn, () => api('PATCH', acct(st.id), { suspended: to }));
        announce(to ? 'Account suspended.' : 'Account resumed.');
        st.show(saved, 'access');
      } catch (e) {
        suspendErr.textContent = errorText(e);
      }
    },
  }, a.suspended ? 'Resume account' : 'Suspend account');
  return card('Access', { id: 'access' },
    h('p', null, 'State: ', a.suspended ? h('span.badge.bad', null, 'suspended') : h('span.badge.good', null, 'active')),
    h('div.actions', null, suspend), suspendErr, h('h3', null, 'Allowlist and origins'), save);
}

function betaCard(st, put) {
  const a = st.a;
  const box = h('input#beta', { type: 'checkbox', checked: a.device_evidence_beta });
  const err = errLine('beta-error');
  box.addEventListener('change', async () => {
    err.textContent = '';
    const to = box.checked;
    if (!to && !(await confirmAction('Turn the device-evidence beta off? This deletes the account\'s GPU samples, consistency hashes and challenges.', 'Turn off'))) {
      box.checked = true;
      return;
    }
    try {
      const saved = await busy(box, () => api('PATCH', acct(st.id), { device_evidence_beta: to }));
      announce('Device-evidence beta ' + (to ? 'on.' : 'off.'));
      st.show(saved, 'beta');
    } catch (e) {
      box.checked = !to;
      err.textContent = errorText(e);
    }
  });
  // The card is #beta-card: #beta is its checkbox.
  return card('Device-evidence beta', { id: 'beta-card' },
    h('label.check', null, box, 'Experimental GPU and browser-consistency evidence (SPEC 2.5, 2.6)'),
    h('p.note', null, 'Needs at least one website origin. Evidence never changes a score or blocks.'), err);
}

// editorCard edits a list that the API replaces as a whole (rules, pins):
// rows are drafts until Save; the API validates and its error text is shown.
function editorCard(o) {
  const list = h('ul.editor', { id: o.id + '-list' });
  const err = errLine(o.id + '-error');
  // empty says "None yet." exactly while the editor has no row.
  const empty = h('p.empty', { id: o.id + '-empty' }, 'None yet.');
  const showEmpty = () => { empty.hidden = list.children.length > 0; };
  const addRow = (item) => {
    // Removing the focused row would leave keyboard focus on the body: it
    // moves to the next row (the previous one for the last), or to Add.
    const remove = () => {
      const near = li.nextElementSibling || li.previousElementSibling;
      li.remove();
      showEmpty();
      (near ? near.querySelector('select, input') : form.querySelector('#add-' + o.noun.replace(/ /g, '-'))).focus();
    };
    const li = h('li', null, o.row(item), h('button', { type: 'button', 'aria-label': 'Remove this ' + o.noun, onclick: remove }, 'Remove'));
    list.append(li);
    showEmpty();
    return li;
  };
  o.items.forEach(addRow);
  const form = h('form', {
    onsubmit: async (ev) => {
      ev.preventDefault();
      err.textContent = '';
      const next = [...list.children].map((li) => o.read(li));
      const kept = o.items.filter((it) => next.some((n) => JSON.stringify(n) === JSON.stringify(it))).length;
      const removed = o.items.length - kept;
      if (removed > 0 && !(await confirmAction('Save and remove ' + removed + ' ' + o.noun + (removed === 1 ? '' : 's') + '?', 'Save'))) return;
      try {
        await busy(form.querySelector('button[type=submit]'), o.save.bind(null, next));
        announce(o.title + ' saved.');
      } catch (e) {
        err.textContent = errorText(e);
      }
    },
  },
  list,
  empty,
  h('div.actions', null,
    h('button', { type: 'button', id: 'add-' + o.noun.replace(/ /g, '-'), onclick: () => { const li = addRow(o.blank()); li.querySelector('select, input').focus(); } }, 'Add ' + o.noun),
    h('button.primary', { type: 'submit', id: 'save-' + o.id }, 'Save ' + o.title.toLowerCase())),
  err);
  return card(o.title, { id: o.id }, o.help ? h('p.note', null, o.help) : null, form);
}

function rulesCard(st, put) {
  return editorCard({
    id: 'rules', title: 'Rules', noun: 'rule', items: st.rules,
    help: 'When a signal fires, its rule sets the decision; the most severe matching rule wins. Exception pins outrank rules.',
    blank: () => ({ signal: SIGNALS.find((x) => !st.rules.some((r) => r.signal === x)) || 'vpn', action: 'block' }),
    row: (r) => [
      h('label', null, 'Signal', h('select', { 'data-field': 'signal' }, options(SIGNALS, r.signal))),
      h('label', null, 'Action', h('select', { 'data-field': 'action' }, options(ACTIONS, r.action)))],
    read: (li) => ({ signal: li.querySelector('[data-field=signal]').value, action: li.querySelector('[data-field=action]').value }),
    save: async (next) => {
      st.rules = await api('PUT', acct(st.id, '/rules'), next);
      put('rules', rulesCard(st, put));
    },
  });
}

function pinsCard(st, put) {
  return editorCard({
    id: 'pins', title: 'Exception pins', noun: 'pin', items: st.pins,
    help: 'A pin fixes the decision for one address, range or device (visitor id), whatever the signals and rules say.',
    blank: () => ({ ip: '', action: 'allow', label: '' }),
    row: (p) => {
      const kind = h('select', { 'data-field': 'kind' }, options(['ip', 'visitor_id'], p.visitor_id ? 'visitor_id' : 'ip'));
      return [
        h('label', null, 'Target', kind),
        h('label.grow', null, 'IP, CIDR or visitor id', h('input', { 'data-field': 'target', required: true, value: p.visitor_id || p.ip || '', spellcheck: 'false' })),
        h('label', null, 'Action', h('select', { 'data-field': 'action' }, options(ACTIONS, p.action))),
        h('label', null, 'Label', h('input', { 'data-field': 'label', value: p.label || '', maxlength: '100' }))];
    },
    read: (li) => {
      const p = {};
      p[li.querySelector('[data-field=kind]').value] = li.querySelector('[data-field=target]').value.trim();
      p.action = li.querySelector('[data-field=action]').value;
      const label = li.querySelector('[data-field=label]').value.trim();
      if (label) p.label = label;
      return p;
    },
    save: async (next) => {
      st.pins = await api('PUT', acct(st.id, '/exceptions'), next);
      put('pins', pinsCard(st, put));
    },
  });
}

function webhookCard(st, put, secret) {
  const a = st.a;
  const url = h('input#webhook-url', { type: 'url', value: a.webhook_url || '', placeholder: 'https://hooks.example/fraudd', spellcheck: 'false' });
  const err = errLine('webhook-error');
  const deliveries = h('div#deliveries.scroll', null, h('p.note', null, 'Loading…'));
  const loadDeliveries = async () => {
    const ds = await api('GET', acct(st.id, '/webhook/deliveries'));
    replace(deliveries, ds.length === 0 ? h('p.empty', null, 'No deliveries in the last 30 days.') : h('table', null,
      h('thead', null, h('tr', null, ['Attempted', 'Event', 'Attempt', 'Result', 'Event id'].map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', null, ds.map((d) => h('tr', { 'data-event-id': d.event_id, 'data-status': d.status },
        h('td', null, fmtTime(d.attempted_at)),
        h('td', null, d.event),
        h('td.num', null, d.attempt),
        h('td', null, h('span.badge.' + (d.status === 'delivered' ? 'good' : d.status === 'retrying' ? 'warn' : 'bad'), null, d.status),
          ' ', d.status_code !== null ? 'HTTP ' + d.status_code : '', d.error ? ' ' + d.error : ''),
        h('td.mono', null, d.event_id))))));
    return ds;
  };
  const run = (label, fn) => async (ev) => {
    err.textContent = '';
    try {
      await busy(ev.currentTarget, fn);
    } catch (e) {
      err.textContent = errorText(e);
    }
  };
  const form = h('form.row', {
    onsubmit: async (ev) => {
      ev.preventDefault();
      err.textContent = '';
      const v = url.value.trim();
      if (v === '' && a.webhook_url && !(await confirmAction('Remove the webhook URL? Threat alerts stop at once.', 'Remove'))) return;
      try {
        const saved = await busy(form.querySelector('button'), () => api('PUT', acct(st.id, '/webhook'), { url: v === '' ? null : v }));
        announce(v === '' ? 'Webhook removed.' : 'Webhook URL saved.');
        // The answer is the URL as stored: nothing needs re-reading.
        st.show(Object.assign({}, st.a, { webhook_url: saved.url }), 'webhook');
      } catch (e) {
        err.textContent = errorText(e);
      }
    },
  }, h('label.grow', null, 'Receiver URL (empty: none)', url), h('button#save-webhook', { type: 'submit' }, 'Save URL'));
  const c = card('Webhook', { id: 'webhook', wide: true },
    form,
    h('div.actions', null,
      h('button#webhook-test', {
        type: 'button',
        onclick: run('Send test', async () => {
          const r = await api('POST', acct(st.id, '/webhook/test'));
          announce('Test event ' + r.event_id + ' queued.');
          // Show its delivery as soon as it is logged (a few seconds at most).
          for (let i = 0; i < 24; i++) {
            const ds = await loadDeliveries();
            if (ds.some((d) => d.event_id === r.event_id && d.status !== 'retrying')) return;
            await new Promise((res) => setTimeout(res, 500));
          }
        }),
      }, 'Send test event'),
      h('button#rotate-webhook-secret.danger', {
        type: 'button',
        onclick: run('Rotate secret', async () => {
          if (!(await confirmAction('Replace the signing secret? Deliveries use the new one at once; receivers checking the old one reject them.', 'Rotate'))) return;
          const r = await api('POST', acct(st.id, '/webhook/secret/rotate'));
          put('webhook', webhookCard(st, put, secretBox('New webhook secret', [['Webhook secret', r.webhook_secret, 'secret-webhook']])));
        }),
      }, 'Rotate signing secret'),
      h('button#refresh-deliveries', { type: 'button', onclick: run('Refresh', loadDeliveries) }, 'Refresh deliveries')),
    err, secret || null,
    h('h3', null, 'Recent deliveries (25 most recent attempts)'), deliveries);
  loadDeliveries().catch((e) => replace(deliveries, h('p.error', null, errorText(e))));
  return c;
}

function evaluationsCard(st) {
  const body = h('div#evaluations-list.scroll', null, h('p.note', null, 'Loading…'));
  const err = errLine('evaluations-error');
  const load = async () => {
    const es = await api('GET', acct(st.id, '/evaluations?limit=200'));
    replace(body, es.length === 0 ? h('p.empty', null, 'No evaluations in the last 7 days.') : h('table', null,
      h('thead', null, h('tr', null, ['Time', 'Request id', 'Decision', 'Risk', 'Reasons', 'IP', 'Decided by'].map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', null, es.map((e) => h('tr', { 'data-request-id': e.request_id },
        h('td', null, fmtTime(e.at)),
        h('td.mono', null, e.request_id),
        h('td', null, decisionBadge(e.decision), e.test ? h('span.badge', null, 'test') : null),
        h('td.num', null, e.risk_score),
        h('td', null, e.reasons.length ? e.reasons.join(', ') : '—'),
        h('td.mono', null, e.ip, e.country ? ' (' + e.country + ')' : ''),
        h('td', null, policyText(e)))))));
  };
  const c = card('Recent evaluations', { id: 'evaluations', wide: true },
    h('p.note', null, 'The 200 most recent, none older than 7 days, newest first.'),
    refreshButton('refresh-evaluations', 'Evaluations', load, err),
    err, body);
  load().catch((e) => replace(body, h('p.error', null, errorText(e))));
  return c;
}

// refreshButton reloads a card's list with load, reporting a failure in err.
function refreshButton(id, what, load, err) {
  return h('div.actions', null, h('button#' + id, {
    type: 'button',
    onclick: async (ev) => {
      err.textContent = '';
      try {
        await busy(ev.currentTarget, load);
        announce(what + ' refreshed.');
      } catch (e) {
        err.textContent = errorText(e);
      }
    },
  }, 'Refresh'));
}

// policyText says what decided: the engine, a rule or a pin.
function policyText(e) {
  const changed = e.engine_decision !== e.decision ? ' (engine: ' + e.engine_decision + ')' : '';
  switch (e.decision_source) {
    case 'rules': return 'rule ' + (e.rule || e.rule_matched.join(', ')) + changed;
    case 'exception': return 'pin ' + (e.exception_matched || '') + changed;
    default: return 'engine';
  }
}

// devicesCard lists the devices seen on the account's website. What a
// device reports comes from visitors' browsers: like every value, it
// reaches the page as text.
function devicesCard(st) {
  const body = h('div#devices-list.scroll', null, h('p.note', null, 'Loading…'));
  const err = errLine('devices-error');
  const load = async () => {
    const ds = await api('GET', acct(st.id, '/devices'));
    replace(body, ds.length === 0 ? h('p.empty', null, 'No devices seen in the last 90 days.') : h('table', null,
      h('thead', null, h('tr', null, ['Visitor id', 'First seen', 'Last seen', 'Visits', 'Linked accounts'].map((c, i) => h(i < 3 ? 'th' : 'th.num', { scope: 'col' }, c)))),
      h('tbody', null, ds.map((d) => h('tr', { 'data-visitor-id': d.visitor_id },
        h('td.mono', null, d.visitor_id),
        h('td', null, fmtTime(d.first_seen)),
        h('td', null, fmtTime(d.last_seen)),
        h('td.num', null, fmtNum(d.visits)),
        h('td.num', null, fmtNum(d.linked_accounts)))))));
  };
  const c = card('Devices', { id: 'devices', wide: true },
    h('p.note', null, 'The 50 most recently seen in the last 90 days, newest first (device evidence sent with evaluations). Linked accounts: the distinct accountId values seen with the device.'),
    refreshButton('refresh-devices', 'Devices', load, err),
    err, body);
  load().catch((e) => replace(body, h('p.error', null, errorText(e))));
  return c;
}

function mailCard(st) {
  const body = h('div#mail-list.scroll', null, h('p.note', null, 'Loading…'));
  api('GET', '/admin/v1/mail?account=' + encodeURIComponent(st.id)).then((ms) => {
    replace(body, ms.length === 0 ? h('p.empty', null, 'No mail sent for this account.') : h('table', null,
      h('thead', null, h('tr', null, ['Time', 'Kind', 'To', 'Subject', 'Status'].map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', null, ms.map((m) => h('tr', null,
        h('td', null, fmtTime(m.at)), h('td', null, m.kind), h('td', null, m.to),
        h('td', null, h('details', null, h('summary', null, m.subject), h('pre', null, m.body))),
        h('td', null, m.status, m.error ? ': ' + m.error : ''))))));
  }).catch((e) => replace(body, h('p.error', null, errorText(e))));
  return card('Mail outbox', { id: 'mail', wide: true }, h('p.note', null, 'Usage warnings and webhook failure notices sent (or tried) for this account: the 200 most recent, newest first.'), body);
}

const SECTIONS = { plan: planCard, keys: keysCard, usage: usageCard, access: accessCard, beta: betaCard, rules: rulesCard, pins: pinsCard, webhook: webhookCard, evaluations: evaluationsCard, devices: devicesCard, mail: mailCard };

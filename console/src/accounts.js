// Accounts: search by email or id, create, open.

const PLANS = ['free', 'starter', 'growth', 'scale', 'custom', 'public_interest'];

function planSelect(id, current) {
  return h('select#' + id, null, PLANS.map((p) => h('option', { value: p, selected: p === current }, p)));
}

// limitInput is an hourly or monthly limit of the custom plan: a whole
// number, or empty for none (null).
function limitInput(id, value) {
  return h('input#' + id, { type: 'number', min: '0', step: '1', inputmode: 'numeric', placeholder: 'no limit', value: value === null || value === undefined ? '' : String(value) });
}

function limitValue(input) {
  return input.value.trim() === '' ? null : Number(input.value);
}

async function renderAccounts(nav) {
  const q = h('input#search.grow', { type: 'search', placeholder: 'email or acc_…', 'aria-label': 'Search accounts by email or id' });
  const results = h('div#account-list.scroll', { 'aria-live': 'polite' });
  const count = h('p#account-count.note');
  let seq = 0;
  const load = async () => {
    const mine = ++seq;
    const path = '/admin/v1/accounts?limit=200' + (q.value.trim() ? '&q=' + encodeURIComponent(q.value.trim()) : '');
    const list = await api('GET', path);
    if (mine !== seq) return;
    count.textContent = list.length === 0 ? 'No accounts match.' : list.length + (list.length === 200 ? '+' : '') + ' account' + (list.length === 1 ? '' : 's');
    replace(results, list.length === 0 ? null : h('table', null,
      h('thead', null, h('tr', null, ['Email', 'Id', 'Plan', 'State', 'Created'].map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', null, list.map((a) => h('tr', null,
        h('td', null, h('a', { href: '#/accounts/' + encodeURIComponent(a.id) }, a.email)),
        h('td.mono', null, a.id),
        h('td', null, a.plan),
        h('td', null, a.suspended ? h('span.badge.bad', null, 'suspended') : 'active'),
        h('td', null, fmtTime(a.created_at)))))));
  };
  let timer;
  q.addEventListener('input', () => {
    clearTimeout(timer);
    timer = setTimeout(() => load().catch((e) => { count.textContent = errorText(e); }), 200);
  });

  // Plain text: type=email refuses addresses the API accepts (jörg@…);
  // the API checks the address and the page shows its error text.
  const email = h('input#new-email', { type: 'text', inputmode: 'email', autocomplete: 'off', autocapitalize: 'off', spellcheck: 'false' });
  const plan = planSelect('new-plan', 'free');
  const hourly = limitInput('new-hourly', null);
  const monthly = limitInput('new-monthly', null);
  const custom = h('div.row', { hidden: true }, h('label', null, 'Hourly limit', hourly), h('label', null, 'Monthly limit', monthly));
  plan.addEventListener('change', () => { custom.hidden = plan.value !== 'custom'; });
  const err = errLine('create-error');
  const created = h('div#created');
  const form = h('form.row', {
    onsubmit: async (ev) => {
      ev.preventDefault();
      err.textContent = '';
      const body = { email: email.value.trim(), plan: plan.value };
      if (plan.value === 'custom') {
        body.hourly_limit = limitValue(hourly);
        body.monthly_limit = limitValue(monthly);
      }
      try {
        const a = await busy(form.querySelector('button'), () => api('POST', '/admin/v1/accounts', body));
        email.value = '';
        replace(created, secretBox('Secrets of ' + a.email, [
          ['Live key', a.live_key, 'secret-live'],
          ['Test key', a.test_key, 'secret-test'],
          ['Publishable key', a.publishable_key, 'secret-publishable'],
          ['Webhook secret', a.webhook_secret, 'secret-webhook'],
        ]), h('div.actions', null, h('a#open-created', { href: '#/accounts/' + encodeURIComponent(a.id) }, 'Open ' + a.email)));
        announce('Account ' + a.id + ' created.');
        await load();
      } catch (e) {
        err.textContent = errorText(e);
      }
    },
  },
  h('label.grow', null, 'Email', email),
  h('label', null, 'Plan', plan),
  custom,
  h('button#create-account.primary', { type: 'submit' }, 'Create account'));

  if (!page(nav, 'Accounts',
    h('div.grid', null,
      card('Find an account', { id: 'find', wide: true }, h('div.row', null, q), count, results),
      card('Create an account', { id: 'create', wide: true }, form, err, created)))) return;
  await load();
}

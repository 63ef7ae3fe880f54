// The shell: sign-in, navigation and the hash router (#/accounts,
// #/accounts/{id}, #/service). Routes live in the fragment, which never
// reaches the server.

const main = () => document.getElementById('main');

// navigation counts the pages asked for: a page whose answers arrive after
// the next one was asked for is not drawn (a slow answer for the account
// opened first must not replace the one the URL names now).
let navigation = 0;

function showSignIn(msg) {
  navigation++;
  document.getElementById('nav').hidden = true;
  const input = h('input#signin-token', { type: 'password', autocomplete: 'off', required: true, 'aria-describedby': 'signin-help' });
  const err = errLine('signin-error');
  if (msg) err.textContent = msg;
  const form = h('form.card.signin', {
    'aria-labelledby': 'signin-h',
    onsubmit: async (ev) => {
      ev.preventDefault();
      const btn = form.querySelector('button');
      setToken(input.value.trim());
      err.textContent = '';
      try {
        await busy(btn, () => api('GET', '/admin/v1/accounts?limit=1'));
      } catch (e) {
        setToken('');
        err.textContent = errorText(e);
        input.focus();
        return;
      }
      input.value = '';
      if (!location.hash || location.hash === '#/signin') location.hash = '#/accounts';
      route();
    },
  },
  h('h1#signin-h', null, 'Sign in'),
  h('label', null, 'Operator token', input),
  h('p#signin-help.note', null, 'The token from --admin-token, FRAUDD_ADMIN_TOKEN or <data dir>/admin-token. It is kept in this tab only (sessionStorage) and sent as a bearer header.'),
  h('div.actions', null, h('button.primary', { type: 'submit' }, 'Sign in')),
  err);
  replace(main(), form);
  input.focus();
}

// route renders the page the fragment names.
async function route() {
  const nav = ++navigation;
  if (!token()) {
    showSignIn();
    return;
  }
  document.getElementById('nav').hidden = false;
  const parts = location.hash.replace(/^#\/?/, '').split('/').map(decodeURIComponent);
  for (const a of document.querySelectorAll('#nav a')) a.removeAttribute('aria-current');
  announce('');
  try {
    if (parts[0] === 'accounts' && parts[1]) {
      document.getElementById('nav-accounts').setAttribute('aria-current', 'page');
      await renderAccount(nav, parts[1]);
    } else if (parts[0] === 'service') {
      document.getElementById('nav-service').setAttribute('aria-current', 'page');
      await renderService(nav);
    } else {
      document.getElementById('nav-accounts').setAttribute('aria-current', 'page');
      await renderAccounts(nav);
    }
  } catch (e) {
    if (nav !== navigation || (e instanceof APIError && e.status === 401)) return;
    replace(main(), h('div.card', { role: 'alert' }, h('h1', null, 'Could not load this page'), h('p.error', null, errorText(e))));
  }
}

// page replaces the content and moves focus to its heading, so keyboard and
// screen-reader users land on the new page; it draws nothing, and answers
// false, when navigation nav is no longer the current one.
function page(nav, title, ...children) {
  if (nav !== navigation) return false;
  const h1 = h('h1', { tabindex: '-1' }, title);
  replace(main(), h1, children);
  h1.focus();
  document.title = title + ' · fraudd console';
  return true;
}

document.addEventListener('DOMContentLoaded', () => {
  document.getElementById('signout').addEventListener('click', () => {
    setToken('');
    location.hash = '#/signin';
    showSignIn('Signed out.');
  });
  window.addEventListener('hashchange', route);
  route();
});

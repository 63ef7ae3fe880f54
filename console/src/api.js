// The admin API client. The operator token lives in sessionStorage only: it
// is sent in the Authorization header, never in a URL, and no cookie is set.

const TOKEN_KEY = 'fraudd.console.token';

function token() {
  return sessionStorage.getItem(TOKEN_KEY) || '';
}

function setToken(t) {
  if (t) sessionStorage.setItem(TOKEN_KEY, t);
  else sessionStorage.removeItem(TOKEN_KEY);
}

class APIError extends Error {
  constructor(status, body) {
    super((body && body.error) || 'HTTP ' + status);
    this.status = status;
    this.body = body;
  }
}

// api calls the admin API (or a public read-only page) and returns the
// decoded body; a non-2xx answer throws APIError with the API's own text.
// A 401 signs out: the token is wrong or was changed on the server.
async function api(method, path, body) {
  const init = { method, headers: { Authorization: 'Bearer ' + token() }, cache: 'no-store', credentials: 'omit' };
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(path, init);
  } catch (e) {
    throw new APIError(0, { error: 'The service did not answer (' + e.message + ').' });
  }
  let data = null;
  const text = await res.text();
  if (text) {
    try {
      data = JSON.parse(text);
    } catch (_) {
      data = { error: text.slice(0, 200) };
    }
  }
  if (res.status === 401 && path.startsWith('/admin/')) {
    setToken('');
    showSignIn('The operator token was not accepted. Sign in again.');
    throw new APIError(401, data);
  }
  // A lockout answers "try again later"; its Retry-After says how long.
  const wait = Number(res.headers.get('Retry-After'));
  if (res.status === 429 && wait > 0 && data && typeof data.error === 'string' && !data.hint) {
    const n = wait >= 60 ? Math.ceil(wait / 60) : wait;
    data.hint = 'Retry in ' + n + (wait >= 60 ? ' minute' : ' second') + (n === 1 ? '' : 's') + '.';
  }
  if (!res.ok) throw new APIError(res.status, data);
  return data;
}

// acct is the path of an account's admin resource.
function acct(id, rest) {
  return '/admin/v1/accounts/' + encodeURIComponent(id) + (rest || '');
}

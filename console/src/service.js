// Service: status and uptime history, the threat feed, and each
// intelligence feed's freshness.

// staleDays is the age from which a feed snapshot is flagged.
const staleDays = 14;

async function renderService(nav) {
  const [st, feed, feeds] = await Promise.all([api('GET', '/api/status'), api('GET', '/api/threat-feed'), api('GET', '/admin/v1/feeds')]);
  const up = st.uptime;
  const services = Object.entries(st.services);
  page(nav, 'Service',
    h('div.grid', null,
      card('Status', { id: 'svc-status' },
        h('p', null, h('span.badge.' + (st.status === 'operational' ? 'good' : 'bad'), { id: 'svc-overall' }, st.status), ' version ', h('code', null, st.version)),
        h('dl.kv', null,
          h('dt', null, 'Up for'), h('dd', null, up.days + ' d ' + up.hours + ' h ' + up.minutes + ' min'),
          h('dt', null, 'Started'), h('dd', null, fmtTime(up.started)),
          h('dt', null, 'Last probe'), h('dd', null, fmtTime(st.last_probe))),
        h('div.scroll', null, h('table', null,
          h('thead', null, h('tr', null, h('th', { scope: 'col' }, 'Part'), h('th', { scope: 'col' }, 'State'), h('th.num', { scope: 'col' }, 'Uptime, 90 days'))),
          h('tbody', null, services.map(([name, sv]) => h('tr', null,
            h('td', null, name),
            h('td', null, h('span.badge.' + (sv.status === 'operational' ? 'good' : 'bad'), null, sv.status)),
            h('td.num', null, sv.uptime_pct.toFixed(3) + ' %'))))))),
      card('Threat feed', { id: 'svc-feed' },
        h('div.figs', null,
          h('div.fig', null, h('div.note', null, 'Checks, last 24 h'), h('div.n', null, fmtNum(feed.today.total))),
          h('div.fig', null, h('div.note', null, 'Threats, last 24 h'), h('div.n', null, fmtNum(feed.today.threats))),
          h('div.fig', null, h('div.note', null, 'Checks, last 7 days'), h('div.n', null, fmtNum(feed.week_total))),
          h('div.fig', null, h('div.note', null, 'Threats, last 7 days'), h('div.n', null, fmtNum(feed.week.threats)))),
        h('dl.kv', null,
          h('dt', null, 'VPN / proxy / datacenter today'), h('dd', null, fmtNum(feed.today.vpn) + ' / ' + fmtNum(feed.today.proxy) + ' / ' + fmtNum(feed.today.dch)),
          h('dt', null, 'Coverage'), h('dd', null, fmtNum(feed.coverage.tor_exits) + ' Tor exits, ' + fmtNum(feed.coverage.dch_ranges) + ' datacenter ranges, ' +
            fmtNum(feed.coverage.cloud_providers) + ' cloud providers, ' + fmtNum(feed.coverage.disposable_domains) + ' disposable domains'))),
      card('Uptime history', { id: 'svc-history', wide: true },
        st.history_90d && st.history_90d.length ? [uptimeChart(st.history_90d),
          h('p.note', null, 'One bar a day, oldest first: the share of probes that passed. Grey: no probe ran.')] : h('p.empty', null, 'No history yet.')),
      feedsCard(feeds)));
}

function feedsCard(feeds) {
  const head = ['Feed', 'Snapshot', 'Age', 'Entries', 'Loaded from'].map((c, i) => h(i === 2 || i === 3 ? 'th.num' : 'th', { scope: 'col' }, c));
  const rows = feeds.map((f) => h('tr', { 'data-feed': f.name },
    h('td', null, f.name),
    h('td', null, f.date || '—'),
    h('td', { class: f.age_days !== null && f.age_days >= staleDays ? 'num stale' : 'num' }, f.age_days === null ? '—' : f.age_days + ' d'),
    h('td.num', null, f.entries === 0 ? h('span.stale', null, 'not loaded') : fmtNum(f.entries)),
    h('td', null, f.source)));
  return card('Feed freshness', { id: 'svc-feeds', wide: true },
    h('div.scroll', null, h('table', null, h('thead', null, h('tr', null, head)), h('tbody', null, rows))),
    h('p.note', null, 'Ages of ' + staleDays + ' days or more are flagged; fraudd feeds update or --feeds-refresh fetch fresh copies.'));
}

function uptimeChart(days) {
  const W = 10;
  return s('svg', { class: 'chart', id: 'uptime-chart', viewBox: '0 0 ' + days.length * W + ' 100', preserveAspectRatio: 'none', role: 'img', 'aria-label': 'Daily uptime over the last ' + days.length + ' days' },
    days.map((d, i) => {
      const pct = d.pct;
      const hgt = pct === null ? 96 : Math.max(4, (pct / 100) * 96);
      const cls = pct === null ? 'none' : pct >= 99.9 ? 'up' : 'down';
      return s('rect', { x: i * W + 1, y: 99 - hgt, width: W - 2, height: hgt, class: cls },
        s('title', null, d.day + ': ' + (pct === null ? 'no probes' : pct.toFixed(2) + ' % of ' + d.samples + ' probes')));
    }));
}

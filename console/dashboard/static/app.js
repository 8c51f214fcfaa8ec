// Sluice dashboard: polls the console's admin API (docs/admin.md) and
// draws what it answers. Plain DOM, no framework, no build step.
//
// Every value from the API reaches the page as text (textContent, attribute
// values set one by one), never as markup: job ids, errors and DLQ payloads
// are whatever a client or a failing handler wrote. The page's CSP forbids
// inline script too, so a slip would still not run.
'use strict';

(function () {
  const API = '/api/v1';
  const POLL_MS = 2000;
  // /groups scans every partition's group keys, and the Kafka DLQ read goes
  // to the brokers: docs/admin.md asks for a few seconds between such reads.
  const GROUPS_EVERY = 2; // polls
  const DLQ_EVERY = 2;
  // /stats (the funnel, with Kafka's lag) only serves the topic list and the
  // problems line here.
  const STATS_EVERY = 5;
  const SPARK_POINTS = 60; // two minutes of polls
  const TOKEN_KEY = 'sluice.admin.token';
  const REQUEST_TIMEOUT_MS = 8000;

  // ---------------------------------------------------------------- helpers

  const $ = (sel) => document.querySelector(sel);

  // el builds an element; strings among the children become text nodes.
  function el(tag, props, ...children) {
    const e = document.createElement(tag);
    if (props) {
      for (const [k, v] of Object.entries(props)) {
        if (v === undefined || v === null || v === false) continue;
        if (k === 'class') e.className = v;
        else if (k === 'text') e.textContent = v;
        else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
        else e.setAttribute(k, v === true ? '' : String(v));
      }
    }
    for (const c of children) {
      if (c === null || c === undefined) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  const nf = new Intl.NumberFormat('en-US');
  const nf1 = new Intl.NumberFormat('en-US', { maximumFractionDigits: 1 });
  function num(v) {
    if (v === null || v === undefined || Number.isNaN(v)) return '—';
    return Number.isInteger(v) ? nf.format(v) : nf1.format(v);
  }
  function rateText(v) {
    if (v === null || v === undefined) return '—';
    if (v > 0 && v < 0.1) return '<0.1';
    return nf1.format(v);
  }
  function clock(iso) {
    if (!iso) return '—';
    const d = new Date(iso);
    if (Number.isNaN(d.getTime())) return String(iso);
    return d.toLocaleTimeString('en-GB', { hour12: false });
  }
  function dateTime(iso) {
    if (!iso) return '';
    const d = new Date(iso);
    return Number.isNaN(d.getTime()) ? String(iso) : d.toISOString();
  }
  function duration(sec) {
    if (sec === null || sec === undefined || !Number.isFinite(sec)) return '—';
    if (sec < 1) return Math.round(sec * 1000) + ' ms';
    if (sec < 90) return nf1.format(sec) + ' s';
    if (sec < 5400) return Math.round(sec / 60) + ' min';
    if (sec < 172800) return nf1.format(sec / 3600) + ' h';
    return nf1.format(sec / 86400) + ' d';
  }
  function ago(iso, now) {
    if (!iso) return '—';
    const t = new Date(iso).getTime();
    if (Number.isNaN(t)) return String(iso);
    return duration(Math.max(0, (now - t) / 1000)) + ' ago';
  }

  function plural(n, what) { return `${num(n)} ${what}${n === 1 ? '' : 's'}`; }

  function setText(node, text) {
    const s = String(text);
    if (node.textContent !== s) node.textContent = s;
  }

  // syncRows keeps one <tr> per item, keyed, so a poll updates cells in place:
  // no flicker, and an editor's input keeps its focus and what is typed.
  function syncRows(tbody, items, key, create, update) {
    const seen = new Set();
    let prev = null;
    for (const item of items) {
      const k = String(key(item));
      seen.add(k);
      let tr = tbody.querySelector(`tr[data-key="${CSS.escape(k)}"]`);
      if (!tr) {
        tr = create(item);
        tr.dataset.key = k;
      }
      update(tr, item);
      // Keep the API's order.
      const want = prev ? prev.nextSibling : tbody.firstChild;
      if (tr !== want) tbody.insertBefore(tr, want);
      prev = tr;
    }
    for (const tr of Array.from(tbody.rows)) {
      if (!seen.has(tr.dataset.key)) tr.remove();
    }
  }

  // ------------------------------------------------------------------- API

  class ApiError extends Error {
    constructor(status, message, fix) {
      super(message);
      this.status = status; // 0: no answer
      this.fix = fix || '';
    }
    get text() { return this.fix ? `${this.message} — fix: ${this.fix}` : this.message; }
  }

  let token = '';

  async function api(method, path, body) {
    const headers = { Accept: 'application/json' };
    if (token) headers.Authorization = 'Bearer ' + token;
    const init = { method, headers, cache: 'no-store', credentials: 'omit', redirect: 'error' };
    if (typeof AbortSignal.timeout === 'function') init.signal = AbortSignal.timeout(REQUEST_TIMEOUT_MS);
    // A change carries Content-Type application/json even without a body:
    // the API refuses one without it when it takes no token (--admin-insecure).
    if (body !== undefined || (method !== 'GET' && method !== 'HEAD')) headers['Content-Type'] = 'application/json';
    if (body !== undefined) init.body = JSON.stringify(body);
    let resp;
    try {
      resp = await fetch(API + path, init);
    } catch (e) {
      throw new ApiError(0, `no answer from the admin API (${e.name === 'TimeoutError' ? 'timed out' : e.message})`);
    }
    const text = await resp.text().catch(() => '');
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch (_) { data = null; }
    if (!resp.ok) {
      const msg = data && typeof data.error === 'string' ? data.error : (text.trim().slice(0, 300) || resp.statusText);
      throw new ApiError(resp.status, `${resp.status}: ${msg}`, data && typeof data.fix === 'string' ? data.fix : '');
    }
    return data;
  }

  // ------------------------------------------------------------ connection

  const conn = {
    lastOK: null,       // Date of the last poll that reached the API
    downSince: null,    // Date of the first failed poll in a row
    failures: 0,
  };

  // showConn sets the header's state. Only a change of state is announced
  // to screen readers (#conn-say), not the time of every poll.
  function showConn(state, text) {
    const c = $('#conn');
    c.className = state;
    setText(c, text);
    const say = $('#conn-say');
    if (say.dataset.state !== state) {
      say.dataset.state = state;
      setText(say, text);
    }
  }

  function banner(text) {
    const b = $('#banner');
    if (!text) { b.hidden = true; b.textContent = ''; return; }
    setText(b, text);
    b.hidden = false;
  }

  // A section's own error (a 503 because its store is away, say) shows under
  // its heading; the rest of the page goes on. Each source of a section
  // (job: one API read) has its own line, so that one read's success does
  // not clear another's failure.
  function sectionError(id, job, err) {
    const sec = document.getElementById(id);
    let p = sec.querySelector(`:scope > p.section-error[data-job="${job}"]`);
    if (!p && !err) return;
    if (!p) {
      p = el('p', { class: 'msg bad section-error', role: 'alert', 'data-job': job });
      sec.querySelector('h2').after(p);
    }
    if (err) { setText(p, err.text || String(err)); p.hidden = false; } else { p.hidden = true; p.textContent = ''; }
  }

  // ------------------------------------------------------------ auth, login

  let role = '';

  function readHashToken() {
    const m = /(?:^#|&)token=([^&]*)/.exec(location.hash);
    if (!m) return;
    try { token = decodeURIComponent(m[1]); } catch (_) { token = m[1]; } // a stray % is part of the token
    try { sessionStorage.setItem(TOKEN_KEY, token); } catch (_) { /* storage off: keep it in memory */ }
    // Out of the address bar and the history, where it would be seen.
    history.replaceState(null, '', location.pathname + location.search);
  }

  function showLogin(message) {
    stopPolling();
    $('#main').hidden = true;
    $('#login').hidden = false;
    $('#signout').hidden = !token;
    setText($('#login-msg'), message || '');
    const input = $('#token');
    input.value = '';
    input.focus();
  }

  function authFailed(err) {
    if (err.status === 401) {
      showLogin(token ? `The admin API refused this token (${err.text}). Enter a valid one.`
        : 'The admin API needs a token. Enter one.');
      showConn('bad', 'token refused');
    } else {
      showLogin(`The admin API denies access (${err.text}).`);
      showConn('bad', 'access denied');
    }
  }

  async function whoami() {
    const me = await api('GET', '/whoami');
    role = me && me.role ? me.role : '';
    document.body.classList.toggle('readonly', role !== 'admin');
    const r = $('#role');
    setText(r, me && me.insecure ? 'no authentication (insecure mode)' : `role: ${role}`);
    $('#readonly-note').hidden = role === 'admin';
  }

  async function openDashboard() {
    try {
      await whoami();
    } catch (err) {
      if (err.status === 401 || err.status === 403) { authFailed(err); return; }
      // Unreachable or failing: show the page with the failure; polling
      // goes on and recovers by itself.
    }
    $('#login').hidden = true;
    $('#main').hidden = false;
    $('#signout').hidden = !token;
    startPolling();
  }

  // --------------------------------------------------------------- polling

  let tick = 0;
  let timer = null;
  let polling = false;
  let inFlight = null;
  // No poll runs while an action (act) is under way: one that left before
  // it finishes first, and none starts until it is done, so the page never
  // reads half a change (the Kafka DLQ of a topic being deleted, say).
  let acting = 0;

  function startPolling() {
    polling = true;
    tick = 0;
    schedule(0);
  }
  function stopPolling() {
    polling = false;
    clearTimeout(timer);
  }
  function schedule(ms) {
    clearTimeout(timer);
    if (polling) timer = setTimeout(pollLoop, ms);
  }
  async function pollLoop() {
    if (!polling) return;
    await refresh(false);
    schedule(POLL_MS);
  }

  // refresh polls what is due (everything when all is true, after an action)
  // and renders it. Polls never overlap: a slow API slows the page down
  // instead of piling requests up.
  async function refresh(all) {
    if (!all && acting) return undefined;
    if (inFlight) {
      // An action's refresh waits for the poll under way, then reads
      // everything: that poll may have left before the action was done.
      if (!all) return inFlight;
      await inFlight;
      return refresh(true);
    }
    inFlight = (async () => {
      const n = tick++;
      const due = (every) => all || n % every === 0;
      // The funnel first when due: it names the topics, which the rate
      // table and the Kafka DLQ read need (drawn in this order too).
      const stats = due(STATS_EVERY) ? api('GET', '/stats') : null;
      const jobs = [];
      if (stats) jobs.push(['stats', stats, renderStats]);
      // The role again now and then (a page opened while the API was away
      // has none yet, and hides the write controls until it has).
      if (!role || due(STATS_EVERY)) jobs.push(['whoami', whoami(), () => {}]);
      jobs.push(
        ['partitions', api('GET', '/partitions'), renderPartitions],
        ['canary', api('GET', '/canary'), renderCanary],
        ['rates', Promise.all([api('GET', '/rates'), api('GET', '/limits')]), renderRates],
        ['periodic', api('GET', '/periodic'), renderPeriodic],
      );
      // Topics ask Kafka for its metadata: as seldom as the funnel.
      const topicList = due(STATS_EVERY) ? api('GET', '/topics') : null;
      if (topicList) jobs.push(['topics', topicList, renderTopics]);
      if (due(GROUPS_EVERY)) jobs.push(['groups', api('GET', '/groups?limit=100'), renderGroups]);
      if (due(DLQ_EVERY)) jobs.push(['dead', loadDeadLetters(stats, topicList), renderDeadLetters]);
      const results = await Promise.allSettled(jobs.map((j) => j[1]));
      let reached = false;
      let down = null;
      for (let i = 0; i < jobs.length; i++) {
        const [section, , render] = jobs[i];
        const r = results[i];
        if (r.status === 'fulfilled') {
          reached = true;
          try {
            render(r.value);
            sectionError(sectionOf(section), section, null);
          } catch (e) {
            sectionError(sectionOf(section), section, new ApiError(0, 'the page could not draw this answer: ' + e.message));
          }
          continue;
        }
        const err = r.reason instanceof ApiError ? r.reason : new ApiError(0, String(r.reason));
        if (err.status === 401 || err.status === 403) { authFailed(err); return; }
        if (err.status === 0) { down = err; continue; }
        reached = true;
        sectionError(sectionOf(section), section, err);
      }
      noteConnection(reached, down);
    })();
    try { await inFlight; } finally { inFlight = null; }
  }

  function sectionOf(job) { return job === 'stats' || job === 'whoami' ? 'partitions' : job; }

  function noteConnection(reached, down) {
    const now = new Date();
    if (reached) {
      conn.lastOK = now;
      conn.downSince = null;
      conn.failures = 0;
      $('#main').classList.remove('stale-data');
      banner('');
      showConn('ok', `live · updated ${clock(now.toISOString())}`);
      return;
    }
    conn.failures++;
    if (!conn.downSince) conn.downSince = now;
    $('#main').classList.add('stale-data');
    const since = clock(conn.downSince.toISOString());
    const last = conn.lastOK ? `The numbers below are from ${clock(conn.lastOK.toISOString())}.` : 'Nothing has been read yet.';
    // The banner's words change only with the error, so that its alert
    // is not read out again at every poll; the count is in the header.
    banner(`The admin API is unreachable since ${since}: ${down ? down.message : 'no answer'}. ${last} Retrying every ${POLL_MS / 1000} s.`);
    showConn('bad', `API unreachable since ${since} (${conn.failures} failed ${conn.failures === 1 ? 'poll' : 'polls'})`);
  }

  // ------------------------------------------------------------ partitions

  // Throughput per partition, from the `completed` counter of successive
  // polls over the API's own `at` (the console's clock, not the page's).
  const spark = new Map(); // partition -> {at, completed, rates: []}
  const totalSpark = { rates: [] };

  // A sample spans at least MIN_SAMPLE_MS: the page also polls right after
  // an action, and a few hundred milliseconds hold one batch of acks or
  // none, which would draw spikes and gaps that are not there.
  const MIN_SAMPLE_MS = 1500;

  function trackThroughput(at, parts) {
    const t = new Date(at).getTime();
    let total = 0;
    let anyRate = false;
    for (const p of parts) {
      let s = spark.get(p.partition);
      if (!s) { s = { at: null, completed: null, rates: [] }; spark.set(p.partition, s); }
      if (typeof p.completed !== 'number') continue;
      if (s.at !== null && t - s.at < MIN_SAMPLE_MS && p.completed >= s.completed) continue;
      if (s.at !== null && t > s.at && p.completed >= s.completed) {
        const r = (p.completed - s.completed) / ((t - s.at) / 1000);
        s.rates.push(r);
        if (s.rates.length > SPARK_POINTS) s.rates.shift();
        total += r;
        anyRate = true;
      }
      // A counter that went back (its Redis lost the stats hash) starts over.
      s.at = t;
      s.completed = p.completed;
    }
    if (anyRate) {
      totalSpark.rates.push(total);
      if (totalSpark.rates.length > SPARK_POINTS) totalSpark.rates.shift();
    }
  }

  const SVG = 'http://www.w3.org/2000/svg';
  function sparkSVG(label) {
    const svg = document.createElementNS(SVG, 'svg');
    svg.setAttribute('class', 'spark');
    svg.setAttribute('viewBox', `0 0 ${SPARK_POINTS - 1} 20`);
    svg.setAttribute('preserveAspectRatio', 'none');
    svg.setAttribute('role', 'img');
    const title = document.createElementNS(SVG, 'title');
    title.textContent = label;
    const area = document.createElementNS(SVG, 'polygon');
    area.setAttribute('class', 'area');
    const line = document.createElementNS(SVG, 'polyline');
    svg.append(title, area, line);
    return svg;
  }
  function drawSpark(svg, rates, what) {
    const peak = Math.max(0, ...rates);
    const n = rates.length;
    const x0 = SPARK_POINTS - n; // newest at the right edge
    const pts = rates.map((r, i) => `${x0 + i},${(19 - (peak > 0 ? (r / peak) * 18 : 0)).toFixed(2)}`);
    svg.querySelector('polyline').setAttribute('points', pts.join(' '));
    svg.querySelector('polygon').setAttribute('points', n > 1 ? `${x0},20 ${pts.join(' ')} ${SPARK_POINTS - 1},20` : '');
    const label = n === 0 ? `${what}: no throughput measured yet`
      : `${what}: jobs finished per second over the last ${Math.round((n * POLL_MS) / 1000)} s, now ${rateText(rates[n - 1])}, peak ${rateText(peak)}`;
    svg.setAttribute('aria-label', label);
    svg.querySelector('title').textContent = label;
  }

  function pwqdText(p) {
    if (p.pwqd === null || p.pwqd === undefined) return p.ready > 0 && !p.workers ? '∞ (no workers)' : '—';
    return nf1.format(p.pwqd);
  }

  function renderPartitions(d) {
    const parts = (d && d.partitions) || [];
    trackThroughput(d.at, parts);
    const tbody = $('#partitions-table tbody');
    syncRows(tbody, parts, (p) => p.partition, () => {
      const tr = el('tr', null,
        el('th', { scope: 'row' }), el('td', { class: 'num' }), el('td', { class: 'num' }), el('td', { class: 'num' }),
        el('td', { class: 'num' }), el('td', { class: 'num' }), el('td', { class: 'num' }), el('td', { class: 'num' }), el('td'));
      tr.cells[8].append(sparkSVG('throughput'));
      return tr;
    }, (tr, p) => {
      const c = tr.cells;
      setText(c[0], p.partition);
      setText(c[1], num(p.ready));
      setText(c[2], num(p.inflight));
      setText(c[3], num(p.delayed));
      setText(c[4], num(p.dead));
      // Each count sums the partition's queues, one per topic: their own
      // counts are the cell's tooltip.
      const split = (f) => (p.queues || []).map((q) => `${q.topic}: ${num(q[f])}`).join('\n');
      c[1].title = split('ready');
      c[2].title = split('inflight');
      c[3].title = split('delayed');
      c[4].title = split('dead');
      c[4].classList.toggle('bad-num', p.dead > 0);
      let w = num(p.workers);
      if (p.consumers !== undefined && p.consumers !== 1) w += ` (${num(p.consumers)} consumers)`;
      // The scaler's target (the holder's only) while the workers are not
      // there yet: a scale-up or decay in progress.
      if (typeof p.target === 'number' && p.target * Math.max(p.consumers || 0, 1) !== p.workers) w += ` → ${num(p.target)} per consumer`;
      if (p.pin) w += ` · pinned at ${num(p.pin.workers)}`;
      setText(c[5], w);
      setText(c[6], pwqdText(p));
      const s = spark.get(p.partition);
      setText(c[7], s && s.rates.length ? rateText(s.rates[s.rates.length - 1]) : '—');
      drawSpark(c[8].querySelector('svg'), s ? s.rates : [], `partition ${p.partition}`);
    });
    $('#partitions-empty').hidden = parts.length > 0;
    const tot = totalSpark.rates;
    const sum = (f) => parts.reduce((a, p) => a + (p[f] || 0), 0);
    setText($('#partitions-sub'), `${parts.length} partitions · ${num(sum('ready'))} ready · ${num(sum('inflight'))} in flight · ` +
      `${num(sum('dead'))} dead · ${tot.length ? rateText(tot[tot.length - 1]) : '—'} jobs/s · ` +
      (d.holder ? 'this process holds the coordinator lock' : 'this process does not hold the coordinator lock (a standby, or a console alone)'));
    drawSpark($('#total-spark'), tot, 'all partitions');
    deadTotal = sum('dead');
  }

  // ------------------------------------------------------------ stats line

  let topics = []; // the job topics the funnel knows, for the rate and DLQ panels

  function topicsOf(r) { return ((r && r.topics) || []).map((t) => t.topic).filter(Boolean); }

  function renderStats(r) {
    topics = topicsOf(r);
    const probs = (r && r.problems) || [];
    const ul = $('#problems');
    ul.replaceChildren(...probs.map((p) => el('li', { text: p })));
    $('#problems-box').hidden = probs.length === 0;
  }

  // ---------------------------------------------------------------- groups

  // A group's finish rate is measured over a window of its recent polls,
  // not between two: jobs finish in batches (claims and acks are batched),
  // and polls right after an action come a moment apart.
  const RATE_WINDOW_MS = 20000;
  const groupSeen = new Map(); // group -> [{t, finished}], oldest first

  function groupRate(group, now, finished) {
    let seen = groupSeen.get(group);
    if (!seen) { seen = []; groupSeen.set(group, seen); }
    seen.push({ t: now, finished });
    while (seen.length > 2 && now - seen[1].t >= RATE_WINDOW_MS) seen.shift();
    const first = seen[0];
    if (now - first.t < MIN_SAMPLE_MS * 2) return null; // not measured yet
    return Math.max(0, (finished - first.finished) / ((now - first.t) / 1000));
  }

  function renderGroups(d) {
    const now = Date.now();
    const bulk = ((d && d.bulk) || []).slice();
    // Running groups first, newest first; finished ones after.
    bulk.sort((a, b) => (!!a.completed_at - !!b.completed_at) || String(b.first_at || '').localeCompare(String(a.first_at || '')));
    const tbody = $('#groups-table tbody');
    // A group is named within its topic: two topics may have one each.
    const gkey = (g) => `${g.topic}/${g.group}`;
    syncRows(tbody, bulk, gkey, () => {
      const bar = el('progress', { max: '1', value: '0' });
      return el('tr', null,
        el('td', { class: 'id' }), el('td'),
        el('td', null, el('div', { class: 'progress-wrap' }, bar, el('span'))),
        el('td', { class: 'num' }), el('td', { class: 'num' }), el('td', { class: 'num' }), el('td', { class: 'num' }),
        el('td', { class: 'num' }), el('td'), el('td'));
    }, (tr, g) => {
      const c = tr.cells;
      const finished = (g.done || 0) + (g.dead || 0) + (g.cancelled || 0);
      const total = g.total || 0;
      setText(c[0], g.group);
      setText(c[1], g.topic || '—');
      const bar = c[2].querySelector('progress');
      bar.max = Math.max(total, 1);
      bar.value = Math.min(finished, bar.max);
      const pct = total > 0 ? Math.min(100, (100 * finished) / total) : 0;
      bar.setAttribute('aria-label', `group ${g.group}: ${num(finished)} of ${num(total)} finished`);
      setText(c[2].querySelector('span'), `${nf1.format(pct)}%`);
      setText(c[3], num(g.done));
      setText(c[4], num(g.dead));
      c[4].classList.toggle('bad-num', g.dead > 0);
      setText(c[5], num(g.cancelled));
      setText(c[6], num(total));
      // The finish rate over the last polls gives the ETA.
      const rate = g.completed_at ? null : groupRate(gkey(g), now, finished);
      let eta, state;
      if (g.completed_at) {
        eta = '—';
        state = `completed ${clock(g.completed_at)}` + (g.callback_state ? ` · callback ${g.callback_state}` : '');
      } else {
        const left = Math.max(0, total - finished);
        eta = left === 0 ? 'finishing' : rate > 0 ? duration(left / rate) : (rate === 0 ? 'stalled' : 'measuring…');
        const bits = [];
        if (g.running) bits.push(`${num(g.running)} running`);
        if (g.queued) bits.push(`${num(g.queued)} queued`);
        if (g.failed) bits.push(`${num(g.failed)} retrying`);
        state = bits.join(' · ') || 'waiting';
      }
      setText(c[7], rate === null ? '—' : rateText(rate));
      setText(c[8], eta);
      setText(c[9], state);
    });
    for (const k of groupSeen.keys()) if (!bulk.some((g) => gkey(g) === k && !g.completed_at)) groupSeen.delete(k);
    $('#groups-empty').hidden = bulk.length > 0;
    const running = bulk.filter((g) => !g.completed_at).length;
    const active = ((d && d.active) || []).length;
    setText($('#groups-sub'), `${plural(running, 'bulk group')} running, ${bulk.length - running} finished · ${plural(active, 'group')} with ready jobs`);
  }
  // ---------------------------------------------------------------- canary

  function renderCanary(d) {
    const now = Date.now();
    const paths = (d && d.paths) || [];
    const alerts = (d && d.alerts) || [];
    // Redrawn only when its words change: it is a live region, read out
    // again whenever it is replaced.
    const sig = JSON.stringify([!!(d && d.monitor), alerts, paths.length]);
    const diag = $('#canary-diagnosis');
    if (diag.dataset.sig !== sig) {
      diag.dataset.sig = sig;
      if (!d || !d.monitor) {
        diag.replaceChildren(el('p', { class: 'muted', text: 'No canary monitor runs (the coordinator holding the lock needs --canary-topics).' }));
      } else if (alerts.length) {
        diag.replaceChildren(el('p', { class: 'msg bad', text: 'Diagnosis:' }),
          el('ul', { class: 'alerts' }, ...alerts.map((a) => el('li', { text: a }))));
      } else if (paths.length) {
        diag.replaceChildren(el('p', { class: 'okline', text: `All ${paths.length} paths complete their canaries in time.` }));
      } else {
        diag.replaceChildren(el('p', { class: 'muted', text: 'No canary has completed yet.' }));
      }
    }
    const tbody = $('#canary-table tbody');
    syncRows(tbody, paths, (p) => `${p.topic}/${p.kafka_partition}/${p.redis_partition}`,
      () => el('tr', null, el('td'), el('td', { class: 'num' }), el('td', { class: 'num' }), el('td'),
        el('td', { class: 'num' }), el('td', { class: 'num' }), el('td')),
      (tr, p) => {
        const c = tr.cells;
        setText(c[0], p.topic);
        setText(c[1], p.kafka_partition);
        setText(c[2], p.redis_partition);
        setText(c[3], p.done ? `${clock(p.done)} (${ago(p.done, now)})` : 'never');
        c[3].title = dateTime(p.done);
        setText(c[4], duration(p.age));
        setText(c[5], p.done ? duration(p.latency) : '—');
        tr.classList.toggle('stale', !!p.stale);
        const badge = c[6].firstChild || c[6].appendChild(el('span'));
        badge.className = 'badge ' + (p.stale ? 'bad' : 'ok');
        setText(badge, p.stale ? 'STALE' : 'ok');
      });
    $('#canary-empty').hidden = paths.length > 0;
    const stale = paths.filter((p) => p.stale).length;
    const bits = [];
    if (d && d.monitor) {
      bits.push(`${paths.length} paths`, stale ? `${stale} stale` : 'none stale');
      if (d.interval) bits.push(`every ${duration(d.interval)} + ${duration(d.grace)} grace`);
      if (d.last_round) bits.push(`last round ${clock(d.last_round)}`);
      if (d.holder) bits.push(`by ${d.holder}`);
    }
    setText($('#canary-sub'), bits.join(' · '));
  }

  // ----------------------------------------------------------- dead letters

  let deadTotal = 0;

  async function loadDeadLetters(stats, topicList) {
    // The Kafka DLQ is per topic: every topic the page knows of, with the
    // funnel's and the topic list's of this poll when it reads them (the
    // first poll knows of none before it).
    if (stats) {
      const r = await stats.catch(() => null);
      if (r) topics = topicsOf(r);
    }
    if (topicList) {
      const r = await topicList.catch(() => null);
      if (r) dlqTopics = dlqTopicsOf(r);
    }
    const ts = knownTopics();
    const [redisDLQ, ...kafka] = await Promise.allSettled([
      api('GET', '/dlq?source=redis&limit=50'),
      ...ts.map((t) => api('GET', `/dlq?source=kafka&topic=${encodeURIComponent(t)}&limit=50`)),
    ]);
    const auth = [redisDLQ, ...kafka].find((r) => r.status === 'rejected' && (r.reason.status === 401 || r.reason.status === 403));
    if (auth) throw auth.reason;
    if (redisDLQ.status === 'rejected' && kafka.every((r) => r.status === 'rejected')) throw redisDLQ.reason;
    return { redis: redisDLQ, kafka: kafka.map((r, i) => ({ topic: ts[i], r })) };
  }

  // knownTopics are the topics whose Kafka DLQ the page reads and purges:
  // those whose .dlq Kafka has, once the topic list has been read. The
  // funnel and the rate keys also name topics deleted since (the gate's
  // counters and a rate outlive a topic), whose DLQ would be a 404 at
  // every poll.
  function knownTopics() {
    if (dlqTopics !== null) return dlqTopics.slice();
    const s = new Set(topics);
    for (const r of lastRates) s.add(r.topic);
    return Array.from(s).sort();
  }

  function deadMsg(text, bad) {
    const m = $('#dead-msg');
    m.className = 'msg ' + (bad ? 'bad' : 'ok');
    setText(m, text);
  }

  // act runs an admin action from a button, shows its outcome in msgNode,
  // and polls at once so the page shows the effect.
  async function act(button, msgNode, what, fn) {
    button.disabled = true;
    acting++;
    try {
      if (inFlight) await inFlight.catch(() => {});
      const out = await fn();
      msgNode(what(out), false);
    } catch (err) {
      if (err.status === 401 || err.status === 403) {
        msgNode(err.status === 403 && role !== 'admin' ? `Not allowed with a read-only token (${err.text}).` : err.text, true);
        if (err.status === 401) authFailed(err);
      } else {
        msgNode(err.text || String(err), true);
      }
    } finally {
      acting--;
      button.disabled = false;
    }
    await refresh(true);
  }

  function renderDeadLetters(d) {
    const now = Date.now();
    // Redis dead set.
    const rt = $('#deadset-table tbody');
    if (d.redis.status === 'fulfilled') {
      sectionError('dead', 'dead-redis', null);
      const entries = d.redis.value.entries || [];
      // A row per job of a topic (an id may be dead in two topics): its
      // buttons act on that topic's.
      syncRows(rt, entries, (e) => `${e.topic}/${e.id}`, (e) => {
        const replay = el('button', { type: 'button', class: 'replay write', text: 'Replay' });
        const purge = el('button', { type: 'button', class: 'purge danger write', text: 'Purge…' });
        replay.addEventListener('click', () => act(replay, deadMsg, (o) => (o.replayed ? `Replayed ${e.id} (${e.topic}): back in its group's ready queue.`
          : `${e.id} (${e.topic}) was not replayed: ${(o.skipped || []).join('; ') || 'no longer dead'}.`),
          () => api('POST', '/dlq/replay', { source: 'redis', topic: e.topic, ids: [e.id] })));
        purge.addEventListener('click', () => {
          if (!window.confirm(`Purge dead job ${e.id} of topic ${e.topic}? Its record is deleted and it cannot be replayed.`)) return;
          act(purge, deadMsg, (o) => `Purged ${e.id} of ${e.topic} (${o.purged}).`,
            () => api('POST', '/dlq/purge', { source: 'redis', topic: e.topic, ids: [e.id] }));
        });
        return el('tr', null, el('td', { class: 'id' }), el('td'), el('td', { class: 'num' }), el('td'), el('td', { class: 'id' }),
          el('td', { class: 'num' }), el('td'), el('td', { class: 'err' }), el('td', { class: 'actions' }, replay, ' ', purge));
      }, (tr, e) => {
        const c = tr.cells;
        setText(c[0], e.id);
        setText(c[1], e.topic || '—');
        setText(c[2], e.partition);
        setText(c[3], e.type || '—');
        setText(c[4], e.group || '—');
        setText(c[5], num(e.attempts));
        setText(c[6], e.dead_at ? `${clock(e.dead_at)} (${ago(e.dead_at, now)})` : '—');
        c[6].title = dateTime(e.dead_at);
        setText(c[7], e.last_error || '');
      });
      $('#deadset-empty').hidden = entries.length > 0;
      const more = d.redis.value.next_cursor ? ' (the newest 50 shown)' : '';
      setText($('#deadset-sub'), `${num(deadTotal)} dead jobs across the topics' partitions${more}`);
    } else {
      sectionError('dead', 'dead-redis', d.redis.reason);
    }

    // Kafka DLQ, every topic.
    const rows = [];
    const errs = [];
    let more = false;
    for (const { topic, r } of d.kafka) {
      if (r.status === 'rejected') { errs.push(`${topic}.dlq: ${r.reason.text || r.reason}`); continue; }
      for (const e of r.value.entries || []) rows.push({ topic, e });
      if (r.value.next_cursor) more = true;
    }
    const kt = $('#dlq-table tbody');
    syncRows(kt, rows, (x) => `${x.topic}/${x.e.id}`, ({ topic, e }) => {
      const replay = el('button', { type: 'button', class: 'replay write', text: 'Replay' });
      replay.addEventListener('click', () => act(replay, deadMsg, (o) => `Replayed ${topic}.dlq ${e.id} to ${topic}: ${o.replayed} produced.`,
        () => api('POST', '/dlq/replay', { source: 'kafka', topic, ids: [e.id] })));
      return el('tr', null, el('td'), el('td', { class: 'num' }), el('td', { class: 'num' }), el('td', { class: 'id' }),
        el('td'), el('td', { class: 'err' }), el('td', { class: 'actions' }, replay));
    }, (tr, { topic, e }) => {
      const c = tr.cells;
      setText(c[0], topic);
      setText(c[1], e.partition);
      setText(c[2], e.offset);
      setText(c[3], e.source_record ? `${e.key || ''} (from ${e.source_record})` : (e.key || '—'));
      setText(c[4], e.timestamp ? `${clock(e.timestamp)} (${ago(e.timestamp, now)})` : '—');
      setText(c[5], e.reason || '');
      c[5].title = e.value ? `${e.value_bytes} bytes: ${e.value}` : '';
    });
    $('#dlq-empty').hidden = rows.length > 0 || errs.length > 0 || d.kafka.length === 0;
    const errLine = $('#dlq-err');
    setText(errLine, errs.join('; '));
    errLine.hidden = errs.length === 0;
    setText($('#dlq-sub'), d.kafka.length === 0 ? 'no topics known yet'
      : `${rows.length} records in ${d.kafka.map((k) => k.topic + '.dlq').join(', ')}${more ? ' (the oldest 50 per topic shown)' : ''}`);
  }

  function purgeAll(button, source) {
    const ts = knownTopics();
    const what = source === 'redis' ? "every job in every topic's Redis dead set" : `every record of ${ts.map((t) => t + '.dlq').join(', ')}`;
    if (!window.confirm(`Purge ${what}? This cannot be undone.`)) return;
    act(button, deadMsg, (outs) => `Purged ${outs.reduce((a, o) => a + (o.purged || 0), 0)} entries.`, () => {
      if (source === 'redis') return api('POST', '/dlq/purge', { source, all: true }).then((o) => [o]);
      return Promise.all(ts.map((topic) => api('POST', '/dlq/purge', { source, topic, all: true })));
    });
  }

  // ----------------------------------------------------------- rate limits

  let lastRates = [];

  // The editor sends what was typed: a number as a number, anything else
  // as it is, so the API's own parser (the relay's, the worker's) judges
  // it and its message is what the operator reads.
  function typed(v) {
    const s = v.trim();
    return /^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(s) ? Number(s) : s;
  }

  function rateInForce(r) {
    if (r.error) return `unreadable value in Consul (the relay keeps its last good rate): ${r.error}`;
    if (r.unlimited) return 'unlimited';
    const b = r.burst ? `, burst ${num(r.burst)}` : '';
    return r.paused ? `PAUSED (was ${num(r.rate)}/s${b})` : `${num(r.rate)} jobs/s${b}`;
  }

  function editorForm(label, onSave, extra) {
    const rate = el('input', { type: 'text', class: 'rate', inputmode: 'decimal', 'aria-label': `${label}: new rate` });
    const burst = el('input', { type: 'text', class: 'rate', inputmode: 'numeric', placeholder: 'burst', 'aria-label': `${label}: burst (optional)` });
    const save = el('button', { type: 'submit', class: 'save', text: 'Save' });
    const msg = el('span', { class: 'msg', role: 'status', 'aria-live': 'polite' });
    const form = el('form', { class: 'inline editor write', 'aria-label': `${label} editor` }, rate, burst, save, ...(extra || []), msg);
    const say = (text, bad) => { msg.className = 'msg ' + (bad ? 'bad' : 'ok'); setText(msg, text); };
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      const body = { rate: typed(rate.value) };
      if (burst.value.trim() !== '') body.burst = typed(burst.value);
      // Once saved, what is typed is what is in force: polls fill it again.
      act(save, say, () => { rate.dataset.filled = rate.value; burst.dataset.filled = burst.value; return 'Saved.'; }, () => onSave(body));
    });
    return { form, rate, burst, say };
  }
  // fill puts the value in force into an editor the operator is not using:
  // one whose value is still the one the page put there last (typing,
  // pasting or a browser's autofill all change it) and that has no focus.
  function fill(input, v) {
    if (document.activeElement === input || input.value !== (input.dataset.filled || '')) return;
    const s = v === null || v === undefined ? '' : String(v);
    input.value = s;
    input.dataset.filled = s;
  }

  function renderRates([rates, limits]) {
    lastRates = (rates && rates.rates) || [];
    const byTopic = new Map(lastRates.map((r) => [r.topic, r]));
    for (const t of topics) if (!byTopic.has(t)) byTopic.set(t, { topic: t, unlimited: true });
    const list = Array.from(byTopic.values()).sort((a, b) => a.topic.localeCompare(b.topic));
    syncRows($('#relay-table tbody'), list, (r) => r.topic, (r) => {
      const topic = r.topic;
      const path = `/rates/${encodeURIComponent(topic)}`;
      const unl = el('button', { type: 'button', text: 'Unlimited' });
      const ed = editorForm(`relay rate of ${topic}`, (body) => api('PUT', path, body), [unl]);
      unl.addEventListener('click', () => act(unl, ed.say, () => 'Unlimited.', () => api('PUT', path, { unlimited: true })));
      const pause = el('button', { type: 'button', class: 'pause write' });
      pause.addEventListener('click', () => {
        const paused = pause.dataset.paused === '1';
        act(pause, ed.say, () => (paused ? 'Resumed.' : 'Paused.'), () => api('POST', `${path}/${paused ? 'resume' : 'pause'}`));
      });
      const tr = el('tr', null, el('th', { scope: 'row' }), el('td'), el('td', null, ed.form), el('td', null, pause));
      tr._ed = ed;
      return tr;
    }, (tr, r) => {
      const c = tr.cells;
      setText(c[0], r.topic);
      setText(c[1], rateInForce(r));
      c[1].classList.toggle('bad-num', !!r.paused || !!r.error);
      fill(tr._ed.rate, r.unlimited ? '' : r.rate);
      fill(tr._ed.burst, r.unlimited ? '' : r.burst);
      const pause = c[3].querySelector('button');
      pause.dataset.paused = r.paused ? '1' : '0';
      setText(pause, r.paused ? 'Resume' : 'Pause');
      pause.setAttribute('aria-label', `${r.paused ? 'Resume' : 'Pause'} the relay of ${r.topic}`);
    });
    $('#relay-empty').hidden = list.length > 0;

    const ls = ((limits && limits.limits) || []).slice().sort((a, b) => a.resource.localeCompare(b.resource));
    syncRows($('#limits-table tbody'), ls, (l) => l.resource, (l) => {
      const path = `/limits/${encodeURIComponent(l.resource)}`;
      const del = el('button', { type: 'button', class: 'danger', text: 'Remove' });
      const ed = editorForm(`execution limit of ${l.resource}`, (body) => api('PUT', path, body), [del]);
      del.addEventListener('click', () => {
        if (!window.confirm(`Remove the execution limit of ${l.resource}? Its jobs then start unthrottled.`)) return;
        act(del, ed.say, () => 'Removed.', () => api('DELETE', path));
      });
      const tr = el('tr', null, el('th', { scope: 'row' }), el('td'), el('td', null, ed.form));
      tr._ed = ed;
      return tr;
    }, (tr, l) => {
      setText(tr.cells[0], l.resource);
      setText(tr.cells[1], l.error ? `unreadable value in Consul (the workers keep their last good limit): ${l.error}`
        : `${num(l.rate)} starts/s` + (l.burst ? `, burst ${num(l.burst)}` : ''));
      tr.cells[1].classList.toggle('bad-num', !!l.error);
      fill(tr._ed.rate, l.rate);
      fill(tr._ed.burst, l.burst);
    });
    $('#limits-empty').hidden = ls.length > 0;
  }

  // ---------------------------------------------------------------- topics

  // dlqTopics: the topics whose Kafka .dlq exists, from the last topic
  // list read (null: none read yet, or a list without Kafka's view: a
  // console without brokers, whose DLQ reads then say why they fail).
  let dlqTopics = null;
  function dlqTopicsOf(list) {
    const ts = (list && list.topics) || [];
    if (!ts.some((t) => (t.kafka || []).length > 0)) return null;
    return ts.filter((t) => (t.kafka || []).includes(t.name + '.dlq')).map((t) => t.name).sort();
  }

  function topicsMsg(text, bad) {
    const m = $('#topics-msg');
    m.className = 'msg ' + (bad ? 'bad' : 'ok');
    setText(m, text);
  }

  function createdText(o) {
    const made = (o.created_kafka || []).length ? `Kafka topics created: ${o.created_kafka.join(', ')}`
      : 'its Kafka topics existed already';
    return `Created ${o.name}: ${num(o.partitions)} partitions, replication ${num(o.replication)}; ${made}. Relays that follow the list serve it within a second.`;
  }

  function deletedText(o) {
    const k = (o.deleted_kafka || []).length ? `Kafka topics ${o.deleted_kafka.join(', ')} deleted` : 'no Kafka topic to delete';
    const left = o.left ? `; ${plural(o.left, 'job')} left in Redis, for workers that serve it and the dead-letter commands` : '';
    return `Deleted ${o.name}: ${k}${left}.`;
  }

  // deleteTopic asks first, then deletes without force: the API refuses
  // (409) a topic that still holds jobs or that a relay serves by its
  // --topics, and its words are what the operator decides on. Forcing is
  // a second, explicit choice; declined, the refusal stays on the page.
  function deleteTopic(name, button) {
    if (!window.confirm(`Delete topic ${name}? Its Kafka topics (${name}, ${name}.retry, ${name}.dlq) are deleted and its relay lets it go. ` +
      'If it still holds jobs the admin API refuses, and you are asked whether to force.')) return;
    const path = `/topics/${encodeURIComponent(name)}`;
    act(button, topicsMsg, deletedText, async () => {
      try {
        return await api('DELETE', path);
      } catch (err) {
        if (err.status !== 409) throw err;
        if (!window.confirm(`The admin API refused to delete ${name}:\n\n${err.text}\n\n` +
          'OK deletes it anyway (force, as sluice topics delete --force does): jobs in Kafka not yet relayed are lost; ' +
          'jobs in Redis stay there. Cancel keeps the topic.')) throw err;
        return api('DELETE', `${path}?force=true`);
      }
    });
  }

  function createTopic(form) {
    const name = $('#topic-new-name').value.trim();
    if (!name) { topicsMsg('Name the topic.', true); return; }
    // What is typed goes as typed (a number as a number): the API judges
    // it, and an empty field takes its default.
    const body = { name };
    const parts = $('#topic-new-partitions').value.trim();
    const repl = $('#topic-new-replication').value.trim();
    if (parts !== '') body.partitions = typed(parts);
    if (repl !== '') body.replication = typed(repl);
    act(form.querySelector('button[type=submit]'), topicsMsg, createdText, () => api('POST', '/topics', body));
  }

  function renderTopics(list) {
    const ts = (list && list.topics) || [];
    dlqTopics = dlqTopicsOf(list);
    syncRows($('#topics-table tbody'), ts, (t) => t.name, (t) => {
      const del = el('button', { type: 'button', class: 'topic-delete danger write', text: 'Delete…', 'aria-label': `Delete topic ${t.name}` });
      del.addEventListener('click', () => deleteTopic(t.name, del));
      return el('tr', null, el('th', { scope: 'row' }), el('td', { class: 'num' }), el('td', { class: 'num' }), el('td'), el('td'), el('td'),
        el('td', { class: 'actions' }, del));
    }, (tr, t) => {
      const c = tr.cells;
      setText(c[0], t.name);
      setText(c[1], t.partitions ? String(t.partitions) : '—');
      setText(c[2], t.replication ? String(t.replication) : '—');
      setText(c[3], t.listed ? 'yes' : 'no (a relay\'s --topics)');
      setText(c[4], t.relay || 'none');
      const problems = t.problems || [];
      setText(c[5], problems.length ? problems.join(' · ') : '—');
      c[5].classList.toggle('bad-num', problems.length > 0);
    });
    $('#topics-empty').hidden = ts.length > 0;
  }

  // --------------------------------------------------------- periodic jobs

  function periodicWhen(s) {
    const when = s.cron ? s.cron : `every ${s.every}`;
    return s.timezone ? `${when} (${s.timezone})` : when;
  }

  function renderPeriodic(list) {
    const ps = ((list && list.schedules) || []).slice().sort((a, b) => a.name.localeCompare(b.name));
    syncRows($('#periodic-table tbody'), ps, (p) => p.name, (p) => {
      const path = `/periodic/${encodeURIComponent(p.name)}`;
      const msg = el('span', { class: 'msg', role: 'status', 'aria-live': 'polite' });
      const say = (text, bad) => { msg.className = 'msg ' + (bad ? 'bad' : 'ok'); setText(msg, text); };
      const pause = el('button', { type: 'button', class: 'pause write' });
      pause.addEventListener('click', () => {
        const paused = pause.dataset.paused === '1';
        act(pause, say, () => (paused ? 'Resumed.' : 'Paused.'), () => api('POST', `${path}/${paused ? 'resume' : 'pause'}`));
      });
      const now = el('button', { type: 'button', class: 'write', text: 'Run now', 'aria-label': `Run ${p.name} now` });
      now.addEventListener('click', () => act(now, say, () => 'Asked: the leader fires it within a watch round.', () => api('POST', `${path}/run-now`)));
      return el('tr', null, el('th', { scope: 'row' }), el('td'), el('td'), el('td'), el('td'), el('td'), el('td', null, pause, now, msg));
    }, (tr, p) => {
      const c = tr.cells;
      const s = p.schedule;
      setText(c[0], p.name);
      setText(c[1], s ? periodicWhen(s) : `unreadable value in Consul (the scheduler keeps its last good one): ${p.error}`);
      c[1].classList.toggle('bad-num', !s);
      setText(c[2], s ? `${s.type} → ${s.topic}` : '—');
      setText(c[3], !s ? '—' : s.paused ? 'PAUSED' : (p.next && p.next.length ? dateTime(p.next[0]) : 'never'));
      const st = p.state || {};
      setText(c[4], st.last_fire ? dateTime(st.last_fire) : '—');
      const job = p.last_job ? `${st.last_job}: ${p.last_job.state}` : (st.last_job || '—');
      setText(c[5], st.last_error ? `post failed: ${st.last_error}` : job);
      c[5].classList.toggle('bad-num', !!st.last_error || (p.last_job && p.last_job.state === 'dead'));
      const pause = c[6].querySelector('button.pause');
      const paused = !!(s && s.paused);
      pause.dataset.paused = paused ? '1' : '0';
      setText(pause, paused ? 'Resume' : 'Pause');
      pause.setAttribute('aria-label', `${paused ? 'Resume' : 'Pause'} ${p.name}`);
    });
    $('#periodic-empty').hidden = ps.length > 0;
  }

  // ------------------------------------------------------------ find a job

  // findJob shows where a job is (GET /topics/{topic}/jobs/{id}: the gate's
  // lookup answer), each field a row of #find-result.
  async function findJob(topic, id, group) {
    const out = $('#find-result');
    const err = $('#find-err');
    let path = `/topics/${encodeURIComponent(topic)}/jobs/${encodeURIComponent(id)}`;
    if (group) path += `?group=${encodeURIComponent(group)}`;
    try {
      const v = await api('GET', path);
      const rows = [['state', v.state], ['redis partition', v.redis_partition], ['attempts', v.attempts],
        ['why', v.why], ['batch', v.batch], ['until', v.until ? clock(v.until) : ''], ['last error', v.last_error],
        ['result', v.result], ['note', v.note]];
      out.replaceChildren(...rows.filter(([, val]) => val !== undefined && val !== '' && val !== null)
        .flatMap(([k, val]) => [el('dt', { text: k }), el('dd', { class: k === 'state' ? 'find-state' : undefined, text: String(val) })]));
      out.hidden = false;
      err.hidden = true;
    } catch (e) {
      out.hidden = true;
      setText(err, e.text || String(e));
      err.hidden = false;
    }
  }

  // ------------------------------------------------------------------ jobs

  // listJobs shows a page of a topic's jobs (GET /jobs: every partition, a
  // state or all, paged by cursor), each with Cancel and Delete (admin).
  let jobsQuery = null;
  function jobsMsg(text, bad) {
    const m = $('#jobs-msg');
    m.className = 'msg ' + (bad ? 'bad' : 'ok');
    setText(m, text);
  }
  async function listJobs(cursor) {
    if (!jobsQuery) return;
    let path = `/jobs?topic=${encodeURIComponent(jobsQuery.topic)}&limit=50`;
    if (jobsQuery.state) path += `&state=${encodeURIComponent(jobsQuery.state)}`;
    if (cursor) path += `&cursor=${encodeURIComponent(cursor)}`;
    try {
      const page = await api('GET', path);
      const rows = (page.jobs || []).map((j) => {
        // A group's job is placed by its group (its lane, g/<group>).
        const base = `/topics/${encodeURIComponent(jobsQuery.topic)}/jobs/${encodeURIComponent(j.id)}`;
        const q = j.lane && j.lane.startsWith('g/') ? `?group=${encodeURIComponent(j.lane.slice(2))}` : '';
        const cancel = el('button', { type: 'button', class: 'write', text: 'Cancel' });
        const del = el('button', { type: 'button', class: 'danger write', text: 'Delete…' });
        cancel.addEventListener('click', () => act(cancel, jobsMsg, (o) => `${o.id}: ${o.outcome} (was ${o.was}). ${o.note}`,
          () => api('POST', `${base}/cancel${q}`)));
        del.addEventListener('click', () => {
          if (!window.confirm(`Delete job ${j.id}? Nothing of it is kept.`)) return;
          act(del, jobsMsg, (o) => `${o.id}: ${o.outcome} (was ${o.was}).`, () => api('DELETE', base + q));
        });
        const detail = j.state === 'running' ? `worker ${j.worker || '?'}` : (j.state === 'dead' ? (j.last_error || '') : (j.why || ''));
        return el('tr', null, el('td', { text: j.state }), el('td', { class: 'num', text: String(j.partition) }),
          el('td', { class: 'id', text: j.id }), el('td', { class: 'num', text: String(j.attempts) }),
          el('td', { text: j.until && !j.until.startsWith('0001') ? clock(j.until) : '' }), el('td', { class: 'err', text: detail }),
          el('td', { class: 'actions' }, cancel, ' ', del));
      });
      $('#jobs-table tbody').replaceChildren(...rows);
      $('#jobs-table').hidden = rows.length === 0;
      const next = $('#jobs-next');
      next.hidden = !page.next_cursor;
      next.dataset.cursor = page.next_cursor || '';
      jobsMsg(rows.length ? '' : 'No jobs on this page.', false);
    } catch (e) {
      jobsMsg(e.text || String(e), true);
    }
  }

  // ------------------------------------------------------------------ start

  function wire() {
    $('#login-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      token = $('#token').value.trim();
      try { sessionStorage.setItem(TOKEN_KEY, token); } catch (_) { /* in memory only */ }
      openDashboard();
    });
    $('#signout').addEventListener('click', () => {
      try { sessionStorage.removeItem(TOKEN_KEY); } catch (_) { /* nothing kept */ }
      token = '';
      showLogin('Token forgotten.');
    });
    $('#jobs-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      jobsQuery = { topic: $('#jobs-topic').value.trim(), state: $('#jobs-state').value };
      listJobs('');
    });
    $('#jobs-next').addEventListener('click', (ev) => listJobs(ev.currentTarget.dataset.cursor));
    $('#deadset-purge').addEventListener('click', (ev) => purgeAll(ev.currentTarget, 'redis'));
    $('#dlq-purge').addEventListener('click', (ev) => purgeAll(ev.currentTarget, 'kafka'));
    const nf = $('#limit-new');
    nf.addEventListener('submit', (ev) => {
      ev.preventDefault();
      const res = $('#limit-new-resource').value.trim();
      const msg = nf.querySelector('.msg');
      const say = (text, bad) => { msg.className = 'msg ' + (bad ? 'bad' : 'ok'); setText(msg, text); };
      if (!res) { say('Name the resource.', true); return; }
      act(nf.querySelector('button'), say, () => `Set the limit of ${res}.`,
        () => api('PUT', `/limits/${encodeURIComponent(res)}`, { rate: typed($('#limit-new-rate').value) }));
    });
    $('#topic-new').addEventListener('submit', (ev) => {
      ev.preventDefault();
      createTopic(ev.currentTarget);
    });
    $('#find-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      findJob($('#find-topic').value.trim(), $('#find-id').value.trim(), $('#find-group').value.trim());
    });
    window.addEventListener('hashchange', () => {
      if (/(?:^#|&)token=/.test(location.hash)) { readHashToken(); openDashboard(); }
    });
  }

  function main() {
    wire();
    try { token = sessionStorage.getItem(TOKEN_KEY) || ''; } catch (_) { token = ''; }
    readHashToken();
    // Without a token, ask whoami anyway: a console in insecure mode
    // (sluice dev) needs none, and one that does answers 401 or 403.
    openDashboard();
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', main);
  else main();
})();

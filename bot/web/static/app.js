// Threadbox web chat. Plain script, no build step, no external resources. All text from the server is
// set with textContent, never parsed as HTML.
'use strict';
(() => {
  const $ = (sel) => document.querySelector(sel);
  // Reactions as text: a machine without an emoji font (a server, CI) would show empty boxes.
  const REACTIONS = { eyes: ['seen', 'seen'], white_check_mark: ['✓ done', 'ok'], x: ['✗ failed', 'failed'] };
  const state = {
    me: null,
    conv: null, // the open conversation's id
    es: null, // its EventSource
    lastSeq: 0,
    progress: new Map(), // reply_to → progress element
    userMsgs: new Map(), // event_id → user message element
    listTimer: null,
    pending: null, // {sig, key}: the message whose send failed, and its Idempotency-Key
  };

  async function api(method, path, body, headers) {
    const opts = { method, headers: { ...(headers || {}) } };
    if (body instanceof FormData) {
      opts.body = body;
    } else if (body !== undefined) {
      opts.headers['Content-Type'] = 'application/json';
      opts.body = JSON.stringify(body);
    }
    const res = await fetch(path, opts);
    let data = null;
    if ((res.headers.get('Content-Type') || '').includes('application/json')) data = await res.json();
    if (!res.ok) {
      const err = new Error((data && data.error) || `${res.status} ${res.statusText}`);
      err.status = res.status;
      throw err;
    }
    return data;
  }

  function el(tag, props, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = v;
      else if (k.startsWith('data-')) e.setAttribute(k, v);
      else e[k] = v;
    }
    for (const c of children) if (c != null) e.append(c);
    return e;
  }

  const short = (id) => (id ? id.slice(0, 12) : 'none');
  const fmtTime = (s) => (s ? new Date(s).toLocaleString() : '–');
  function fmtSize(n) {
    if (n >= 1 << 20) return `${(n / (1 << 20)).toFixed(1)} MiB`;
    if (n >= 1 << 10) return `${(n / (1 << 10)).toFixed(1)} KiB`;
    return `${n} B`;
  }
  function showError(msg) { $('#error').textContent = msg || ''; }

  function textBlock(text, truncated) {
    const d = el('div', { class: 'text', dir: 'auto', text: text || '' });
    if (truncated) d.append(el('div', { class: 'muted', text: `… ${fmtSize(truncated)} more not shown` }));
    return d;
  }

  // ---- conversations ------------------------------------------------------------------------------

  async function loadConversations() {
    let data;
    try { data = await api('GET', '/api/conversations'); } catch (e) { showError(e.message); return; }
    const ul = $('#conversations');
    ul.replaceChildren();
    for (const c of data.conversations) {
      const li = el('li', { 'data-id': c.id, class: c.id === state.conv ? 'active' : '' });
      const a = el('a', { href: `#c=${c.id}`, dir: 'auto', text: c.title || `(new) ${c.id.slice(0, 6)}` });
      const s = c.session;
      li.append(a, el('span', { class: 'meta', text: s ? `${s.status} · gen ${s.generation}` : 'no sandbox yet' }));
      ul.append(li);
      if (c.id === state.conv) showSession(c);
    }
  }

  function refreshListSoon() {
    clearTimeout(state.listTimer);
    state.listTimer = setTimeout(loadConversations, 300);
  }

  function showSession(c) {
    if (c.title) $('#conv-title').textContent = c.title;
    const s = c.session;
    $('#conv-session').textContent = s
      ? `sandbox ${s.status} · ${s.provider} ${short(s.sandbox_id)} · generation ${s.generation}`
      : 'no sandbox yet';
  }

  async function newConversation() {
    const c = await api('POST', '/api/conversations', {});
    history.pushState(null, '', `#c=${c.id}`);
    await openConversation(c.id);
    loadConversations();
    return c.id;
  }

  async function openConversation(id) {
    if (state.es) state.es.close();
    Object.assign(state, { conv: id, es: null, lastSeq: 0 });
    state.progress.clear();
    state.userMsgs.clear();
    $('#messages').replaceChildren();
    $('#conv-title').textContent = id;
    $('#conv-session').textContent = '';
    let c;
    try {
      c = await api('GET', `/api/conversations/${encodeURIComponent(id)}`);
    } catch (e) {
      if (e.status !== 404) { showError(e.message); return; }
      c = { id, items: [], cursor: '' };
    }
    if (state.conv !== id) return; // another one was opened meanwhile
    showSession(c);
    for (const ev of c.items || []) render(ev);
    openStream(id, c.cursor);
    for (const li of document.querySelectorAll('#conversations li')) li.classList.toggle('active', li.dataset.id === id);
  }

  function openStream(id, cursor) {
    const url = `/api/conversations/${encodeURIComponent(id)}/events?after=${encodeURIComponent(cursor || '')}`;
    const es = new EventSource(url);
    state.es = es;
    const st = $('#stream-state');
    es.onopen = () => { st.textContent = '● live'; };
    es.onerror = () => { st.textContent = es.readyState === EventSource.CLOSED ? 'disconnected' : 'reconnecting…'; };
    es.onmessage = (m) => {
      if (state.es !== es) return;
      const ev = JSON.parse(m.data);
      if (ev.type === 'reset') { // the server cannot resume there (it restarted): reload
        es.close();
        openConversation(id);
        return;
      }
      render(ev);
      if (ev.type === 'reaction' || ev.type === 'message') refreshListSoon();
    };
  }

  // ---- rendering events ---------------------------------------------------------------------------

  function render(ev) {
    if (ev.seq) {
      if (ev.seq <= state.lastSeq) return;
      state.lastSeq = ev.seq;
    }
    const box = $('#messages');
    const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 80;
    switch (ev.type) {
      case 'message': {
        if (state.userMsgs.has(ev.event_id)) return;
        const d = el('div', { class: 'msg user', 'data-event-id': ev.event_id || '' },
          el('div', { class: 'who', text: ev.user || 'you' }), textBlock(ev.text, ev.truncated));
        for (const f of ev.files || []) d.append(el('div', { class: 'attachment', text: `attached: ${f.name} (${fmtSize(f.size)})` }));
        d.append(el('span', { class: 'reactions' }));
        box.append(d);
        state.userMsgs.set(ev.event_id, d);
        break;
      }
      case 'progress': {
        let p = state.progress.get(ev.reply_to);
        if (!p) {
          p = el('div', { class: 'msg progress', 'data-reply-to': ev.reply_to || '' });
          state.progress.set(ev.reply_to, p);
          box.append(p);
        }
        p.replaceChildren(textBlock(ev.text, ev.truncated));
        break;
      }
      case 'post':
        box.append(el('div', { class: 'msg bot', 'data-reply-to': ev.reply_to || '' }, textBlock(ev.text, ev.truncated)));
        break;
      case 'upload':
        box.append(artifact(ev));
        break;
      case 'reaction': {
        const m = state.userMsgs.get(ev.reply_to);
        if (!m) break;
        const [label, cls] = REACTIONS[ev.reaction] || [`:${ev.reaction}:`, 'other'];
        const r = m.querySelector('.reactions');
        // A turn's final reaction replaces "seen".
        if (ev.reaction !== 'eyes') r.querySelector('.reaction.seen')?.remove();
        r.append(el('span', { class: `reaction ${cls}`, text: label }));
        break;
      }
      default:
        return;
    }
    if (atBottom) box.scrollTop = box.scrollHeight;
  }

  function artifact(ev) {
    const f = ev.file;
    const d = el('div', { class: 'msg bot artifact', 'data-reply-to': ev.reply_to || '' });
    const link = el('a', { class: 'artifact-link', href: f.url, download: f.name, text: f.name });
    const label = el('span', {}, link, el('span', { class: 'muted', text: ` ${fmtSize(f.size)}` }));
    if (f.image) {
      const img = el('img', { class: 'artifact-img', src: f.url, alt: f.name });
      d.append(el('figure', {}, img, el('figcaption', {}, label)));
    } else {
      d.append(label);
    }
    return d;
  }

  // ---- sending ------------------------------------------------------------------------------------

  // newKey is a message's Idempotency-Key: 32 hex digits (crypto.randomUUID needs a secure context;
  // the chat may be served over plain http on a LAN).
  function newKey() {
    const b = new Uint8Array(16);
    crypto.getRandomValues(b);
    return Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
  }

  async function send(textOverride) {
    const ta = $('#text');
    const fileInput = $('#files');
    const text = textOverride ?? ta.value;
    const files = textOverride === undefined ? [...fileInput.files] : [];
    if (!text.trim() && files.length === 0) return;
    $('#send').disabled = true;
    try {
      const id = state.conv || (await newConversation());
      const url = `/api/conversations/${encodeURIComponent(id)}/messages`;
      // A message sent again unchanged after an error keeps its key, so that the bot knows it for
      // the same message: recorded before the error, it is answered once, not run twice.
      const sig = JSON.stringify([id, text, files.map((f) => [f.name, f.size, f.lastModified])]);
      if (!state.pending || state.pending.sig !== sig) state.pending = { sig, key: newKey() };
      const hdr = { 'Idempotency-Key': state.pending.key };
      if (files.length) {
        const fd = new FormData();
        fd.append('text', text);
        for (const f of files) fd.append('file', f, f.name);
        await api('POST', url, fd, hdr);
      } else {
        await api('POST', url, { text }, hdr);
      }
      state.pending = null;
      if (textOverride === undefined) { ta.value = ''; fileInput.value = ''; }
      showError('');
    } catch (e) {
      showError(e.message);
    } finally {
      $('#send').disabled = false;
    }
  }

  // ---- operations view ----------------------------------------------------------------------------

  async function loadOps() {
    const body = $('#sessions tbody');
    let data;
    try {
      data = await api('GET', '/api/admin/sessions');
    } catch (e) {
      body.replaceChildren();
      $('#ops-output').textContent = e.message;
      return;
    }
    body.replaceChildren();
    for (const s of data.sessions) {
      const thread = s.conversation_id
        ? el('a', { href: `#c=${s.conversation_id}`, text: s.thread_key })
        : document.createTextNode(s.thread_key);
      const actions = el('td', { class: 'actions' });
      // Looking into the sandbox: its runtime's log, its resource use, and how to open a shell in it.
      for (const cmd of ['logs', 'stats', 'attach']) {
        const b = el('button', { type: 'button', text: cmd, 'data-cmd': cmd });
        b.addEventListener('click', () => adminRun(cmd, { thread: s.thread_key }));
        actions.append(b);
      }
      for (const cmd of ['pause', 'resume', 'destroy']) {
        const b = el('button', { type: 'button', text: cmd, 'data-cmd': cmd, class: cmd === 'destroy' ? 'danger' : '' });
        b.addEventListener('click', () => {
          if (cmd === 'destroy' && !confirm(`Destroy the sandbox of ${s.thread_key}? Its history is kept.`)) return;
          adminRun(cmd, { thread: s.thread_key });
        });
        actions.append(b);
      }
      body.append(el('tr', { 'data-thread': s.thread_key },
        el('td', {}, thread), el('td', { class: `status ${s.status}`, text: s.status }),
        el('td', { text: s.provider }), el('td', { text: String(s.generation) }),
        el('td', { text: short(s.sandbox_id) }),
        el('td', { class: 'repo', text: s.repo ? s.repo + (s.base_branch ? `@${s.base_branch}` : '') : '' }),
        el('td', { class: 'branch', text: s.work_branch || '' }),
        el('td', { class: 'pushed', text: s.pushed_commit ? `${s.pushed_commit.slice(0, 12)} ${fmtTime(s.pushed_at)}` : '' }),
        el('td', { text: fmtTime(s.last_activity_at) }),
        el('td', { text: fmtTime(s.paused_at) }), el('td', { text: fmtTime(s.destroyed_at) }),
        el('td', { class: 'err', text: s.last_error || '' }), actions));
    }
    if (data.truncated) $('#ops-output').textContent = `Only the first ${data.sessions.length} sessions are shown.`;
  }

  async function adminRun(cmd, body) {
    const out = $('#ops-output');
    out.textContent = `${cmd}…`;
    try {
      const r = await api('POST', `/api/admin/${cmd}`, body || {});
      out.textContent = r.output;
    } catch (e) {
      out.textContent = e.message;
    }
    loadOps();
  }

  function showTab(ops) {
    $('#chat-view').hidden = ops;
    $('#ops-view').hidden = !ops;
    $('#tab-chat').classList.toggle('active', !ops);
    $('#tab-ops').classList.toggle('active', ops);
    if (ops) loadOps();
  }

  // ---- wiring -------------------------------------------------------------------------------------

  function fromHash() {
    const m = /^#c=([A-Za-z0-9_-]{1,64})$/.exec(location.hash);
    return m ? m[1] : null;
  }

  async function start() {
    $('#new-conv').addEventListener('click', () => newConversation().catch((e) => showError(e.message)));
    $('#composer').addEventListener('submit', (e) => { e.preventDefault(); send(); });
    $('#text').addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); send(); }
    });
    $('#stop').addEventListener('click', () => { if (state.conv) send('stop'); });
    $('#tab-chat').addEventListener('click', () => showTab(false));
    $('#tab-ops').addEventListener('click', () => showTab(true));
    $('#ops-refresh').addEventListener('click', loadOps);
    $('#ops-stats').addEventListener('click', () => adminRun('stats'));
    $('#ops-reap-dry').addEventListener('click', () => adminRun('reap', { dry_run: true }));
    $('#ops-reap').addEventListener('click', () => adminRun('reap'));
    $('#ops-drain').addEventListener('click', () => {
      if (confirm('Drain: stop taking new turns in this process and let running ones finish?')) adminRun('drain');
    });
    window.addEventListener('hashchange', () => {
      const id = fromHash();
      if (id && id !== state.conv) { showTab(false); openConversation(id); }
    });
    try {
      state.me = await api('GET', '/api/me');
      $('#me').textContent = state.me.actor + (state.me.admin ? ' (admin)' : '');
    } catch (e) {
      showError(e.message);
    }
    await loadConversations();
    const id = fromHash();
    if (id) await openConversation(id);
    document.body.dataset.ready = 'true'; // for tests and scripts: the page is wired up
  }

  start();
})();

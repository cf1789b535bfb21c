// Sluice dashboard: live updates and confirmations. Served at /ui/app.js.
// Pages carry no inline script or event handler (script-src 'self'), and
// every page works without this file: forms post and the server asks for
// confirmation itself.
(function () {
  'use strict';

  // While the server fails, polls back off up to this (ms): a dashboard
  // left open must not hammer a Worker that is down.
  var BACKOFF_MS_MAX = 60000;

  var body = document.body;
  var period = parseInt(body.getAttribute('data-refresh-ms') || '0', 10) || 0;
  var delay = period;
  var status = document.getElementById('live-status');

  function say(text) {
    if (status) status.textContent = text;
  }

  // Never swap a region under the operator's hands: not while a dialog is
  // open, nor while a field inside a live region has focus.
  function busy() {
    if (document.querySelector('dialog[open]')) return true;
    var a = document.activeElement;
    return !!(a && a.closest && a !== body && a.closest('[data-live]') && a.closest('form'));
  }

  // Replace each live region (an element with data-live and an id) by the
  // same region of the freshly fetched page.
  function swap(doc) {
    var regions = document.querySelectorAll('[data-live][id]');
    for (var i = 0; i < regions.length; i++) {
      var old = regions[i];
      var fresh = doc.getElementById(old.id);
      if (fresh && fresh.hasAttribute('data-live')) {
        old.replaceWith(document.importNode(fresh, true));
      }
    }
    var next = doc.body && doc.body.getAttribute('data-refresh-ms');
    if (next !== null && next !== undefined) period = parseInt(next, 10) || 0;
  }

  function schedule() {
    if (period > 0) setTimeout(tick, delay);
  }

  function tick() {
    if (document.hidden || busy()) {
      schedule();
      return;
    }
    fetch(location.href, {
      credentials: 'same-origin',
      redirect: 'manual',
      cache: 'no-store',
      headers: { 'Accept': 'text/html' }
    }).then(function (r) {
      // An expired Access session answers with a redirect to its login.
      if (r.type === 'opaqueredirect' || r.status === 401 || r.status === 403) {
        say('signed out: reload the page');
        period = 0;
        return null;
      }
      if (!r.ok) throw new Error('HTTP ' + r.status);
      return r.text();
    }).then(function (text) {
      if (text === null) return;
      swap(new DOMParser().parseFromString(text, 'text/html'));
      delay = period;
      say(period > 0 ? 'live' : '');
      schedule();
    }).catch(function () {
      delay = Math.min(Math.max(delay, 1000) * 2, BACKOFF_MS_MAX);
      say('offline: retrying');
      schedule();
    });
  }

  // Confirmation: a form with data-confirm opens the page's dialog; only
  // Confirm submits it, with confirmed=1. Without dialog support the form
  // posts as it is and the server's confirmation page asks instead.
  var dialog = document.getElementById('confirm-dialog');
  var text = document.getElementById('confirm-text');
  var pending = null;

  document.addEventListener('submit', function (ev) {
    var form = ev.target;
    if (!(form instanceof HTMLFormElement) || !form.hasAttribute('data-confirm')) return;
    var confirmed = form.querySelector('input[name="confirmed"]');
    if (!confirmed || !dialog || !text || typeof dialog.showModal !== 'function') return;
    ev.preventDefault();
    pending = form;
    text.textContent = form.getAttribute('data-confirm');
    dialog.returnValue = '';
    dialog.showModal();
  });

  if (dialog) {
    dialog.addEventListener('close', function () {
      var form = pending;
      pending = null;
      if (!form || dialog.returnValue !== 'ok') return;
      var confirmed = form.querySelector('input[name="confirmed"]');
      confirmed.value = '1';
      form.submit();
      // The form's data was taken at submit(); reset for a page restored
      // from the back-forward cache.
      confirmed.value = '';
    });
  }

  // Sign-in link (`npm start` prints /ui/login#token=...): the fragment
  // fills the token field and is dropped from the address bar and history;
  // a fragment is never sent to the server, so the token reaches no log.
  var login = document.getElementById('login');
  var match = /^#token=([A-Za-z0-9._~-]+)$/.exec(location.hash);
  if (login && match) {
    history.replaceState(null, '', location.pathname + location.search);
    var field = login.querySelector('input[name="token"]');
    if (field) {
      field.value = match[1];
      login.submit();
    }
  }

  if (period > 0) {
    say('live');
    schedule();
  }
})();

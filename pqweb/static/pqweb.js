// pqweb: the stale banner. A live part of a page (htmx polling) whose refresh fails keeps its
// old content: the banner then says since when the data shown is not refreshed, until every
// failing part has refreshed again (another part's success does not clear it).
// (A file of its own: the Content-Security-Policy allows no inline script.)
(function () {
  "use strict";
  var since = null;
  var failing = new Set();  // the live parts whose last refresh failed

  function banner() { return document.getElementById("stale"); }

  function part(event) { return event.detail && event.detail.elt ? event.detail.elt : event.target; }

  function failed(event) {
    var el = banner();
    if (!el) { return; }
    failing.add(part(event));
    if (since === null) { since = new Date(); }
    var status = event.detail && event.detail.xhr ? event.detail.xhr.status : 0;
    var why = status ? "the dashboard answered " + status : "the dashboard did not answer";
    el.textContent = "Not refreshed since " + since.toLocaleTimeString() + " (" + why +
      "): the data shown may be out of date.";
    el.hidden = false;
  }

  function succeeded(event) {
    var xhr = event.detail && event.detail.xhr;
    if (!xhr || xhr.status < 200 || xhr.status >= 300 || !event.detail.successful) { return; }
    failing.delete(part(event));
    failing.forEach(function (el) { if (!el.isConnected) { failing.delete(el); } });
    if (failing.size > 0) { return; }
    since = null;
    var el = banner();
    if (el) { el.hidden = true; }
  }

  document.addEventListener("htmx:responseError", failed);
  document.addEventListener("htmx:sendError", failed);
  document.addEventListener("htmx:timeout", failed);
  document.addEventListener("htmx:afterRequest", succeeded);
})();

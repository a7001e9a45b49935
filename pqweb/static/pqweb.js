// pqweb: the stale banner. A live part of a page (htmx polling) whose refresh fails keeps its
// old content: the banner then says since when the data shown is not refreshed, until a refresh
// succeeds again. (A file of its own: the Content-Security-Policy allows no inline script.)
(function () {
  "use strict";
  var since = null;

  function banner() { return document.getElementById("stale"); }

  function failed(event) {
    var el = banner();
    if (!el) { return; }
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
    since = null;
    var el = banner();
    if (el) { el.hidden = true; }
  }

  document.addEventListener("htmx:responseError", failed);
  document.addEventListener("htmx:sendError", failed);
  document.addEventListener("htmx:timeout", failed);
  document.addEventListener("htmx:afterRequest", succeeded);
})();

/* What pkgdown 2.0.7's pkgdown.js does with libraries from CDNs (bootstrap-toc, clipboard.js,
 * fuse.js, autocomplete.js, mark.js, headroom), done here with none, so that every page works
 * offline and from a file: the table of contents, copy buttons on code, the search box, and the
 * search terms marked on the page a result leads to. jQuery and Bootstrap come with the site. */
(function () {
  "use strict";
  // The site's root, from this script's own address (pages sit at depths 0 to 2).
  var script = document.currentScript;
  var root = script ? script.src.replace(/tfdistributed\.js(\?.*)?$/, "") : "";

  function ready(fn) {
    if (document.readyState !== "loading") fn();
    else document.addEventListener("DOMContentLoaded", fn);
  }

  function element(tag, attrs, text) {
    var el = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { el.setAttribute(k, attrs[k]); });
    if (text !== undefined) el.textContent = text;
    return el;
  }

  /* Table of contents: h2 and h3 of the page's main part, as bootstrap-toc builds it. */
  function buildToc() {
    var nav = document.getElementById("toc");
    if (!nav) return;
    var top = element("ul", { "class": "nav nav-pills flex-column" });
    var current = null;
    document.querySelectorAll("main h2, main h3").forEach(function (h) {
      if (h.hasAttribute("data-toc-skip") || h.closest(".page-header")) return;
      var id = h.id || (h.parentElement && h.parentElement.id);
      if (!id) return;
      var li = element("li");
      var text = h.cloneNode(true);
      text.querySelectorAll("a.anchor").forEach(function (a) { a.remove(); });
      li.appendChild(element("a", { "class": "nav-link", href: "#" + id }, text.textContent.trim()));
      if (h.tagName === "H2" || !current) {
        top.appendChild(li);
        current = li;
      } else {
        var sub = current.querySelector("ul");
        if (!sub) {
          sub = element("ul", { "class": "nav nav-pills flex-column" });
          current.appendChild(sub);
        }
        sub.appendChild(li);
      }
    });
    if (top.children.length) nav.appendChild(top);
    else nav.style.display = "none";
  }

  /* A copy button on each code block, without the output lines (#>). */
  function addCopyButtons() {
    if (!(navigator.clipboard && window.isSecureContext)) return;
    document.querySelectorAll("div.sourceCode").forEach(function (block) {
      var button = element("button", { type: "button", "class": "btn btn-sm btn-light btn-copy-ex",
                                       title: "Copy to clipboard", "aria-label": "Copy to clipboard" },
                           "Copy");
      button.addEventListener("click", function () {
        var code = block.querySelector("pre").textContent.replace(/\n#>[^\n]*/g, "");
        navigator.clipboard.writeText(code).then(function () {
          button.textContent = "Copied";
          setTimeout(function () { button.textContent = "Copy"; }, 1500);
        });
      });
      block.classList.add("hasCopyButton");
      block.insertBefore(button, block.firstChild);
    });
  }

  /* Search: pkgdown's search.json (one record per section of every page), every word of the
   * query found in the section, its title weighing most. */
  var index = null;
  function loadIndex(input) {
    if (index) return Promise.resolve(index);
    return fetch(root + "search.json").then(function (r) { return r.json(); })
      .then(function (data) { index = data; return data; });
  }

  function search(query) {
    var words = query.toLowerCase().split(/\s+/).filter(function (w) { return w.length > 1; });
    if (!words.length) return [];
    var hits = [];
    index.forEach(function (entry) {
      var title = ((entry.title || "") + " " + (entry.what || "")).toLowerCase();
      var body = ((entry.text || "") + " " + (entry.code || "")).toLowerCase();
      var score = 0;
      for (var i = 0; i < words.length; i++) {
        if (title.indexOf(words[i]) >= 0) score += 3;
        else if (body.indexOf(words[i]) >= 0) score += 1;
        else return;
      }
      if (entry.title === entry.what) score += 2;   // the page itself before its sections
      hits.push({ entry: entry, score: score });
    });
    hits.sort(function (a, b) { return b.score - a.score; });
    return hits.slice(0, 15).map(function (h) { return h.entry; });
  }

  function href(entry, query) {
    // search.json's paths are site-absolute ("/articles/x.html"); make them relative to the root.
    var path = entry.path.replace(/^[a-z]+:\/\/[^/]+/, "").replace(/^\//, "");
    // pkgdown writes the id of a page's own entry as "None".
    var anchor = entry.id && entry.id !== "None" ? "#" + entry.id : "";
    return root + path + "?q=" + encodeURIComponent(query) + anchor;
  }

  function setUpSearch() {
    var input = document.getElementById("search-input");
    if (!input) return;
    var menu = element("div", { "class": "dropdown-menu tfd-search-results", role: "listbox" });
    input.parentNode.style.position = "relative";
    input.parentNode.appendChild(menu);
    input.parentNode.addEventListener("submit", function (e) {
      e.preventDefault();
      var first = menu.querySelector("a");
      if (first) window.location.href = first.href;
    });
    input.addEventListener("focus", function () { loadIndex(); });
    input.addEventListener("input", function () {
      var query = input.value.trim();
      loadIndex().then(function () {
        menu.textContent = "";
        if (query.length < 2) { menu.classList.remove("show"); return; }
        var results = search(query);
        if (!results.length) {
          menu.appendChild(element("span", { "class": "dropdown-item-text" }, "No results found."));
        }
        results.forEach(function (entry) {
          var a = element("a", { "class": "dropdown-item", href: href(entry, query) });
          a.appendChild(element("small", { "class": "text-muted" }, entry.dir + " > "));
          a.appendChild(document.createTextNode(entry.title +
            (entry.what && entry.what !== entry.title ? " > " + entry.what : "")));
          menu.appendChild(a);
        });
        menu.classList.add("show");
      });
    });
    document.addEventListener("click", function (e) {
      if (!input.parentNode.contains(e.target)) menu.classList.remove("show");
    });
  }

  /* The words a search result was found for, marked on the page it leads to. */
  function markQuery() {
    var query = new URL(window.location.href).searchParams.get("q");
    var main = document.querySelector("main");
    if (!query || !main) return;
    var words = query.toLowerCase().split(/\s+/).filter(function (w) { return w.length > 1; });
    var walker = document.createTreeWalker(main, NodeFilter.SHOW_TEXT);
    var nodes = [];
    while (walker.nextNode()) nodes.push(walker.currentNode);
    nodes.forEach(function (node) {
      var text = node.nodeValue, lower = text.toLowerCase();
      words.forEach(function (w) {
        var at = lower.indexOf(w);
        if (at < 0 || !node.parentNode || node.parentNode.tagName === "MARK") return;
        var hit = node.splitText(at);
        hit.splitText(w.length);
        var mark = element("mark");
        hit.parentNode.replaceChild(mark, hit);
        mark.appendChild(hit);
      });
    });
  }

  ready(function () {
    buildToc();
    addCopyButtons();
    setUpSearch();
    markQuery();
    var $ = window.jQuery;
    if ($ && $.fn.scrollspy && document.getElementById("toc")) {
      $("body").scrollspy({ target: "#toc", offset: $("nav.navbar").outerHeight() + 1 });
    }
    if ($ && $.fn.popover) {
      $('[data-bs-toggle="popover"]').popover({ container: "body", html: true, trigger: "focus",
                                                placement: "top", sanitize: false });
      $('[data-bs-toggle="tooltip"]').tooltip();
    }
  });
})();

/* datasette-polaris: the explorer's two behaviours that need a script (the page works without it).
   1. Each hit's text box opens at its first marked word, so the reader sees why it ranked.
   2. The document filter: as one types, documents.json (bounded by _size) fills the box's
      suggestions; picking one adds it to the scope as a checked box. */
(function () {
  "use strict";

  function showFirstMatch(box) {
    var mark = box.querySelector("mark");
    if (!mark) { return; }
    var top = mark.getBoundingClientRect().top - box.getBoundingClientRect().top + box.scrollTop;
    var line = parseFloat(getComputedStyle(box).lineHeight) || 20;
    if (top + mark.offsetHeight > box.clientHeight - line) {
      box.scrollTop = Math.max(0, top - line * 1.5);  // a line and a half of what leads to it
    }
  }
  document.querySelectorAll(".polaris-hit .polaris-text").forEach(showFirstMatch);

  var input = document.querySelector(".polaris-doc-filter");
  if (!input) { return; }
  var list = document.getElementById(input.getAttribute("list"));
  var chosen = document.querySelector(".polaris-doc-chosen");
  var found = document.querySelector(".polaris-doc-found");
  var known = {};
  var timer = null;
  var asked = 0;

  function fill(rows, count, typed) {
    list.textContent = "";
    known = {};
    rows.forEach(function (row) {
      var option = document.createElement("option");
      option.value = row.id;
      option.label = (row.path || row.id) + " · " + row.collection + " · " + row.chunks + " chunk" + (row.chunks === 1 ? "" : "s");
      list.appendChild(option);
      known[row.id] = row;
    });
    found.textContent = typed ? (count === 0 ? "no document's path holds " + JSON.stringify(typed)
      : count + " document" + (count === 1 ? "" : "s") + (count > rows.length ? ", the first " + rows.length + " listed" : "")) : "";
  }

  function ask() {
    var typed = input.value.trim();
    if (!typed || known[typed]) { return; }
    var mine = ++asked;
    var url = input.dataset.source + "?_size=20&q=" + encodeURIComponent(typed);
    fetch(url, {headers: {Accept: "application/json"}}).then(function (r) { return r.json(); }).then(function (data) {
      if (mine === asked && data.ok) { fill(data.rows, data.count, typed); }
    }).catch(function () { found.textContent = ""; });
  }

  function choose() {
    var row = known[input.value];
    if (!row) { return; }
    var label = document.createElement("label");
    label.className = "polaris-check";
    var box = document.createElement("input");
    box.type = "checkbox";
    box.name = "document";
    box.value = row.id;
    box.checked = true;
    label.appendChild(box);
    label.appendChild(document.createTextNode(" " + (row.path || row.id)));
    chosen.appendChild(label);
    input.value = "";
    found.textContent = "";
  }

  input.addEventListener("input", function () {
    if (known[input.value]) { choose(); return; }
    clearTimeout(timer);
    timer = setTimeout(ask, 120);
  });
  input.addEventListener("change", choose);
  input.form.addEventListener("submit", function () {
    if (!input.value.trim()) { input.disabled = true; }  // an empty box adds no document= to the link
  });
  window.addEventListener("pageshow", function () { input.disabled = false; });
})();

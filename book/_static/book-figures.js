/* Figures and wide tables on any screen (issue #19).
 *
 * Figures: a figure is drawn for the page column (5 in; an SVG, or a 150-dpi PNG for a slider's
 * frames); on a phone it is shown 342 px wide. Tapping (or clicking) a figure opens it in a dialog
 * that scrolls and can be pinch-zoomed: a PNG at its natural size (765 px), an SVG at 2.25 times the
 * width it had on the page (the same 765 px on a phone), or at the window's width when that is wider
 * (a laptop). A tap on the dialog, its close button or Escape closes it.
 *
 * Wide tables: a table wider than its column scrolls inside it (reader.css); the element that scrolls
 * gets the class "table-scrolls": book-layout.css keeps the first column in view while the rest
 * scrolls, shows the scroll bar and fades the edge that hides more columns.
 */
(function () {
  "use strict";

  var dialog = null;

  function zoomDialog() {
    if (dialog) { return dialog; }
    dialog = document.createElement("dialog");
    dialog.className = "figure-zoom";
    dialog.setAttribute("aria-label", "Figure at full size");
    var close = document.createElement("button");
    close.type = "button";
    close.className = "figure-zoom-close";
    close.setAttribute("aria-label", "Close");
    close.textContent = "\u00d7";
    var frame = document.createElement("div");
    frame.className = "figure-zoom-frame";
    dialog.appendChild(close);
    dialog.appendChild(frame);
    dialog.addEventListener("click", function () { dialog.close(); });
    document.body.appendChild(dialog);
    return dialog;
  }

  function open(img) {
    var d = zoomDialog();
    var frame = d.querySelector(".figure-zoom-frame");
    frame.textContent = "";
    var big = document.createElement("img");
    big.src = img.currentSrc || img.src;
    big.alt = img.alt;
    if (/\.svg([?#]|$)/i.test(big.src) || big.src.indexOf("data:image/svg") === 0) {
      var shown = img.getBoundingClientRect().width;
      var room = document.documentElement.clientWidth;
      big.style.width = Math.round(room >= 1.5 * shown ? room : 2.25 * shown) + "px";
    }
    frame.appendChild(big);
    d.showModal();
  }

  function figures() {
    return document.querySelectorAll(".bd-article figure img, .bd-article .cell_output img");
  }

  function markFigures() {
    figures().forEach(function (img) {
      if (img.dataset.bookZoom) { return; }
      img.dataset.bookZoom = "1";
      img.classList.add("figure-zoomable");
      img.setAttribute("tabindex", "0");
      img.setAttribute("role", "button");
      img.setAttribute("title", "Show the figure at full size");
      img.addEventListener("click", function (ev) { ev.preventDefault(); open(img); });
      img.addEventListener("keydown", function (ev) {
        if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); open(img); }
      });
    });
  }

  function tableEdges(el) {
    var end = el.scrollLeft + el.clientWidth >= el.scrollWidth - 1;
    el.classList.toggle("table-scrolled-end", end);
  }

  // The element that scrolls: the table itself (reader.css makes it a scrolling block) or, in a theme
  // without that rule, the theme's container around it.
  function scroller(table) {
    var box = table.parentElement;
    if (table.scrollWidth > table.clientWidth + 1 || !box || !box.classList.contains("pst-scrollable-table-container")) {
      return table;
    }
    return box;
  }

  function markTables() {
    document.querySelectorAll(".bd-article table").forEach(function (table) {
      var el = scroller(table);
      var wide = el.scrollWidth > el.clientWidth + 1;
      el.classList.toggle("table-scrolls", wide);
      if (wide && !el.dataset.bookScroll) {
        el.dataset.bookScroll = "1";
        el.addEventListener("scroll", function () { tableEdges(el); }, {passive: true});
      }
      if (wide) { tableEdges(el); }
    });
  }

  function init() { markFigures(); markTables(); }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
  window.addEventListener("load", markTables);
  window.addEventListener("resize", function () { window.requestAnimationFrame(markTables); });
})();

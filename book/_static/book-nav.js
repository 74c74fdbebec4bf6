/* Sidebar toggles that work (issue #11).
 *
 * pydata-sphinx-theme 0.17 and sphinx-book-theme 1.3 both bind their sidebar toggles with
 * document.querySelector(".primary-toggle") / (".secondary-toggle"): the FIRST such button, which
 * is pydata's top navbar (hidden by reader.css). The buttons a reader sees — sphinx-book-theme's
 * header ☰ and "contents" — therefore did nothing at any width. This forwards a click on any other
 * toggle to the first one, where both themes' handlers live (phone: the navigation dialog opens;
 * desktop ≥ 992 px: the primary sidebar collapses and comes back).
 *
 * It also closes Bootstrap tooltips that a tap leaves open (on touch screens the tooltip of the
 * tapped button stayed on top of its neighbour, the search button), and closes the phone's
 * navigation or contents dialog when one of its links is tapped (issue #19).
 */
(function () {
  "use strict";

  function hideTooltips() {
    document.querySelectorAll(".tooltip.show, .tooltip").forEach(function (t) { t.remove(); });
  }

  document.addEventListener("click", function (ev) {
    var btn = ev.target && ev.target.closest && ev.target.closest(".primary-toggle, .secondary-toggle");
    if (!btn) { return; }
    var kind = btn.classList.contains("primary-toggle") ? ".primary-toggle" : ".secondary-toggle";
    var first = document.querySelector(kind);
    if (!first || first === btn) { return; }
    ev.preventDefault();
    ev.stopPropagation();
    first.click();
    btn.blur();
    hideTooltips();
  }, true);

  // Phones: the navigation and the page contents open as dialogs (pydata-sphinx-theme) that stayed
  // open over the text after a tap on one of their links. A tap on a link closes its dialog; the
  // link is then followed as usual (an in-page section scrolls into view).
  document.addEventListener("click", function (ev) {
    var link = ev.target && ev.target.closest && ev.target.closest("a[href]");
    if (!link) { return; }
    var dialog = link.closest("dialog#pst-primary-sidebar-modal, dialog#pst-secondary-sidebar-modal");
    if (dialog && dialog.open) { dialog.close(); }
  });

  // A tooltip shown by a tap (touch) or focus stays until the pointer leaves; remove it after taps.
  document.addEventListener("touchend", function () { window.setTimeout(hideTooltips, 0); }, true);
  document.addEventListener("focusout", function () { window.setTimeout(hideTooltips, 0); }, true);
})();

/* Display equations that are wider than the column (issue #11).
 *
 * Every display equation (MathJax's mjx-container) scrolls inside the column (book-layout.css:
 * overflow-x: auto). Once
 * MathJax has typeset the page, and after every resize, each display that is wider than its box gets
 * the class "math-scrolls": book-layout.css then draws a visible scroll bar and fades the formula
 * out at the edge that hides more of it, so that a reader on a phone sees that the line continues.
 * Scrolling moves the fade ("math-scrolled": both edges, "math-scrolled-end": left edge only).
 */
(function () {
  "use strict";

  function edges(el) {
    var end = el.scrollLeft + el.clientWidth >= el.scrollWidth - 1;
    el.classList.toggle("math-scrolled", el.scrollLeft > 0 && !end);
    el.classList.toggle("math-scrolled-end", el.scrollLeft > 0 && end);
  }

  function mark() {
    document.querySelectorAll('.bd-article mjx-container[display="true"]').forEach(function (el) {
      var wide = el.scrollWidth > el.clientWidth + 1;
      el.classList.toggle("math-scrolls", wide);
      if (wide && !el.dataset.bookScroll) {
        el.dataset.bookScroll = "1";
        el.addEventListener("scroll", function () { edges(el); }, {passive: true});
      }
      if (wide) { edges(el); }
    });
  }

  function whenTypeset() {
    var mj = window.MathJax;
    if (mj && mj.startup && mj.startup.promise) {
      mj.startup.promise.then(mark);
    } else {
      mark();
    }
  }

  if (document.readyState === "complete") {
    whenTypeset();
  } else {
    window.addEventListener("load", whenTypeset);
  }
  window.addEventListener("resize", function () { window.requestAnimationFrame(mark); });
})();

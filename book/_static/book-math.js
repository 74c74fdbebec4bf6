/* Display equations that are wider than the column (issue #11).
 *
 * Every display equation (MathJax's mjx-container) scrolls inside the column (book-layout.css:
 * overflow-x: auto). Once
 * MathJax has typeset the page, and after every resize, each display that is wider than its box gets
 * the class "math-scrolls": book-layout.css then draws a visible scroll bar and a shadow at the edge
 * that hides more formula, so that a reader on a phone sees that the line continues.
 */
(function () {
  "use strict";

  function mark() {
    document.querySelectorAll('.bd-article mjx-container[display="true"]').forEach(function (el) {
      el.classList.toggle("math-scrolls", el.scrollWidth > el.clientWidth + 1);
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

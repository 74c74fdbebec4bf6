/* Stand-in for pydata-sphinx-theme's scripts/fontawesome.js (issue #32).
 *
 * The theme loads Font Awesome's SVG+JS bundle (1.5 MB) on every page; all it does here is redraw the
 * header's icons (<i class="fa-...">) as inline SVG. The theme's own CSS (pydata-sphinx-theme.css)
 * already draws every Font Awesome icon from the webfonts it ships (_static/vendor/fontawesome/webfonts,
 * 280 KB for the two faces the book uses, loaded only where an icon needs them), so the bundle is
 * redundant. Sphinx copies html_static_path (book/_static, added by book/tools/book_reader.py) after the
 * theme's static files, so this file replaces the bundle under the same name; the theme's <script> tag
 * then loads these few bytes. The book registers no custom icons (the bundle's only other use).
 * tests/test_browser_layout.py checks the size of the file and that the header icons are drawn.
 */

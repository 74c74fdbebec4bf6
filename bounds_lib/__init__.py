"""bounds_lib — executable companion to Sakai & Imaizumi (arXiv 2605.07297)."""
__version__ = "0.1.0"

"""batchscope's version, in a module of its own so that any layer can read it without
importing the package's front (``batchscope/__init__.py`` imports the API)."""

__version__ = "0.2.0"

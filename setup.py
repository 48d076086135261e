"""Build hook for the one optional C extension (storage/_recwalk.c, the compiled record walk).

Everything else is configured in pyproject.toml. The extension is optional: without a compiler or
Python's headers the build only warns, the package installs without it, and
storage.record_validation falls back to its pure-Python walk.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("storage._recwalk", ["storage/_recwalk.c"], optional=True)])

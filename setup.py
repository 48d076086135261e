"""Build hook for the two optional C extensions: storage/_recwalk.c (the compiled record walk) and
spark_jobs/_record_columns.c (records decoded into Arrow column buffers for the Spark source).

Everything else is configured in pyproject.toml. The extensions are optional: without a compiler or
Python's headers the build only warns, the package installs without them, storage.record_validation
falls back to its pure-Python walk and the Spark source reads through librdkafka.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("storage._recwalk", ["storage/_recwalk.c"], optional=True),
                   Extension("spark_jobs._record_columns", ["spark_jobs/_record_columns.c"], optional=True)])

"""PySpark structured-streaming source/sink for kbroker and the jobs built on them."""

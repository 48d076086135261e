"""``uppercase``: the seeds' consume-transform-produce example as a Spark streaming query.

Reads ``--input`` (default topic1) with read_committed, upper-cases each value (UTF-8), keeps the
key, and writes to ``--output`` (default topic2) through the exactly-once kbroker sink. Offsets and
progress live in ``--checkpoint``; rerunning with the same checkpoint resumes where it stopped,
and a batch that was in flight during a crash is replayed without writing anything twice.

    python -m spark_jobs.uppercase --bootstrap 127.0.0.1:9092 --checkpoint /tmp/uppercase-ck --available-now
    spark-submit --master 'local[2]' spark_jobs/uppercase.py --checkpoint /tmp/uppercase-ck
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql.functions import col, upper

from spark_jobs.jobcli import base_parser, quiet_logging, read_stream, run, sink_options
from spark_jobs.session import spark_session


def transform(df: DataFrame) -> DataFrame:
    return df.select(col("key"), upper(col("value").cast("string")).alias("value"))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--input", default="topic1", help="input topic (default %(default)s)")
    p.add_argument("--output", default="topic2", help="output topic (default %(default)s)")
    args = p.parse_args(argv)
    quiet_logging()
    spark = spark_session("kbroker-uppercase", master=args.master)
    out = transform(read_stream(spark, args, args.input))
    query = sink_options(out.writeStream, args, args.output).queryName("uppercase").start()
    return run(query, "uppercase")


if __name__ == "__main__":
    main()

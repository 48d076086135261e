"""``uppercase`` through the 2pc sink mode, for test_spark_2pc_crash.py (run as a script, like
``python -m spark_jobs.uppercase``): exactlyOnce.mode=2pc, each row's micro-batch id in the
``batch`` header, a gate timeout longer than any batch of the test."""

from __future__ import annotations

from spark_jobs.jobcli import base_parser, quiet_logging, read_stream, run, sink_options
from spark_jobs.session import spark_session
from spark_jobs.uppercase import transform


def main() -> None:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--input", default="topic1")
    p.add_argument("--output", default="topic2")
    args = p.parse_args()
    quiet_logging()
    spark = spark_session("kbroker-uppercase-2pc", master=args.master)
    writer = (sink_options(transform(read_stream(spark, args, args.input)).writeStream, args, args.output)
              .option("exactlyOnce.mode", "2pc").option("kbroker.sink.batchIdHeader", "batch")
              .option("kbroker.sink.2pc.gateTimeoutMs", "600000"))
    run(writer.queryName("uppercase-2pc").start(), "uppercase-2pc")


if __name__ == "__main__":
    main()

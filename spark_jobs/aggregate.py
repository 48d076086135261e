"""``aggregate``: running totals per key and event-time window, written to a compacted topic.

Input records: key = an account (or any grouping key), value = an integer amount as text,
record timestamp = event time. The query keeps a sum and a count per (key, tumbling window) in
Spark's state store, with a watermark so that state of windows older than the watermark is
dropped, and emits changed totals every micro-batch (update mode) through the exactly-once kbroker
sink (through ``foreachBatch``, see spark_jobs/sink.py). The output topic is created with ``cleanup.policy=compact``: the key is ``<key>|<window
start>``, so after compaction the topic holds the latest total of every window.

    python -m spark_jobs.aggregate --bootstrap 127.0.0.1:9092 --input payments --output totals \
        --checkpoint /tmp/totals-ck --window '1 minute' --watermark '10 minutes'
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_jobs import kafka_io
from spark_jobs.jobcli import base_parser, quiet_logging, read_stream, run
from spark_jobs.session import spark_session
from spark_jobs.sink import foreach_batch_sink


def totals(df: DataFrame, window: str, watermark: str) -> DataFrame:
    events = df.select(
        F.col("key").cast("string").alias("key"),
        F.col("value").cast("string").cast("long").alias("amount"),
        F.col("timestamp"),
    )
    agg = (events.withWatermark("timestamp", watermark)
           .groupBy(F.window("timestamp", window), F.col("key"))
           .agg(F.sum("amount").alias("total"), F.count(F.lit(1)).alias("count")))
    start = F.date_format(F.col("window.start"), "yyyy-MM-dd'T'HH:mm:ss'Z'")
    return agg.select(
        F.concat_ws("|", F.col("key"), start).alias("key"),
        F.to_json(F.struct(
            F.col("key"),
            start.alias("window_start"),
            F.date_format(F.col("window.end"), "yyyy-MM-dd'T'HH:mm:ss'Z'").alias("window_end"),
            F.col("total"),
            F.col("count"),
        )).alias("value"),
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--input", default="payments", help="input topic (default %(default)s)")
    p.add_argument("--output", default="totals", help="output topic, created compacted (default %(default)s)")
    p.add_argument("--window", default="1 minute", help="tumbling event-time window (default %(default)s)")
    p.add_argument("--watermark", default="10 minutes", help="event-time watermark delay (default %(default)s)")
    p.add_argument("--output-partitions", type=int, default=2,
                   help="partitions of the output topic when it is created (default %(default)s)")
    args = p.parse_args(argv)
    quiet_logging()
    kafka_io.ensure_topic(kafka_io.admin({"bootstrap.servers": args.bootstrap}), args.output,
                          partitions=args.output_partitions, config={"cleanup.policy": "compact"})
    # Timestamps are formatted in UTC so window keys do not depend on the machine's time zone.
    # Adaptive execution could re-split a replayed batch differently; partitioning must be stable.
    spark = spark_session("kbroker-aggregate", master=args.master,
                          conf={"spark.sql.session.timeZone": "UTC", "spark.sql.adaptive.enabled": "false"})
    out = totals(read_stream(spark, args, args.input), args.window, args.watermark)
    # The Python streaming-sink API accepts append mode only; update mode goes through foreachBatch
    # with the same exactly-once protocol.
    sink_opts = {"kafka.bootstrap.servers": args.bootstrap, "topic": args.output}
    if args.fail_task:
        sink_opts["kbroker.fault.failTask"] = args.fail_task
    writer = (out.writeStream.outputMode("update").foreachBatch(foreach_batch_sink(**sink_opts))
              .option("checkpointLocation", args.checkpoint))
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    elif args.trigger_seconds is not None:
        writer = writer.trigger(processingTime=f"{args.trigger_seconds} seconds")
    return run(writer.queryName("aggregate").start(), "aggregate")


if __name__ == "__main__":
    main()

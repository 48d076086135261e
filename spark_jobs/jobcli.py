"""Command-line plumbing shared by the streaming jobs (argument parsing, triggers, progress summary)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery


def base_parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--bootstrap", default="127.0.0.1:9092", help="kbroker bootstrap servers (default %(default)s)")
    p.add_argument("--checkpoint", required=True, help="Spark checkpoint directory (offsets and state)")
    p.add_argument("--starting-offsets", default="earliest", help="earliest | latest | JSON (first run only)")
    p.add_argument("--max-offsets-per-trigger", type=int, default=None, help="offsets per micro-batch")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--available-now", action="store_true",
                      help="process what is in the topic now (in several batches if limited), then exit")
    mode.add_argument("--trigger-seconds", type=float, default=None, help="micro-batch interval")
    p.add_argument("--master", default=None, help="Spark master (default local[2,4], or spark-submit's --master)")
    p.add_argument("--fail-task", default=None, metavar="BATCH:PARTITION:ROWS[:raise|kill]",
                   help="test hook: fail the first attempt of one sink task mid-batch")
    return p


def read_stream(spark: SparkSession, args: argparse.Namespace, topic: str) -> DataFrame:
    reader = (spark.readStream.format("kbroker")
              .option("kafka.bootstrap.servers", args.bootstrap)
              .option("subscribe", topic)
              .option("startingOffsets", args.starting_offsets))
    if args.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
    return reader.load()


def sink_options(writer: DataStreamWriter, args: argparse.Namespace, topic: str) -> DataStreamWriter:
    writer = (writer.format("kbroker")
              .option("kafka.bootstrap.servers", args.bootstrap)
              .option("topic", topic)
              .option("checkpointLocation", args.checkpoint))
    if args.fail_task:
        writer = writer.option("kbroker.fault.failTask", args.fail_task)
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    elif args.trigger_seconds is not None:
        writer = writer.trigger(processingTime=f"{args.trigger_seconds} seconds")
    return writer


def run(query: StreamingQuery, name: str) -> dict[str, Any]:
    """Wait for the query (until it ends, or Ctrl-C), then print and return a summary line."""
    started = time.monotonic()
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()
    progress = query.recentProgress
    rows = sum(p["numInputRows"] for p in progress if p.get("numInputRows"))
    summary = {
        "job": name,
        "query_id": query.id,
        "batches": len(progress),
        "last_batch_id": progress[-1]["batchId"] if progress else None,
        "input_rows": rows,
        "seconds": round(time.monotonic() - started, 2),
    }
    print(json.dumps(summary), flush=True)
    return summary


def quiet_logging() -> None:
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    # py4j logs every gateway call at INFO.
    logging.getLogger("py4j").setLevel(logging.WARNING)

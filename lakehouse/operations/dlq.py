"""`lakehouse dlq`: inspect the view bronze.dead_letters and replay fixed records (ARCHITECTURE §7).

    stats    dead letters counted by stream and reason, pending and replayed, oldest/newest
    list     one line per dead letter: where it came from, why it failed, its replay state
    show     one dead letter in full, its key and value as a hex dump and as escaped text
    replay   decode the original bytes again with the stream's current decoder (schemas as
             they are now); what now reads replaces its dead row in the stream's bronze
             table, one commit per stream table

Every command takes the same filters (--stream, --reason, --since, --until); by default only
pending dead letters (never successfully replayed) count. The work is done in
lakehouse.operations.dead_letters; this module is its command line, and checks every
argument before Spark starts.
"""

from __future__ import annotations

import argparse
import json

from lakehouse.contracts.bronze_columns import INGESTED_AT
from lakehouse.contracts.error_codes import ERROR_CODES
from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import Settings
from lakehouse.core.spark import get_spark
from lakehouse.operations.dead_letters.filters import TIME_HELP, Filters, parse_filters, parse_record
from lakehouse.operations.dead_letters.text import (
    DEFAULT_MAX_BYTES,
    format_list,
    format_replay,
    format_show,
    format_stats,
)

DEFAULT_LIMIT = 50


def _add_filters(parser: argparse.ArgumentParser, replayed_option: bool = True) -> None:
    group = parser.add_argument_group("filters (default: every pending dead letter)")
    group.add_argument("--stream", action="append", dest="streams", metavar="NAME",
                       help="only this stream of the pipeline file (repeatable)")
    group.add_argument("--reason", action="append", dest="reasons", metavar="CODE",
                       help=f"only this reason (repeatable): {', '.join(ERROR_CODES)}")
    group.add_argument("--since", metavar="TIME", help=f"ingested at or after TIME: {TIME_HELP}")
    group.add_argument("--until", metavar="TIME", help="ingested before TIME (same forms as --since)")
    if replayed_option:
        group.add_argument("--include-replayed", action="store_true",
                           help="also dead letters whose records were replayed into bronze")


def _add_stats(sub) -> None:
    parser = sub.add_parser(
        "stats", help="dead letters counted by stream and reason, pending and replayed",
        description="Counts of bronze.dead_letters by stream and reason: pending (never replayed) and "
                    "replayed, with the oldest and newest ingestion time.")
    _add_filters(parser)
    parser.add_argument("--json", action="store_true", help="as JSON, for machines")


def _add_list(sub) -> None:
    parser = sub.add_parser(
        "list", help="one line per dead letter: where from, why, replay state",
        description="One line per dead letter, oldest first: stream, partition:offset, Kafka timestamp, "
                    "ingestion time, reason, detail (shortened; `dlq show` has it all), replay state.")
    _add_filters(parser)
    parser.add_argument("--limit", type=int, default=DEFAULT_LIMIT, metavar="N",
                        help=f"at most N lines (default {DEFAULT_LIMIT}; 0: all); says how many more match")
    parser.add_argument("--json", action="store_true", help="as JSON, for machines")


def _add_show(sub) -> None:
    parser = sub.add_parser(
        "show", help="one dead letter in full, its key and value as hex dump and escaped text",
        description="Everything about one dead letter: metadata, reason and detail, replay state, then the "
                    "key and the value as a hex dump (offset, bytes, printable ASCII, like `hexdump -C`) and "
                    "as escaped text (valid UTF-8 as text, every control or undecodable byte as an escape: "
                    "nothing raw reaches the terminal). Name the record by its Kafka coordinates, e.g. "
                    "`lakehouse dlq show purchases 0 123` or `lakehouse dlq show purchases:0:123` (any replay "
                    "state); without them, the first dead letters matching the filters (--limit, default 1).")
    parser.add_argument("record", nargs="*", metavar="RECORD",
                        help="STREAM PARTITION OFFSET, or STREAM:PARTITION:OFFSET (as `dlq list` prints)")
    _add_filters(parser)
    parser.add_argument("--limit", type=int, default=1, metavar="N",
                        help="without RECORD: show the first N matching dead letters (default 1)")
    parser.add_argument("--max-bytes", type=int, default=DEFAULT_MAX_BYTES, metavar="N",
                        help=f"show at most N bytes of the key and of the value (default {DEFAULT_MAX_BYTES}; "
                             "0: all)")
    parser.add_argument("--json", action="store_true", help="as JSON (bytes as hex and escaped text)")


def _add_replay(sub) -> None:
    parser = sub.add_parser(
        "replay", help="decode pending dead letters again with the current schemas; readable ones go to bronze",
        description="Re-process the original bytes of the selected pending dead letters with each stream's "
                    "current decoder (e.g. after registering the missing schema or fixing the schema file). "
                    "A record that now reads replaces its dead row in the stream's bronze table, with its "
                    f"original Kafka coordinates and the replay time as {INGESTED_AT}, so the next `dbt run` "
                    "picks it up; the row keeps its bytes and replay state (`dlq list --include-replayed`). "
                    "Records that still fail stay dead, with the new reason. One commit per stream table: "
                    "a replay cut off half way leaves every record once, and the next one takes up the "
                    "rest. Exit status 0 when the replay ran, even if some records still fail (they are "
                    "reported).")
    _add_filters(parser, replayed_option=False)
    parser.add_argument("--dry-run", action="store_true", help="decode and report what would happen, write nothing")
    parser.add_argument("--json", action="store_true", help="the report as JSON")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="dlq_command", required=True, metavar="ACTION")
    for add in (_add_stats, _add_list, _add_show, _add_replay):
        add(sub)


def filters_from_args(args: argparse.Namespace, include_replayed: bool | None = None) -> Filters:
    return parse_filters(args.streams, args.reasons, args.since, args.until,
                         getattr(args, "include_replayed", False) if include_replayed is None else include_replayed)


def checked_arguments(args: argparse.Namespace) -> tuple[Filters, tuple[str, int, int] | None]:
    """The filters and the record named (show), or a LakehouseError: all before Spark starts."""
    record = None
    if args.dlq_command == "show" and args.record:
        record = parse_record(args.record)
        # A record named by its coordinates is shown whatever its replay state.
        filters = filters_from_args(args, include_replayed=True)
    else:
        filters = filters_from_args(args)
    limit = getattr(args, "limit", None)
    if limit is not None and limit < 0:
        raise LakehouseError("--limit must be 0 (all) or more")
    if getattr(args, "max_bytes", 0) < 0:
        raise LakehouseError("--max-bytes must be 0 (all) or more")
    return filters, record


def main(args: argparse.Namespace, settings: Settings) -> int:
    checked_arguments(args)  # everything the user can get wrong, before paying for a Spark start-up
    return run(args, settings, get_spark(settings, app_name="lakehouse-dlq"))


def run(args: argparse.Namespace, settings: Settings, spark) -> int:
    """The command on a given Spark session (main's, or a test's session of its own lakehouse)."""
    filters, record = checked_arguments(args)
    command = args.dlq_command
    if command == "stats":
        _stats(spark, filters, args.json)
    elif command == "list":
        _list(spark, filters, args.limit, args.json)
    elif command == "show":
        _show(spark, filters, record, args.limit, args.max_bytes or None, args.json)
    else:
        _replay(spark, settings, filters, args.dry_run, args.json)
    return 0


# The Spark side (pyspark, the ingestion's decoders) is imported by the functions below, when
# a command runs, so that this module and its argument checks load without pyspark
# (tests/unit/test_dlq.py holds it to that).

def _stats(spark, filters: Filters, as_json: bool) -> None:
    from lakehouse.operations.dead_letters.queries import stats

    summary = stats(spark, filters)
    print(json.dumps(summary, indent=2) if as_json else format_stats(summary))


def _list(spark, filters: Filters, limit: int, as_json: bool) -> None:
    from lakehouse.operations.dead_letters.queries import list_dead_letters

    letters, total = list_dead_letters(spark, filters, limit)
    if as_json:
        print(json.dumps({"total": total, "shown": len(letters), "filters": filters.to_dict(),
                          "dead_letters": [d.to_dict() for d in letters]}, indent=2))
    else:
        print(format_list(letters, total, limit))


def _show(spark, filters: Filters, record: tuple[str, int, int] | None, limit: int, max_bytes: int | None,
          as_json: bool) -> None:
    from lakehouse.operations.dead_letters.queries import find_dead_letters, list_dead_letters

    if record is not None:
        letters = find_dead_letters(spark, *record, filters)
        if not letters:
            stream, partition, offset = record
            raise LakehouseError(f"no dead letter at {stream}:{partition}:{offset} (stream {stream}, "
                                 f"partition {partition}, offset {offset}); `lakehouse dlq list "
                                 f"--stream {stream} --include-replayed` lists them")
    else:
        letters, _ = list_dead_letters(spark, filters, limit)
        if not letters:
            raise LakehouseError(f"no dead letters match ({filters.describe()})")
    if as_json:
        print(json.dumps([d.to_dict(with_bytes=True) for d in letters], indent=2))
    else:
        print("\n\n".join(format_show(d, max_bytes) for d in letters))


def _replay(spark, settings: Settings, filters: Filters, dry_run: bool, as_json: bool) -> None:
    from ingestion.job import read_fault_point
    from lakehouse.operations.dead_letters.replay import replay

    report = replay(spark, settings, filters, dry_run=dry_run, fault_point=read_fault_point())
    print(json.dumps(report.to_dict(), indent=2) if as_json else format_replay(report))

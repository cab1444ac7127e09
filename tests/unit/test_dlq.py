"""`lakehouse dlq`: the pure parts (filters, times, safe display of bytes, summaries, reports)."""

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest

from lakehouse.commands.cli import build_parser
from lakehouse.contracts.error_codes import ERROR_CODES
from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import Settings
from lakehouse.operations import dlq
from lakehouse.operations.dead_letters.filters import Filters, parse_filters, parse_record, parse_time
from lakehouse.operations.dead_letters.queries import Count, DeadLetter, summarize
from lakehouse.operations.dead_letters.replay import ReplayReport, StreamReplay, replay_lock
from lakehouse.operations.dead_letters.text import (
    escape_bytes,
    escape_text,
    format_list,
    format_replay,
    format_show,
    format_stats,
    hex_dump,
    truncate,
)
from tests.conftest import REPO_ROOT

NOW = datetime(2024, 5, 10, 12, 0, 0, tzinfo=UTC)
STREAMS = ("purchases", "user_events")


# --- times and filters -------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("30m", NOW - timedelta(minutes=30)),
    ("2h", NOW - timedelta(hours=2)),
    ("7d", NOW - timedelta(days=7)),
    ("1w", NOW - timedelta(weeks=1)),
    ("90s", NOW - timedelta(seconds=90)),
    (" 2H ", NOW - timedelta(hours=2)),
    ("2024-05-01", datetime(2024, 5, 1, tzinfo=UTC)),
    ("2024-05-01T12:30", datetime(2024, 5, 1, 12, 30, tzinfo=UTC)),
    ("2024-05-01 12:30:15.5", datetime(2024, 5, 1, 12, 30, 15, 500000, tzinfo=UTC)),
    ("2024-05-01T12:30:00Z", datetime(2024, 5, 1, 12, 30, tzinfo=UTC)),
    ("2024-05-01T14:30:00+02:00", datetime(2024, 5, 1, 12, 30, tzinfo=UTC)),
])
def test_times_are_iso_dates_or_ago_and_always_utc(text, expected):
    parsed = parse_time(text, now=NOW)
    assert parsed == expected
    assert parsed.tzinfo is not None and parsed.utcoffset() == timedelta(0)


@pytest.mark.parametrize("text", ["yesterday", "2h ago", "-2h", "2024-13-01", "12:00", "", "7 days"])
def test_an_unreadable_time_names_the_option_and_the_forms(text):
    with pytest.raises(LakehouseError) as error:
        parse_time(text, "--until", now=NOW)
    message = str(error.value)
    assert message.startswith(f"invalid --until {text!r}: use ")
    assert "30m" in message and "2024-05-01" in message and "\n" not in message


def test_filters_become_one_sql_predicate():
    filters = parse_filters(["purchases", "purchases"], ["unknown_schema_id", "CORRUPT_PAYLOAD"], "2h",
                                "2024-05-10T11:30:00", known_streams=STREAMS, now=NOW)
    assert filters.streams == ("purchases",)  # repeats collapse
    assert filters.reasons == ("UNKNOWN_SCHEMA_ID", "CORRUPT_PAYLOAD")  # codes are case-insensitive
    assert filters.where_sql() == (
        "stream in ('purchases') and error_code in ('UNKNOWN_SCHEMA_ID', 'CORRUPT_PAYLOAD') "
        "and ingested_at >= timestamp'2024-05-10 10:00:00.000000+00:00' "
        "and ingested_at < timestamp'2024-05-10 11:30:00.000000+00:00' and replayed_at is null")


def test_the_default_is_every_pending_dead_letter():
    assert parse_filters(known_streams=STREAMS).where_sql() == "replayed_at is null"
    assert parse_filters(include_replayed=True, known_streams=STREAMS).where_sql() == "true"


def test_sql_literals_are_quoted():
    assert Filters(streams=("it's\\",)).where_sql() == "stream in ('it\\'s\\\\') and replayed_at is null"


def test_an_unknown_stream_or_reason_is_one_line_naming_the_choices():
    with pytest.raises(LakehouseError) as error:
        parse_filters(["purchase"], known_streams=STREAMS)
    assert str(error.value) == "unknown stream 'purchase' for --stream; configured streams: purchases, user_events"
    with pytest.raises(LakehouseError) as error:
        parse_filters(reasons=["CORRUPT"], known_streams=STREAMS)
    assert str(error.value).startswith("unknown reason 'CORRUPT' for --reason; reasons: CORRUPT_PAYLOAD, ")
    assert all(code in str(error.value) for code in ERROR_CODES)


def test_streams_default_to_the_pipeline_file():
    assert parse_filters(["purchases", "customers"]).streams == ("purchases", "customers")
    with pytest.raises(LakehouseError, match="unknown stream 'nope'.*purchases"):
        parse_filters(["nope"])


def test_since_must_be_before_until():
    with pytest.raises(LakehouseError, match=r"^--since \(2024-05-10 11:00:00\) is not before --until"):
        parse_filters(since="1h", until="2h", known_streams=STREAMS, now=NOW)


@pytest.mark.parametrize(("parts", "expected"), [
    (["purchases", "0", "123"], ("purchases", 0, 123)),
    (["purchases:2:7"], ("purchases", 2, 7)),
])
def test_a_record_is_named_by_its_coordinates(parts, expected):
    assert parse_record(parts, STREAMS) == expected


@pytest.mark.parametrize(("parts", "message"), [
    (["purchases"], "give the dead letter as STREAM PARTITION OFFSET or STREAM:PARTITION:OFFSET"),
    (["purchases", "0"], "give the dead letter as"),
    (["purchases:0:x"], "partition and offset must be whole numbers"),
    (["purchases", "-1", "3"], "partition and offset must be whole numbers"),
    (["orders:0:1"], "unknown stream 'orders'; configured streams: purchases, user_events"),
])
def test_a_bad_record_is_a_clear_error(parts, message):
    with pytest.raises(LakehouseError, match=message):
        parse_record(parts, STREAMS)


# --- safe display --------------------------------------------------------------------------------

def test_hex_dump_looks_like_hexdump_c():
    data = b"Hello\n\x1b[31m\x00\xff0123456789abcdefXYZ"
    # `printf 'Hello\n\x1b[31m\x00\xff0123456789abcdefXYZ' | hexdump -C`
    assert hex_dump(data) == [
        "00000000  48 65 6c 6c 6f 0a 1b 5b  33 31 6d 00 ff 30 31 32  |Hello..[31m..012|",
        "00000010  33 34 35 36 37 38 39 61  62 63 64 65 66 58 59 5a  |3456789abcdefXYZ|",
        "00000020",
    ]
    short = hex_dump(b"\x00\x01abc")
    # `printf '\x00\x01abc' | hexdump -C`
    assert short == ["00000000  00 01 61 62 63                                    |..abc|", "00000005"]
    assert short[0].index("|") == hex_dump(data)[0].index("|")  # the ASCII column lines up


def test_hex_dump_of_nothing_and_of_too_much():
    assert hex_dump(None) == ["(null)"]
    assert hex_dump(b"") == ["(empty)"]
    lines = hex_dump(bytes(range(256)) * 4, max_bytes=32)
    assert len(lines) == 4 and lines[2] == "00000020"
    assert lines[3] == "... 992 more bytes (--max-bytes 0 shows all)"


def test_no_dump_line_holds_a_control_character():
    every_byte = bytes(range(256))
    for line in hex_dump(every_byte) + [escape_bytes(every_byte)]:
        assert line.isprintable(), line


@pytest.mark.parametrize(("data", "shown"), [
    (b"plain text", '"plain text"'),
    (b'say "hi"\n', '"say \\"hi\\"\\n"'),
    (b"\x1b[2J\x07bell\r\t", '"\\x1b[2J\\x07bell\\r\\t"'),
    (b"\x00\x00\x00\x00\x05", '"\\x00\\x00\\x00\\x00\\x05"'),
    (b"caf\xc3\xa9 \xe2\x82\xac", '"café €"'),  # valid UTF-8 stays readable
    (b"\xff\xfe bad \xc3", '"\\xff\\xfe bad \\xc3"'),  # undecodable bytes, one escape each
    (b"back\\slash", '"back\\\\slash"'),  # a backslash cannot be mistaken for an escape
    ("\u202eevil".encode(), '"\\u202eevil"'),  # a bidi override would reorder the terminal line
    ("\u0085".encode(), '"\\x85"'),  # C1 control, valid UTF-8
    (b"\xed\xb2\x80", '"\\xed\\xb2\\x80"'),  # an encoded surrogate is not UTF-8
    (b"", '""'),
    (None, "(null)"),
])
def test_escaped_text_never_carries_a_control_byte(data, shown):
    assert escape_bytes(data) == shown
    assert shown.isprintable()


def test_escaped_text_can_be_cut_short():
    assert escape_bytes(b"abcdef", max_bytes=2) == '"ab" ... 4 more bytes'


def test_escape_text_for_details():
    assert escape_text("line one\nline two\x1b") == "line one\\nline two\\x1b"
    assert truncate("x" * 10, 8) == "xxxxx..." and truncate("short", 8) == "short"


# --- stats, list, show, replay report ------------------------------------------------------------

def at(minutes: int) -> datetime:
    return NOW + timedelta(minutes=minutes)


COUNTS = [
    Count("purchases", "UNKNOWN_SCHEMA_ID", False, 5, at(0), at(10)),
    Count("purchases", "UNKNOWN_SCHEMA_ID", True, 3, at(-5), at(2)),
    Count("purchases", "CORRUPT_PAYLOAD", False, 1200, at(1), at(1)),
    Count("user_events", "SCHEMA_MISMATCH", False, 2, at(30), at(40)),
]


def test_summary_counts_by_stream_and_reason_pending_and_replayed():
    summary = summarize(COUNTS, Filters(include_replayed=True))
    assert summary["total"] == {"pending": 1207, "replayed": 3, "oldest_ingested_at": at(-5).isoformat(),
                                "newest_ingested_at": at(40).isoformat()}
    purchases = summary["streams"]["purchases"]
    assert (purchases["pending"], purchases["replayed"]) == (1205, 3)
    assert purchases["reasons"]["UNKNOWN_SCHEMA_ID"] == {
        "pending": 5, "replayed": 3, "oldest_ingested_at": at(-5).isoformat(), "newest_ingested_at": at(10).isoformat()}
    assert list(summary["streams"]) == ["purchases", "user_events"]
    assert summary["filters"]["include_replayed"] is True
    json.dumps(summary)  # plain data: what --json prints


def test_stats_table_is_aligned_with_subtotals_and_a_total():
    text = format_stats(summarize(COUNTS))
    lines = text.splitlines()
    assert lines[0].split() == ["STREAM", "REASON", "PENDING", "REPLAYED", "OLDEST", "INGESTED", "(UTC)", "NEWEST",
                                "INGESTED", "(UTC)"]
    assert lines[1].split() == ["purchases", "CORRUPT_PAYLOAD", "1,200", "0", "2024-05-10", "12:01:00", "2024-05-10",
                                "12:01:00"]
    assert lines[2].split()[:4] == ["purchases", "UNKNOWN_SCHEMA_ID", "5", "3"]
    assert lines[3].split()[:5] == ["purchases", "(all", "reasons)", "1,205", "3"]
    assert lines[4].split()[:3] == ["user_events", "SCHEMA_MISMATCH", "2"]  # one reason: no subtotal
    assert lines[5].split()[:3] == ["total", "1,207", "3"]
    # numbers right-aligned in one column
    ends = {line.index(word) + len(word) for line, word in zip(lines[1:], ["1,200", "5", "1,205", "2", "1,207"],
                                                                strict=True)}
    assert len(ends) == 1


def test_stats_of_nothing_says_so_and_how_to_see_more():
    assert format_stats(summarize([])) == (
        "no dead letters match (pending only; --include-replayed counts replayed ones too)")
    assert format_stats(summarize([], Filters(include_replayed=True))) == "no dead letters match"


def letter(**changes) -> DeadLetter:
    base = dict(stream="purchases", topic="purchases", partition=1, offset=42, kafka_timestamp=at(0),
                key=b"txn-1", value=b"\x00\x00\x00\x00\x07\x02\x1b[31m", error_code="UNKNOWN_SCHEMA_ID",
                error_detail="schema id 7 is not registered for this stream", schema_id=None, ingested_at=at(1),
                batch_id=3)
    return DeadLetter(**{**base, **changes})


def test_replay_state_of_a_dead_letter():
    assert letter().state() == "pending"
    assert letter(replay_attempts=2, last_replay_at=at(5)).state() == "pending (2 attempts, last 2024-05-10 12:05:00)"
    assert letter(replay_attempts=1, replayed_at=at(9), last_replay_at=at(9)).state() == (
        "replayed 2024-05-10 12:09:00 (1 attempt)")


def test_list_lines_are_aligned_and_say_how_many_more_exist():
    letters = [letter(), letter(partition=0, offset=7, error_code="CORRUPT_PAYLOAD", error_detail="x\x1b" * 80,
                                replay_attempts=1, last_replay_at=at(3))]
    text = format_list(letters, total=120, limit=2)
    lines = text.splitlines()
    assert lines[0].split()[:2] == ["STREAM", "PARTITION:OFFSET"]
    assert lines[1].split()[:7] == ["purchases", "1:42", "2024-05-10", "12:00:00", "2024-05-10", "12:01:00",
                                    "UNKNOWN_SCHEMA_ID"]
    assert lines[1].endswith("pending")
    assert "0:7" in lines[2] and lines[2].endswith("pending (1 attempt, last 2024-05-10 12:03:00)")
    assert "x\\x1bx\\x1b" in lines[2] and "\x1b" not in text  # detail escaped and shortened
    assert len(lines[2].split("  ")) < 20  # not the whole 80-fold detail
    assert lines[1].index("UNKNOWN") == lines[2].index("CORRUPT")  # columns line up
    assert lines[3] == "showing 2 of 120: 118 more (--limit 0 shows all, or narrow the filters)"
    assert format_list(letters, total=2, limit=50).splitlines()[-1] == "2 dead letters"
    assert format_list([], total=0, limit=50) == "no dead letters match"


def test_show_prints_metadata_and_the_bytes_safely():
    text = format_show(letter(key=None, schema_id=7))
    assert "\x1b" not in text and "\x00" not in text
    lines = text.splitlines()
    assert lines[0] == "dead letter purchases:1:42"
    assert "  reason           UNKNOWN_SCHEMA_ID (the registry schema id in the message header is not known)" in lines
    assert "  detail           schema id 7 is not registered for this stream" in lines
    assert "  schema id        7" in lines and "  replay           pending" in lines
    assert "key (null):" in lines
    at_value = lines.index("value (11 bytes):")
    assert lines[at_value + 1] == "  00000000  00 00 00 00 07 02 1b 5b  33 31 6d                 |.......[31m|"
    assert lines[at_value + 2] == "  0000000b"
    assert lines[at_value + 3] == '  escaped: "\\x00\\x00\\x00\\x00\\x07\\x02\\x1b[31m"'


def test_show_of_an_empty_value_and_json_form():
    text = format_show(letter(value=b""))
    assert "value (0 bytes):\n  (empty)\n  escaped: \"\"" in text
    data = letter().to_dict(with_bytes=True)
    assert data["value_hex"] == "0000000007021b5b33316d" and data["value_text"].startswith('"\\x00')
    assert data["key_size"] == 5 and data["state"] == "pending" and data["ingested_at"] == at(1).isoformat()
    assert "value_hex" not in letter().to_dict()
    json.dumps(data)


def test_replay_report_per_stream():
    report = ReplayReport("r-1", False, NOW, Filters(streams=("purchases",)), streams=[
        StreamReplay("purchases", "bronze.purchases", selected=12, replayed=10,
                     still_failing={"UNKNOWN_SCHEMA_ID": 2}, schema_changes=["bronze.purchases: add column x"]),
    ], marked=12)
    assert format_replay(report).splitlines() == [
        "replay r-1",
        "purchases: 12 selected, 10 replayed into bronze.purchases, 2 still failing: UNKNOWN_SCHEMA_ID 2",
        "  schema: bronze.purchases: add column x",
        "12 dead rows replaced or marked, one commit per stream table (still-failing ones stay dead, with their "
        "new reason)",
    ]
    data = report.to_dict()
    assert (data["selected"], data["replayed"], data["still_failing"]) == (12, 10, 2)
    assert data["streams"][0]["still_failing"] == {"UNKNOWN_SCHEMA_ID": 2}
    json.dumps(data)


def test_replay_report_of_a_dry_run_and_of_nothing():
    dry = ReplayReport("r-2", True, NOW, streams=[
        StreamReplay("purchases", "bronze.purchases", selected=3, replayed=3),
        StreamReplay("user_events", "bronze.user_events", selected=1, still_failing={"SCHEMA_MISMATCH": 1}),
    ])
    assert format_replay(dry).splitlines() == [
        "replay r-2 (dry run: decoded only, nothing written)",
        "purchases: 3 selected, 3 would be replayed into bronze.purchases, 0 still failing",
        "user_events: 1 selected, 0 would be replayed into bronze.user_events, 1 still failing: SCHEMA_MISMATCH 1",
        "total: 4 selected, 3 would be replayed, 1 still failing",
    ]
    nothing = ReplayReport("r-3", False, NOW, Filters(streams=("purchases",)))
    assert format_replay(nothing).splitlines()[1] == (
        "nothing to replay: no dead letters match (pending; stream purchases)")


def test_one_replay_at_a_time_and_the_second_says_so_at_once(tmp_path):
    settings = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path)})
    with replay_lock(settings):
        with pytest.raises(LakehouseError) as refused:
            with replay_lock(settings):
                pass
    assert str(refused.value) == (
        f"another `lakehouse dlq replay` is running on this lakehouse (lock {tmp_path}/locks/dlq-replay.lock): "
        "wait for it to finish")
    with replay_lock(settings):  # released by the first
        pass


# --- command line --------------------------------------------------------------------------------

@pytest.mark.parametrize("action", ["stats", "list", "show", "replay"])
def test_every_action_explains_itself(action, capsys):
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["dlq", action, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "--stream NAME" in out and "--reason CODE" in out and "--since TIME" in out


def test_arguments_reach_main():
    args = build_parser().parse_args(["dlq", "show", "purchases:0:5", "--max-bytes", "64"])
    assert (args.dlq_command, args.record, args.max_bytes) == ("show", ["purchases:0:5"], 64)
    args = build_parser().parse_args(["dlq", "replay", "--stream", "purchases", "--stream", "user_events",
                                      "--reason", "UNKNOWN_SCHEMA_ID", "--since", "2h", "--dry-run"])
    assert args.streams == ["purchases", "user_events"] and args.dry_run and args.reasons == ["UNKNOWN_SCHEMA_ID"]
    assert dlq.filters_from_args(args).streams == ("purchases", "user_events")


def test_the_module_imports_no_pyspark():
    code = "import sys, lakehouse.operations.dlq; sys.exit(any(m.startswith('pyspark') for m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, timeout=60).returncode == 0


def test_the_cli_reports_mistakes_in_one_line_before_spark(tmp_path):
    # Caught before Spark starts: no jars are needed (an empty state folder), no Spark job ran.
    code = ("import sys; from lakehouse.commands.cli import main; rc = main(sys.argv[1:]); "
            "from pyspark.sql import SparkSession; assert SparkSession.getActiveSession() is None; sys.exit(rc)")
    env = {"LAKEHOUSE_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    for argv, message in [
        (["dlq", "list", "--reason", "BOGUS"], "error: unknown reason 'BOGUS' for --reason; reasons: "),
        (["dlq", "stats", "--since", "last week"], "error: invalid --since 'last week': use "),
        (["dlq", "show", "purchases", "0"], "error: give the dead letter as STREAM PARTITION OFFSET"),
        (["dlq", "list", "--limit", "-1"], "error: --limit must be 0 (all) or more"),
    ]:
        result = subprocess.run([sys.executable, "-c", code, *argv], cwd=REPO_ROOT, env=env,
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 1, result.stderr
        assert result.stderr.startswith(message) and result.stderr.count("\n") == 1, result.stderr
        assert "Traceback" not in result.stderr and result.stdout == ""

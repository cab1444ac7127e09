"""The ingestion job names an unwritable checkpoint folder and its OS error in one line."""

from ingestion.job import _checkpoint_write_error, checkpoint_problem


def test_a_writable_folder_has_no_problem(tmp_path):
    assert checkpoint_problem(str(tmp_path / "checkpoints" / "bronze_x")) is None
    assert not list((tmp_path / "checkpoints" / "bronze_x").iterdir())  # the probe cleaned up


def test_a_folder_that_cannot_be_created_is_named_with_its_os_error(tmp_path):
    (tmp_path / "checkpoints").write_text("a file where the folder should be")
    assert checkpoint_problem(str(tmp_path / "checkpoints" / "bronze_x")) == "Not a directory"


def test_remote_checkpoints_are_not_probed():
    assert checkpoint_problem("s3://bucket/checkpoints/bronze_x") is None


class FakeQueryError(Exception):
    def __init__(self, text: str, stack: str):
        super().__init__(text)
        self._stackTrace = stack


def test_a_failed_checkpoint_write_is_recognised_in_the_jvm_stack():
    error = FakeQueryError("java.io.IOException: No space left on device",
                           "at o.a.s.sql.execution.streaming.HDFSMetadataLog.write(HDFSMetadataLog.scala:207)")
    assert _checkpoint_write_error(error, "/state/checkpoints/bronze_x") == "No space left on device"


def test_a_disk_error_elsewhere_is_not_blamed_on_the_checkpoint():
    error = FakeQueryError("java.io.IOException: No space left on device", "at org.apache.iceberg.io.FileAppender")
    assert _checkpoint_write_error(error, "/state/checkpoints/bronze_x") is None

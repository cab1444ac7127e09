"""`python -m ingestion ...` and `spark-submit ingestion/__main__.py ...` (`lakehouse submit`):
the same job as `lakehouse ingest ...`, with the same arguments, errors and exit codes."""

import argparse
import sys

# spark-submit puts the --py-files zip first on the driver's path, and the SparkContext adds
# its copy again when it starts. That zip is for executors' Python workers; the driver runs
# the installed project, which reads its data files (pipeline.yml, schemas) from disk. So the
# zip leaves the path, and the project's packages the driver needs are imported now, from
# disk: a submodule imported later is looked up in its package's folder, never on sys.path.
sys.path[:] = [entry for entry in sys.path if not entry.endswith("lakehouse-jobs.zip")]

import ingestion  # noqa: E402, F401
import lakehouse  # noqa: E402, F401
from ingestion import job  # noqa: E402
from lakehouse.core.entry import add_log_format_argument, run_command  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ingestion", description=job.__doc__.split("\n\n")[0])
    job.add_arguments(parser)
    add_log_format_argument(parser)
    return run_command(job.main, parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
